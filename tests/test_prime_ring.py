"""PRIME's ring replayed (`sim/experiments/prime_ring.py`) against closed forms worked by hand from its schedule:
two chunks in flight, each step waiting for the step two before it, gloo's rendezvous before each send."""

from __future__ import annotations

import pytest

from sim.experiments.prime_ring import prime_ring_s

GB = 1e9


@pytest.mark.parametrize("rendezvous", [True, False])
@pytest.mark.parametrize("k", [2, 3, 14])
def test_without_latency_a_ring_is_its_bandwidth_term(k: int, rendezvous: bool) -> None:
    """Each hop sends 2(k - 1) chunks of n/2k a phase back to back: 2(k - 1)/k n/B for the two phases, whatever
    the number of rings the bytes are cut into."""
    n, b = 8 * GB, 0.5 * GB
    for groups in (1, 44):
        seconds = prime_ring_s([0.0] * k, [b] * k, n, groups, rendezvous=rendezvous)
        assert seconds == pytest.approx(2 * (k - 1) / k * n / b, rel=1e-12)


@pytest.mark.parametrize("k", [2, 5, 14])
def test_without_transfer_time_and_rendezvous_a_phase_is_k_minus_1_hops(k: int) -> None:
    """With no bytes to speak of, a chunk hops once every two steps: a phase is k - 1 latencies, the ring
    2(k - 1) L, the alpha-beta ring's latency term."""
    latency = 0.03
    seconds = prime_ring_s([latency] * k, [GB] * k, 1e-9, rendezvous=False)
    assert seconds == pytest.approx(2 * (k - 1) * latency, abs=1e-9)


@pytest.mark.parametrize("k", [2, 5, 14])
def test_the_rendezvous_makes_every_hop_a_round_trip(k: int) -> None:
    """Every rank posts a step's send and receive at once, so the receiver's notice takes L to reach the sender
    and the data L back: 2L a hop, 4(k - 1) L a ring, and `groups` rings one after the other."""
    latency = 0.03
    assert prime_ring_s([latency] * k, [GB] * k, 1e-9) == pytest.approx(4 * (k - 1) * latency, abs=1e-9)
    assert prime_ring_s([latency] * k, [GB] * k, 1e-9, 44) == pytest.approx(44 * 4 * (k - 1) * latency, abs=1e-9)


def test_latency_adds_along_the_ring_not_the_slowest_hop_times_the_steps() -> None:
    """With no transfer time and no rendezvous the last rank of a phase waits for a chain of k - 1 hops: the
    ring's latencies less its fastest, where the alpha-beta ring charges the slowest hop every step."""
    latencies = [0.010] * 6 + [0.040] + [0.010] * 6 + [0.040]  # two coast-to-coast hops among 14 ranks
    seconds = prime_ring_s(latencies, [GB] * 14, 1e-9, rendezvous=False)
    assert seconds == pytest.approx(2 * (sum(latencies) - min(latencies)), abs=1e-9)
    assert seconds < 2 * 13 * max(latencies)


def test_cpu_time_of_a_step_adds_to_every_waiting_step() -> None:
    """With nothing else to wait for, each phase's 2k - 2 waiting steps each add the CPU time."""
    k, cpu = 4, 0.002
    seconds = prime_ring_s([0.0] * k, [GB] * k, 1e-9, step_compute_s=cpu)
    assert seconds == pytest.approx(2 * (2 * k - 2) * cpu, abs=1e-9)


def test_bad_hops_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="bytes_per_s: 2 hops for 3 latencies"):
        prime_ring_s([0.0] * 3, [GB] * 2, GB)
    with pytest.raises(ValueError, match="groups: 0"):
        prime_ring_s([0.0] * 3, [GB] * 3, GB, 0)
    with pytest.raises(ValueError, match="bytes_per_s must be > 0"):
        prime_ring_s([0.0] * 3, [GB, 0.0, GB], GB)
