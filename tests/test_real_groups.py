"""A policy's process groups on the real backend (real/groups.py, real/session.py, real/transport.py):
each gets the run's `--timeout`, is set up before the policy's clock starts and destroyed when the
policy ends, and a frozen peer ends a barrier on the control group within the timeout. The
lifecycle is checked in-process against a recording stand-in for torch.distributed; the timeout on
a real 2-process gloo world (~5 s)."""

from __future__ import annotations

import json
import os
import socket
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from helpers import two_tier  # noqa: E402
from test_real_units import bound  # noqa: E402

from policies.ops import Group  # noqa: E402
from real import groups as groups_module  # noqa: E402
from real import session, transport  # noqa: E402
from real.groups import ProcessGroups, planned_groups  # noqa: E402
from real.layout import placement  # noqa: E402
from sim.api import _prepare  # noqa: E402
from sim.config import parse_config  # noqa: E402

TIMEOUT = 2.0
ENDS_WITHIN_S = TIMEOUT + 120.0  # loose: load stretches a barrier by seconds, a missed timeout never ends


class RecordingDist:
    """torch.distributed's calls the session makes around a policy, recorded in order; a process
    outside a group gets the non-member placeholder, as from `new_group`."""

    NON_MEMBER = "non-member"

    def __init__(self, rank: int) -> None:
        self.rank, self.calls, self._made = rank, [], 0

    def new_group(self, ranks: Any = None, timeout: Any = None, backend: Any = None) -> Any:
        self._made += 1
        self.calls.append(("new_group", tuple(ranks or ()), timeout))
        return f"pg{self._made}" if ranks is None or self.rank in ranks else self.NON_MEMBER

    def all_reduce(self, *args: Any, group: Any = None) -> None:
        self.calls.append(("all_reduce", group))

    def all_gather(self, *args: Any, group: Any = None) -> None:
        self.calls.append(("all_gather", group))

    def all_to_all_single(self, *args: Any, group: Any = None) -> None:
        self.calls.append(("all_to_all_single", group))

    def barrier(self, group: Any = None) -> None:
        self.calls.append(("barrier", group))

    def gather_object(self, *args: Any, group: Any = None, **kwargs: Any) -> None:
        self.calls.append(("gather_object", group))

    def destroy_process_group(self, group: Any = None) -> None:
        self.calls.append(("destroy", group))


def stub_run(recorder: RecordingDist) -> type:
    """The policy's run itself, replaced by a mark where its clock starts."""

    class StubRun:
        def __init__(self, *args: Any) -> None:
            self.t0, self.report = 0.0, None

        def worker_setup(self) -> None:
            recorder.calls.append(("clock started",))

        def shard_setup(self, spec: Any) -> None:
            recorder.calls.append(("clock started",))

        def phases(self) -> None:
            pass

        def finish(self) -> None:
            pass

    return StubRun


def _run_one_policy(monkeypatch: pytest.MonkeyPatch, policy: dict, rank: int) -> tuple[list, list[Group]]:
    """`session._run_policy` for `policy` on 4 workers as `rank`, with torch.distributed recorded:
    the calls in order, and the groups the policy plans."""
    config = parse_config(
        {
            "iterations": 3,
            "cluster": two_tier(2, 2, 12.5, 25),
            "workload": {"model": "synthetic", "gradient_mb": 8, "compute_ms": 1, "synthetic_layers": 2},
            "numerics": {"dataset": "digits", "model": "logreg", "global_batch": 8},
            "policies": [policy],
        }
    )
    cluster, plan, task = _prepare(config)
    recorder = RecordingDist(rank)
    monkeypatch.setattr(session, "dist", recorder)
    monkeypatch.setattr(groups_module, "dist", recorder)
    monkeypatch.setattr(session, "_RankRun", stub_run(recorder))
    trained = type("Trained", (), {"device": torch.device("cpu")})()
    need = placement(config)
    heartbeat = type("Quiet", (), {"mark": lambda self, state: None})()
    session._run_policy(config, 0, cluster, plan, task, trained, need, rank, TIMEOUT, heartbeat, Path("unused"), "0")
    pol, buckets = bound(policy)
    return recorder.calls, planned_groups(pol, 4, config.iterations, buckets)


