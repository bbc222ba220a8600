"""PowerSGD: every bucket's matrices sent as rank-r factors, found by one step of power iteration.

Vogels, Karimireddy and Jaggi, "PowerSGD: Practical Low-Rank Gradient Compression for Distributed
Optimization", NeurIPS 2019 (arXiv 1905.13727), as PyTorch's DDP hook `powerSGD_hook` runs it
(torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook). Per bucket, from step `warmup_steps` on:

1. error feedback: the gradient gets the residual the bucket kept last time, and a copy of the sum is kept;
2. the first time (or every time without `warm_start`) Q is drawn from a standard normal, seeded from
   `seed` as the hook seeds it; Q is orthogonalized, and P = M Q for every matrix the codec factors
   (`policies.lowrank`: tensors whose factors are smaller by more than `min_compression_rate`);
3. three all-reduces of the bucket over all ranks, in this order: the tensors it does not factor (biases,
   small matrices) as they are; the P factors (then orthogonalized; Q = M^T P); the Q factors;
4. M = P Q^T, and the residual becomes the copy minus what the bucket now holds.

Before `warmup_steps` a bucket is all-reduced as it is (`ring`). The all-reduces average (the hook sums P
and orthogonalizes it, which scale does not change, so the two differ by round-off only). Written with the
public primitives of `policies.factor_ops` and `policies.tensors`; docs/policies.md, "PowerSGD".
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from policies.base import Bucket, Policy, SettingError
from policies.factor_ops import Orthogonalize, Pack, Project, RandomFill, Reconstruct, Unpack
from policies.lowrank import FactorBuffer, LowRank
from policies.ops import AllReduce, Combine, Group, Program
from policies.tensors import GRADIENTS, Buffer
from policies.view import ClusterView, ModelInfo
from policies.warmup import WarmupSettings

ERROR, COPY, P, Q, REST = "powersgd_error", "powersgd_input", "powersgd_p", "powersgd_q", "powersgd_rest"
SEED_BOUND = 1_000_000_000  # the hook seeds each draw with numpy's RandomState(seed).randint(SEED_BOUND)


class PowerSGDSettings(WarmupSettings):
    rank: int = Field(1, ge=1, le=1024, description="matrix approximation rank r (1 to 1024)")
    min_compression_rate: float = Field(
        2.0, ge=0, le=1e6, description="factor a matrix only if its factors are smaller by more than this"
    )
    error_feedback: bool = Field(True, description="add each bucket's last residual to its gradient")
    warm_start: bool = Field(True, description="start each step's power iteration from the last Q")
    orthogonalization_epsilon: float = Field(0.0, ge=0, le=1, description="added to each column's norm")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="seed of the random Q draws (numpy RandomState)")


class PowerSGD(Policy):
    """Per bucket, from step `warmup_steps`: error feedback, P = M Q, all-reduce of the rest, of P, of Q,
    M = P Q^T (the module's text). Earlier steps all-reduce the bucket as it is."""

    name = "powersgd"
    Settings = PowerSGDSettings

    def bind(self, view: ClusterView, model: ModelInfo) -> None:
        super().bind(view, model)
        s = self.settings
        if len(model.bucket_shapes) != len(model.bucket_bytes):
            raise SettingError(
                "rank", "powersgd factors the model's tensors, and the workload's model gives no tensor shapes"
            )
        self.world = Group.of(range(view.world_size))
        self.lowrank = LowRank(s.rank, s.min_compression_rate)
        self.value_bytes = 1.0 / model.gradient_values(1.0)  # bytes of one gradient value (P, Q travel in it)
        self._seeds: list[int] = []
        self._draws = np.random.RandomState(s.seed)

    @property
    def host_symmetric(self) -> bool:
        """Every all-reduce is over all ranks, and every rank draws the same seeds; a subclass may issue
        other ops, so it says so itself."""
        return type(self) is PowerSGD

    def buffers(self) -> tuple[Buffer | FactorBuffer, ...]:
        feedback = (Buffer(ERROR), Buffer(COPY)) if self.settings.error_feedback else ()
        factors = tuple(FactorBuffer(name, self.lowrank, side) for name, side in ((P, "p"), (Q, "q"), (REST, "rest")))
        return feedback + factors

    def seed(self, draw: int) -> int:
        """The seed of the hook's `draw`-th random Q fill: draws go bucket by bucket, step by step."""
        while len(self._seeds) <= draw:
            self._seeds.append(int(self._draws.randint(SEED_BOUND)))
        return self._seeds[draw]

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        s = self.settings
        if step < s.warmup_steps:
            yield AllReduce(self.world, bucket.nbytes)
            return
        layout = self.lowrank.layout(self.bound_model.bucket_shapes[bucket.index])
        if s.error_feedback:
            yield Combine(GRADIENTS, ((1.0, GRADIENTS), (1.0, ERROR)))
            yield Combine(COPY, ((1.0, GRADIENTS),))
        if not s.warm_start or step == s.warmup_steps:
            draw = (step - s.warmup_steps) * bucket.count + bucket.index if not s.warm_start else bucket.index
            yield RandomFill(Q, self.seed(draw))
        yield Orthogonalize(Q, s.orthogonalization_epsilon)
        yield Project(GRADIENTS, Q, P)
        yield Pack(GRADIENTS, REST)
        yield AllReduce(self.world, layout.rest_values * self.value_bytes, tensor=REST)
        yield Unpack(REST, GRADIENTS)
        yield AllReduce(self.world, layout.p_values * self.value_bytes, tensor=P)
        yield Orthogonalize(P, s.orthogonalization_epsilon)
        yield Project(GRADIENTS, P, Q, transpose=True)
        yield AllReduce(self.world, layout.q_values * self.value_bytes, tensor=Q)
        yield Reconstruct(GRADIENTS, P, Q)
        if s.error_feedback:
            yield Combine(ERROR, ((1.0, COPY), (-1.0, GRADIENTS)))
