"""Token-bucket (tbf) settings for a shaped veth end, and the `tc` command that applies them.

tbf shapes egress only, so every veth is shaped at both ends: each end shapes one direction.

Why these numbers (measured in docs/emulation.md):

- burst: the bucket must hold at least one GSO super-packet (veths hand TCP 64 KiB segments; a
  segment larger than the bucket is split in software, which costs CPU on a 2-core box) and enough
  for the qdisc watchdog's timer slack. 2 ms at the rate, floored at 64 KiB plus headers.
  Over a 1 s measurement the burst adds at most burst/rate to a flow: under 1 % at 100 Mbit/s.
- limit: the queue a shaped link may build: 50 ms at the rate, floored at two bursts so a full
  bucket's worth can always queue behind a packet in service. Bulk flows fill a link with 10 ms
  as well, but collectives start many short transfers at once; with 10 ms (two 64 KiB segments at
  100 Mbit/s) their collisions dropped packets and idled the uplink, and hierarchical all-reduce
  measured 24% slower than the simulator's max-min prediction against 4% with 50 ms
  (docs/validation.md). Switch ports buffer at that scale rather than drop.
"""

from __future__ import annotations

from dataclasses import dataclass

GSO_MAX = 65536 + 1514  # largest segment a veth hands to the qdisc (64 KiB GSO + one frame of headers)
BURST_S = 0.002
LIMIT_S = 0.050


@dataclass(frozen=True)
class Tbf:
    """One tbf qdisc: rate in bit/s, bucket and queue in bytes."""

    rate_bps: int
    burst_bytes: int
    limit_bytes: int

    def tc_args(self, namespace: str, device: str) -> list[str]:
        """`tc` arguments that install (or replace) this qdisc as the root of `device` in `namespace`."""
        return [
            "tc", "-n", namespace, "qdisc", "replace", "dev", device, "root", "tbf",
            "rate", f"{self.rate_bps}bit", "burst", str(self.burst_bytes), "limit", str(self.limit_bytes),
        ]  # fmt: skip


def tbf_for(rate_bps: float) -> Tbf:
    """The tbf settings this emulation uses for a link of `rate_bps` bit/s."""
    if rate_bps <= 0:
        raise ValueError(f"rate_bps: must be > 0, got {rate_bps}")
    bytes_per_s = rate_bps / 8
    burst = max(GSO_MAX, int(bytes_per_s * BURST_S))
    limit = max(2 * burst, int(bytes_per_s * LIMIT_S))
    return Tbf(int(round(rate_bps)), burst, limit)
