"""What one compressed step of `powersgd` issues per worker, counted from the buckets' tensor shapes the way
policies/powersgd.py's program issues it (the cost estimate's `sim.estimate.counts` turns it into events).

Per bucket, from step `warmup_steps` on: three all-reduces of all ranks (the tensors it does not factor, P,
Q), and the local ops Combine x 3 (with `error_feedback`), Orthogonalize x 2, Project x 2, Reconstruct,
Pack and Unpack, plus a RandomFill of Q at the first compressed step (every compressed step without
`warm_start`). The engine runs a local op as a timeout of the worker that issues it, and none at all when
the op takes no time (sim/engine/launches.py): the factor ops of a bucket that factors no matrix, and Pack
and Unpack of one that factors every tensor, move nothing. Their all-reduces still run, with nothing in them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from policies.lowrank import LowRank, Shape

ALL_REDUCES = 3  # per bucket: the rest, P, Q
FEEDBACK_OPS = 3  # Combine: the residual into the gradient, the copy, the new residual
FACTOR_OPS = 5  # Orthogonalize Q, Project M Q, Orthogonalize P, Project M^T P, Reconstruct P Q^T
REST_OPS = 2  # Pack, Unpack


@dataclass(frozen=True)
class CompressedStep:
    """One compressed step over all buckets, per worker."""

    all_reduces: int  # every one issued
    empty: int  # of which carry no values
    local_ops: int  # local ops that take time, RandomFill aside
    draws: int  # buckets with a factored matrix: a RandomFill each when Q is drawn


def compressed_step(settings: Any, bucket_shapes: Sequence[Sequence[Shape]], buckets: int) -> CompressedStep:
    """The counts of one compressed step of a powersgd policy with `settings` (rank, min_compression_rate,
    error_feedback); `bucket_shapes`: each bucket's tensor shapes, () when the model gives none (the policy
    refuses to bind then; every bucket counts as factoring a matrix and keeping a rest)."""
    lowrank = LowRank(settings.rank, settings.min_compression_rate)
    layouts = [lowrank.layout(shapes) for shapes in bucket_shapes]
    factored = sum(1 for layout in layouts if layout.matrices) if layouts else buckets
    kept = sum(1 for layout in layouts if layout.rest_values > 0) if layouts else buckets
    feedback = FEEDBACK_OPS * buckets if settings.error_feedback else 0
    empty = (buckets - factored) * 2 + (buckets - kept)  # no matrix: P and Q are empty; no rest: the rest is
    return CompressedStep(ALL_REDUCES * buckets, empty, feedback + FACTOR_OPS * factored + REST_OPS * kept, factored)
