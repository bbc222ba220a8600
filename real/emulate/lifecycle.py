"""Bring an emulation up and down, safely: record first, delete only what the record lists.

Rules (docs/emulation.md, "Safety"):
- `up` refuses a tag that already has a state file (unless `replace`), and refuses to adopt a
  namespace that already exists; it writes the state file before creating anything and removes what
  it made if building fails.
- `down` deletes only namespaces listed in the tag's state file whose names carry that tag's prefix;
  if the file lists anything else it refuses and deletes nothing.
- `emulated_cluster` tears down in `finally`, and turns SIGTERM into an exception so that a
  terminated run cleans up as an interrupted one does.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Optional, Union

import real.emulate.netns as netns
import real.emulate.state as state
from real.emulate.emulation import Emulation
from real.emulate.errors import EmulationError
from real.emulate.names import namespace_prefix, owned
from real.emulate.plan import DEFAULT_SUBNET, EmulationPlan, plan_cluster, plan_config
from sim.config import ClusterBase, Config


def up(plan: EmulationPlan, *, replace: bool = False, state_dir: state.StateDir = None) -> Emulation:
    """Create the emulated cluster of `plan`; with `replace`, first take down one running under its tag."""
    netns.require_tools()
    if state.exists(plan.tag, state_dir):
        if not replace:
            raise EmulationError(
                f"emulation {plan.tag!r} is already up ({state.state_path(plan.tag, state_dir)}); "
                f"take it down first (syncsim emulate down --tag {plan.tag}) or pass --replace"
            )
        down(plan.tag, state_dir=state_dir)
    taken = sorted(set(plan.namespaces) & netns.namespaces())
    if taken:
        raise EmulationError(
            f"namespaces {', '.join(taken)} exist but no emulation state records them; this tool did not create "
            "them, so it will not reuse or delete them: remove them yourself (ip netns del NAME) or use another --tag"
        )
    netns.check_subnet_free(plan.subnet)
    emulation = Emulation.from_plan(plan)
    record = {**emulation.to_dict(), "status": "creating", "pid": os.getpid(), "created": time.time()}
    state.write(plan.tag, record, state_dir)  # before anything exists: a crash from here on is cleanable
    try:
        netns.build(plan)
    except BaseException:
        _delete_listed(plan.tag, list(plan.namespaces))
        state.remove(plan.tag, state_dir)
        raise
    state.write(plan.tag, {**record, "status": "up"}, state_dir)
    return emulation


def down(tag: str, *, state_dir: state.StateDir = None, kill: bool = False) -> list[str]:
    """Delete the namespaces the state file of `tag` lists, then the file; the namespaces deleted.

    Refuses (EmulationError, nothing deleted) if the file lists a namespace outside the tag's prefix.
    Processes still running in a namespace keep its network alive after the name is gone; `kill`
    sends them SIGTERM first (they run in namespaces this emulation created).
    """
    netns.require_tools()
    data = state.read(tag, state_dir)
    listed = [str(ns) for ns in data["namespaces"]]
    foreign = [ns for ns in listed if not owned(tag, ns)]
    if foreign:
        raise EmulationError(
            f"refusing to take down {tag!r}: {state.state_path(tag, state_dir)} lists namespaces "
            f"{', '.join(foreign)}, which do not start with {namespace_prefix(tag)!r}; this tool only deletes "
            "namespaces it created. Nothing was deleted."
        )
    if kill:
        _terminate(listed)
    deleted = _delete_listed(tag, listed)
    state.remove(tag, state_dir)
    return deleted


def down_all(*, state_dir: state.StateDir = None, kill: bool = False) -> dict[str, list[str]]:
    """`down` every emulation with a state file; the namespaces deleted per tag."""
    return {tag: down(tag, state_dir=state_dir, kill=kill) for tag in state.tags(state_dir)}


@contextmanager
def emulated_cluster(
    config: Union[Config, ClusterBase],
    tag: Optional[str] = None,
    *,
    scale: float = 1.0,
    subnet: str = DEFAULT_SUBNET,
    queue: str = "fair",
    replace: bool = False,
    state_dir: state.StateDir = None,
) -> Iterator[Emulation]:
    """An emulation of `config` (a whole Config, or its `cluster:` with `tag` given) for a `with` block.

    Torn down on leaving the block, on exceptions, Ctrl-C and SIGTERM (turned into SystemExit(143)
    while the block runs, when entered from the main thread). A SIGKILL leaves the state file, which
    `syncsim emulate down` cleans up from.
    """
    if isinstance(config, Config):
        plan = plan_config(config, tag, scale=scale, subnet=subnet, queue=queue)
    elif tag is None:
        raise EmulationError("emulated_cluster: pass tag= with a cluster config (a whole Config names itself)")
    else:
        plan = plan_cluster(config, tag, scale=scale, subnet=subnet, queue=queue)
    with _sigterm_raises():
        emulation = up(plan, replace=replace, state_dir=state_dir)
        try:
            yield emulation
        finally:
            with _signals_deferred():
                down(plan.tag, state_dir=state_dir)


def _delete_listed(tag: str, listed: list[str]) -> list[str]:
    present = netns.namespaces()
    deleted = []
    for ns in listed:
        if ns in present and owned(tag, ns):
            netns.delete(ns)
            deleted.append(ns)
    return deleted


def _terminate(listed: list[str], grace_s: float = 2.0) -> None:
    present = netns.namespaces()
    victims = {pid for ns in listed if ns in present for pid in netns.pids(ns)}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in victims:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while victims and time.monotonic() < deadline:
            victims = {pid for pid in victims if os.path.exists(f"/proc/{pid}")}
            time.sleep(0.05)
        if not victims:
            return


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    if not _in_main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM while tearing down, so a second Ctrl-C cannot leave half a cluster."""
    if not _in_main_thread():
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
