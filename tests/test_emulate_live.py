"""A live emulated cluster (root, iproute2): reachability, shaped throughput, teardown and ownership.

Skipped where network namespaces cannot be created. Two racks of two hosts with 200 Mbit/s NICs and
100 Mbit/s uplinks, fair-queued (the default); flows are the stdlib TCP probe (real/emulate/probe.py)
run inside the hosts' namespaces, measured over 1 s once connected. TCP goodput is at most
1448/1514 = 95.6 % of a shaped line rate: a shaper's ceiling is asserted (with 15 % for the edges of
the measuring window), since load only ever lowers goodput; how close a flow comes to its rate is
printed, not asserted (other work on a two-core machine can starve a probe for any part of its second).
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import real.emulate.probe as probe
from real.emulate import Emulation, EmulationError, down, emulated_cluster, netns, plan_cluster, state, up
from real.emulate.names import namespace_prefix
from sim.config import TwoTierCluster

ROOT = Path(__file__).parent.parent
NIC_BPS, UPLINK_BPS = 200e6, 100e6
CLUSTER = TwoTierCluster(topology="two_tier", racks=2, hosts_per_rack=2, nic_gbps=0.2, uplink_gbps=0.1)
TAG = f"live{os.getpid()}"


def _namespaces_work() -> str:
    """Why namespaces cannot be used here, or '' when they can."""
    if os.geteuid() != 0:
        return "needs root"
    if not (shutil.which("ip") and shutil.which("tc")):
        return "needs iproute2 (ip, tc)"
    probe_ns = f"ssim-skipcheck{os.getpid()}-x"
    if subprocess.run(["ip", "netns", "add", probe_ns], capture_output=True).returncode != 0:
        return "ip netns add failed"
    subprocess.run(["ip", "netns", "del", probe_ns], capture_output=True)
    return ""


_WHY = _namespaces_work()
pytestmark = pytest.mark.skipif(bool(_WHY), reason=f"network namespaces unavailable: {_WHY}")


def ours(tag: str) -> set[str]:
    return {ns for ns in netns.namespaces() if ns.startswith(namespace_prefix(tag))}


@pytest.fixture(scope="module")
def emu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulation]:
    folder = tmp_path_factory.mktemp("emulate-state")
    with emulated_cluster(CLUSTER, TAG, state_dir=folder) as emulation:
        assert ours(TAG) == set(emulation.namespaces) and len(emulation.namespaces) == 5
        yield emulation
    assert not ours(TAG), "namespaces left after teardown"
    assert not state.exists(TAG, folder)


CEILING = 1.15  # a shaped flow's goodput is below its rate; 15 % for the measuring window's edges


def goodput(emu: Emulation, pairs: list[tuple[str, str]], port: int, rate: float) -> float:
    """The flows' summed goodput in bit/s, printed beside the shaped `rate`."""
    got = sum(probe.measure(emu, pairs, port))
    print(f"\n{pairs}: {got / 1e6:.1f} Mbit/s of {rate / 1e6:.0f} shaped ({got / rate:.0%})")
    return got


def test_every_host_answers_a_ping(emu: Emulation) -> None:
    for a, b in (("h0", "h1"), ("h0", "h2"), ("h0", "h3"), ("h3", "h1")):
        assert 0 < probe.ping(emu, a, b) < math.inf  # an echo reply came back over the emulated fabric


def test_every_veth_end_carries_its_fair_queues(emu: Emulation) -> None:
    rates = []
    for link in emu.links:
        shown = netns.run(["tc", "-n", link.namespace, "qdisc", "show", "dev", link.device])
        assert "qdisc htb 1: root" in shown and shown.count("qdisc bfifo") == 257, (link, shown[:200])
        root = netns.run(["tc", "-n", link.namespace, "class", "show", "dev", link.device, "classid", "1:1"])
        assert f"rate {link.rate_bps // 1_000_000}Mbit ceil {link.rate_bps // 1_000_000}Mbit" in root, (link, root)
        rates.append(link.rate_bps)
    # 4 hosts x 2 NIC ends, 2 racks x 2 uplink ends
    assert sorted(rates) == [UPLINK_BPS] * 4 + [NIC_BPS] * 8


def test_a_same_rack_flow_gets_the_nic_rate(emu: Emulation) -> None:
    got = goodput(emu, [("h0", "h1")], 5301, NIC_BPS)
    assert 0 < got <= CEILING * NIC_BPS  # shaped at the NIC (an unshaped veth carries Gbit/s)


