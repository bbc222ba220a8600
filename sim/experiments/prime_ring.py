"""PRIME's int8 ring all-reduce replayed step by step: a reference for the alpha-beta ring syncsim prices it with.

INTELLECT-1 (arXiv 2412.01152) averaged its pseudo-gradients with PRIME's own ring (github.com/PrimeIntellect-ai/
prime, src/zeroband/C/csrc/collectives.cpp at commit 92fa657): each rank cuts its tensor into 2k chunks and runs
two phases (reduce-scatter, all-gather) of 2k steps. In step s it first waits for the send and the receive it
posted in step s - 2 (two chunks in flight, `BUFFER_COUNT = 2`), adds or copies what arrived, quantizes, and posts
step s's send to rank r + 1 and receive from rank r - 1 (the first 2(k - 1) steps send). Sends go through gloo,
whose unbound send starts only once the receiver's "ready" notice has crossed the link (gloo tcp/pair.cc, commit
5354032): a rendezvous that costs a one-way latency whenever the receiver posts no earlier than the sender.
PRIME all-reduces the model as `groups` such rings one after the other (src/zeroband/diloco.py).

`prime_ring_s` replays that schedule on a ring of hops, each with its one-way latency and bandwidth, a chunk
taking chunk bytes / bandwidth on its hop and a hop carrying one chunk at a time. Not replayed: TCP's own
dynamics, the 256-value lookup messages (a kilobyte, sent beside each chunk), the divide and the own-chunk
re-quantization between the phases. `step_compute_s` adds a fixed CPU time (dequantize, add, quantize) to
every step after the second. Closed forms it meets (tests/test_prime_ring.py), for one ring of k ranks moving
n bytes: 2(k - 1)/k n/B with no latency; with no transfer time 2(sum L - min L) without the rendezvous (a chain
of chunks crosses k - 1 hops a phase) and twice that with it when all hops wait alike.
"""

from __future__ import annotations

from collections.abc import Sequence

CHUNKS_PER_RANK = 2  # PRIME's BUFFER_COUNT: two chunks in flight, 2k chunks a tensor


def _phase(
    start: list[float],
    latencies: Sequence[float],
    transfer: Sequence[float],
    rendezvous: bool,
    step_compute_s: float,
) -> list[float]:
    """One phase of 2k steps from each rank's `start`; returns each rank's end. `transfer[r]`: seconds hop
    r -> r + 1 takes for one chunk."""
    k = len(latencies)
    clock = list(start)
    sending = CHUNKS_PER_RANK * (k - 1)  # steps that post a send and a receive
    hop_free = [0.0] * k
    sent: dict[tuple[int, int], float] = {}  # (rank, step): its send of that step has left
    arrived: dict[tuple[int, int], float] = {}  # (rank, step): what rank - 1 sent it in that step is in
    for step in range(1, CHUNKS_PER_RANK * k + 1):
        for r in range(k):
            if step > CHUNKS_PER_RANK:  # wait for the buffer's last use, then reduce and re-quantize
                clock[r] = max(clock[r], sent[r, step - 2], arrived[r, step - 2]) + step_compute_s
        if step > sending:
            continue
        for r in range(k):
            nxt = (r + 1) % k
            # the data leaves once posted, the receiver's notice is in (rendezvous) and the hop is free
            ready = max(clock[r], clock[nxt] + latencies[r]) if rendezvous else clock[r]
            done = max(ready, hop_free[r]) + transfer[r]
            hop_free[r] = sent[r, step] = done
            arrived[nxt, step] = done + latencies[r]
    return clock


def prime_ring_s(
    latencies_s: Sequence[float],
    bytes_per_s: Sequence[float],
    nbytes: float,
    groups: int = 1,
    *,
    rendezvous: bool = True,
    step_compute_s: float = 0.0,
) -> float:
    """Seconds until the last of k ranks has all-reduced `nbytes` (each rank's wire bytes) as `groups` equal
    rings one after the other, PRIME's way. `latencies_s[r]` and `bytes_per_s[r]`: one-way latency and bandwidth
    of hop r -> r + 1. Each rank starts the next ring when it finishes the last (no barrier between them)."""
    k = len(latencies_s)
    if k != len(bytes_per_s):
        raise ValueError(f"bytes_per_s: {len(bytes_per_s)} hops for {k} latencies; give one of each per hop")
    if groups < 1:
        raise ValueError(f"groups: {groups}; allowed: 1 or more")
    if k < 2 or nbytes <= 0:
        return 0.0
    if any(b <= 0 for b in bytes_per_s) or any(x < 0 for x in latencies_s):
        raise ValueError("bytes_per_s must be > 0 and latencies_s >= 0 on every hop")
    chunk = nbytes / groups / (CHUNKS_PER_RANK * k)
    transfer = [chunk / b for b in bytes_per_s]
    clock = [0.0] * k
    for _ in range(2 * groups):  # reduce-scatter and all-gather of every ring
        clock = _phase(clock, latencies_s, transfer, rendezvous, step_compute_s)
    return max(clock)
