"""What rank 0 keeps of a real run that failed: the rows every surviving worker saved, merged into the run's
tables (real/partial.py holds the files), and the plan the tables use."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

from policies.membership import Membership
from real import partial
from real.results import assemble, write
from sim.config import Config
from sim.numerics.batches import per_worker_batch


def keep_partial(
    config: Config,
    cluster: Any,
    plan: Any,
    task: Any,
    runs: list[Any],
    index: int,
    error: str,
    out: Path,
    wait_s: float,
    run_id: str,
    membership: Optional[Membership] = None,
) -> None:
    """Rank 0, after a failure: the policy's rows every surviving worker saved (this run's files in
    `<out>/partial/`, real/partial.py: plain data, never unpickled objects), marked failed; the
    files are deleted once merged. `membership`: who trained which step (scored as `assemble` says)."""
    deadline = time.monotonic() + min(wait_s, 10.0)
    seen = -1
    while time.monotonic() < deadline:  # the others save theirs as their own timeouts fire
        found = len(partial.files(out, index, run_id))
        if found == seen:
            break
        seen = found
        time.sleep(1.0)
    reports = partial.read(out, index, run_id)
    entry = config.policies[index]
    run = assemble(entry, task, reports, 0.0, membership=membership)
    run.error = error
    write(config, cluster, real_plan(config, plan, cluster), [*runs, run], out)
    partial.clear(out)


def real_plan(config: Config, plan: Any, cluster: Any) -> Any:
    """The plan the tables use: a worker's real batch is the numerics batch, not the workload's."""
    assert config.numerics is not None
    return replace(plan, batch_size=per_worker_batch(config.numerics.global_batch, cluster.world_size))