@pytest.mark.parametrize("rank", [1, 3])
def test_a_policys_groups_get_the_timeout_are_set_up_before_its_clock_and_destroyed_after(
    monkeypatch: pytest.MonkeyPatch, rank: int
) -> None:
    calls, planned = _run_one_policy(monkeypatch, {"name": "hierarchical", "level": "rack"}, rank)
    assert len(planned) == 4  # the rack pairs and the pairs across racks
    made = [c for c in calls if c[0] == "new_group"]
    # every group, the decision group last, waits at most --timeout for a peer
    assert [c[1] for c in made] == [tuple(sorted(g.ranks)) for g in planned] + [(0, 1, 2, 3)]
    assert {c[2] for c in made} == {timedelta(seconds=TIMEOUT)}
    handles = [f"pg{i + 1}" if rank in g.ranks else RecordingDist.NON_MEMBER for i, g in enumerate(planned)]
    mine = [pg for pg in handles if pg != RecordingDist.NON_MEMBER]
    clock = calls.index(("clock started",))
    before = calls[:clock]
    # one all-reduce, all-gather and all-to-all on each of this rank's groups, in creation order, before
    # the barrier that starts the clock
    warm = [c for c in before if c[0] in ("all_reduce", "all_gather", "all_to_all_single")]
    assert warm == [(name, pg) for pg in mine for name in ("all_reduce", "all_gather", "all_to_all_single")]
    assert before[-1] == ("barrier", None) and calls.index(warm[-1]) < len(before) - 1
    # after the closing barrier every group is destroyed, the ones it is outside of too (a no-op there)
    after = calls[clock:]
    destroyed = [c[1] for c in after if c[0] == "destroy"]
    assert destroyed == [*handles, "pg5"]
    first = next(i for i, c in enumerate(after) if c[0] == "destroy")
    assert first > max(i for i, c in enumerate(after) if c[0] == "barrier")


def test_a_shard_rank_warms_up_nothing_and_frees_its_placeholders(monkeypatch: pytest.MonkeyPatch) -> None:
    calls, planned = _run_one_policy(monkeypatch, {"name": "ps"}, 4)
    assert planned == []
    assert [c[0] for c in calls if c[0] not in ("new_group", "destroy")] == [
        "barrier", "clock started", "gather_object", "barrier"
    ]  # fmt: skip
    assert [c for c in calls if c[0] == "new_group"] == [("new_group", (0, 1, 2, 3), timedelta(seconds=TIMEOUT))]
    assert [c for c in calls if c[0] == "destroy"] == [("destroy", RecordingDist.NON_MEMBER)]


def _frozen_peer(rank: int, init: str, out: str) -> None:
    """Rank 1 creates the groups, then freezes before the barrier; rank 0 times its barrier."""
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2, timeout=timedelta(seconds=TIMEOUT))
    pair = ProcessGroups([Group((1, 0))], TIMEOUT)  # the calls a policy's groups take, on real gloo
    pair.warm_up(rank, torch.device("cpu"))
    pair.destroy()
    control = transport.open_control(TIMEOUT)
    result = Path(out) / "rank0.json"
    if rank == 1:
        deadline = time.monotonic() + TIMEOUT + 300.0  # far past ENDS_WITHIN_S: leaving cannot pass for a timeout
        while not result.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        os._exit(0)  # never reached the barrier
    start = time.monotonic()
    try:
        dist.barrier(group=control)
        outcome = "passed"
    except RuntimeError as exc:
        outcome = str(exc).splitlines()[0]
    result.write_text(json.dumps({"seconds": time.monotonic() - start, "outcome": outcome}))
    os._exit(0)


@pytest.mark.slow
def test_a_frozen_peer_ends_a_control_barrier_within_the_timeout(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_frozen_peer, args=(f"tcp://127.0.0.1:{port}", str(tmp_path)), nprocs=2)
    got = json.loads((tmp_path / "rank0.json").read_text())
    assert got["outcome"] != "passed"
    # no sooner than the timeout (load only adds time), and long before the peer would have left: the
    # timeout ended it, not the peer's exit; the upper bound is generous, as a hang is infinite
    assert TIMEOUT - 0.5 < got["seconds"] < ENDS_WITHIN_S, got
    print(f"\nthe barrier ended {got['seconds']:.2f} s after it began (timeout {TIMEOUT:g} s)")