def test_a_cross_rack_flow_is_held_to_the_uplink(emu: Emulation) -> None:
    got = goodput(emu, [("h2", "h0")], 5321, UPLINK_BPS)
    assert 0 < got <= CEILING * UPLINK_BPS  # below the 200 Mbit/s NICs: the uplink holds it


def test_two_cross_rack_flows_share_the_uplink(emu: Emulation) -> None:
    # neither NIC (200 Mbit/s each) limits them: rack0's uplink does
    got = goodput(emu, [("h0", "h2"), ("h1", "h3")], 5341, UPLINK_BPS)
    assert 0 < got <= CEILING * UPLINK_BPS  # together, not 100 Mbit/s each


def test_teardown_on_error_and_sigterm_and_down_after_sigkill(tmp_path: Path) -> None:
    tag = f"sig{os.getpid()}"
    with pytest.raises(RuntimeError, match="boom"):
        with emulated_cluster(CLUSTER, tag, queue="fifo", state_dir=tmp_path) as emulation:
            assert ours(tag) == set(emulation.namespaces)
            link = emulation.links[0]
            shown = netns.run(["tc", "-n", link.namespace, "qdisc", "show", "dev", link.device])
            assert "qdisc tbf" in shown and "htb" not in shown, shown  # --queue fifo: one tbf
            raise RuntimeError("boom")
    assert not ours(tag) and not state.exists(tag, tmp_path)

    script = (
        "import sys, time\n"
        "from real.emulate import emulated_cluster\n"
        "from sim.config import TwoTierCluster\n"
        "c = TwoTierCluster(topology='two_tier', racks=2, hosts_per_rack=2, nic_gbps=0.2, uplink_gbps=0.1)\n"
        f"with emulated_cluster(c, {tag!r}, state_dir={str(tmp_path)!r}):\n"
        "    print('up', flush=True)\n"
        "    time.sleep(60)\n"
    )
    for sig, code in ((signal.SIGTERM, 143), (signal.SIGKILL, -9)):
        child = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "up"
            assert len(ours(tag)) == 5
            child.send_signal(sig)
            assert child.wait(timeout=20) == code
        finally:
            child.kill()
        if sig == signal.SIGTERM:
            assert not ours(tag) and not state.exists(tag, tmp_path)
        else:  # a crash leaves the namespaces and their record; `down` cleans up from the record
            assert len(ours(tag)) == 5 and state.exists(tag, tmp_path)
            assert len(down(tag, state_dir=tmp_path)) == 5
            assert not ours(tag) and not state.exists(tag, tmp_path)


def test_down_refuses_namespaces_it_did_not_create(tmp_path: Path) -> None:
    tag = f"own{os.getpid()}"
    foreign, other_tag, ours_by_hand = f"foreign{os.getpid()}", f"ssim-x{os.getpid()}-h0", f"ssim-{tag}-h9"
    made = []
    try:
        for ns in (foreign, other_tag, ours_by_hand):
            netns.run(["ip", "netns", "add", ns])
            made.append(ns)
        for listed in (foreign, other_tag):
            state.write(tag, {"tag": tag, "namespaces": [f"ssim-{tag}-h0", listed]}, tmp_path)
            with pytest.raises(EmulationError, match=f"refusing to take down '{tag}'.*{listed}.*Nothing was deleted"):
                down(tag, state_dir=tmp_path)
            assert {foreign, other_tag, ours_by_hand} <= netns.namespaces()
        state.remove(tag, tmp_path)

        # up will not adopt a namespace it has no record of, and builds nothing then
        clash = plan_cluster(CLUSTER.model_copy(update={"hosts_per_rack": 5, "racks": 2}), tag)
        with pytest.raises(EmulationError, match=f"namespaces {ours_by_hand} exist but no emulation state records"):
            up(clash, state_dir=tmp_path)
        assert ours(tag) == {ours_by_hand} and not state.exists(tag, tmp_path)

        # a namespace with the tag's prefix that the record does not list survives `down`
        emulation = up(plan_cluster(CLUSTER, tag), state_dir=tmp_path)
        with pytest.raises(EmulationError, match="already up"):
            up(plan_cluster(CLUSTER, tag), state_dir=tmp_path)
        assert sorted(down(tag, state_dir=tmp_path)) == sorted(emulation.namespaces)
        assert ours(tag) == {ours_by_hand}
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        if state.exists(tag, tmp_path):
            down(tag, state_dir=tmp_path)
    assert not ours(tag) and foreign not in netns.namespaces()
