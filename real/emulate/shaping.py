"""How a shaped veth end queues and sends: its rate (bucket and queue sizes) and its discipline.

tbf and htb shape egress only, so every veth is shaped at both ends: each end shapes one direction.

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

Disciplines (`QUEUES`):

- `fair` (the default): per-connection fair queueing, as the simulator's max-min sharing assumes
  and as most Linux distributions set up hosts (fq_codel). An htb root at the link's rate, with
  `FAIR_BUCKETS`^2 leaf classes served round-robin a GSO segment at a time; u32 filters hash each
  TCP segment by 4 bits of its source port, then 4 of its destination port, so the connections
  crossing a link get their own queues (two connections to one listening process share a queue
  when their ephemeral ports agree in those bits: 1 in 16). Each leaf may
  borrow the whole rate and queues up to `limit`. (sfq, fq and fq_codel would do this in one
  qdisc but are not built into every kernel; htb and u32 are the classic tools that are.)
- `fifo`: one tbf, one first-come-first-served queue. A connection that starts behind 50 ms of
  another's data waits for it, so on the time scale of one transfer sharing is not max-min: with
  it, parameter-server traffic on 2 racks ran the racks half an iteration apart (ps measured
  18-28% slower than predicted; docs/validation.md).
"""

from __future__ import annotations

from dataclasses import dataclass

GSO_MAX = 65536 + 1514  # largest segment a veth hands to the qdisc (64 KiB GSO + one frame of headers)
BURST_S = 0.002
LIMIT_S = 0.050
QUEUES = ("fair", "fifo")
FAIR_BUCKETS = 16  # per port: FAIR_BUCKETS ** 2 fair-queued classes per link
# bits 1-4 of the TCP source port, in the 32-bit word at offset 20 (no IP options), then of the
# destination port; not bit 0: Linux gives connect() even ephemeral ports
_SPORT_BITS = "0x001e0000"
_DPORT_BITS = "0x0000001e"


@dataclass(frozen=True)
class Shaping:
    """A link's shaping: rate in bit/s, bucket and queue in bytes."""

    rate_bps: int
    burst_bytes: int
    limit_bytes: int

    def tc_args(self, namespace: str, device: str) -> list[str]:
        """`tc` arguments that install (or replace) a tbf as the root of `device` in `namespace`."""
        return ["tc", "-n", namespace, *self.fifo_lines(device)[0].split()]

    def fifo_lines(self, device: str) -> list[str]:
        """The `tc -batch` line of a single tbf: one FIFO queue."""
        return [
            f"qdisc replace dev {device} root tbf rate {self.rate_bps}bit burst {self.burst_bytes} "
            f"limit {self.limit_bytes}"
        ]

    def fair_lines(self, device: str) -> list[str]:
        """`tc -batch` lines of per-connection fair queueing at this rate (see the module's docstring)."""
        rate, burst = f"{self.rate_bps}bit", f"burst {self.burst_bytes} cburst {self.burst_bytes}"
        classes = FAIR_BUCKETS**2
        leaf_rate = f"{max(1000, self.rate_bps // (classes + 1))}bit"  # guarantees sum to the rate; all borrow
        lines = [
            f"qdisc replace dev {device} root handle 1: htb default 2",
            f"class add dev {device} parent 1: classid 1:1 htb rate {rate} ceil {rate} {burst}",
        ]
        for leaf in (2, *(_leaf(i) for i in range(classes))):  # 1:2 takes what is not TCP (ARP, pings)
            lines += [
                f"class add dev {device} parent 1:1 classid 1:{leaf:x} htb rate {leaf_rate} ceil {rate} {burst} "
                f"quantum {GSO_MAX}",
                f"qdisc add dev {device} parent 1:{leaf:x} bfifo limit {self.limit_bytes}",
            ]
        u32 = f"filter add dev {device} parent 1: prio 1 protocol ip u32"
        lines.append(f"filter add dev {device} parent 1: prio 1 handle 2: protocol ip u32 divisor {FAIR_BUCKETS}")
        for s in range(FAIR_BUCKETS):
            table = f"{_table(s):x}"
            lines.append(
                f"filter add dev {device} parent 1: prio 1 handle {table}: protocol ip u32 divisor {FAIR_BUCKETS}"
            )
            for d in range(FAIR_BUCKETS):
                lines.append(
                    f"{u32} ht {table}:{d:x}: match ip protocol 6 0xff flowid 1:{_leaf(s * FAIR_BUCKETS + d):x}"
                )
            lines.append(f"{u32} ht 2:{s:x}: match ip protocol 6 0xff hashkey mask {_DPORT_BITS} at 20 link {table}:")
        lines.append(f"{u32} ht 800:: match ip protocol 6 0xff hashkey mask {_SPORT_BITS} at 20 link 2:")
        return lines

    def lines(self, device: str, queue: str) -> list[str]:
        """`tc -batch` lines that shape `device` with discipline `queue` (one of `QUEUES`)."""
        check_queue(queue)
        return self.fair_lines(device) if queue == "fair" else self.fifo_lines(device)


def _leaf(bucket: int) -> int:
    return 0x100 + bucket


def _table(source_bucket: int) -> int:
    return 0x10 + source_bucket


def check_queue(queue: str) -> str:
    """`queue` if it names a discipline, else ValueError naming the field and the allowed values."""
    if queue not in QUEUES:
        raise ValueError(f"emulate.queue: must be one of {', '.join(QUEUES)}, got {queue!r}")
    return queue


def shaping_for(rate_bps: float) -> Shaping:
    """The shaping this emulation uses for a link of `rate_bps` bit/s."""
    if rate_bps <= 0:
        raise ValueError(f"rate_bps: must be > 0, got {rate_bps}")
    bytes_per_s = rate_bps / 8
    burst = max(GSO_MAX, int(bytes_per_s * BURST_S))
    limit = max(2 * burst, int(bytes_per_s * LIMIT_S))
    return Shaping(int(round(rate_bps)), burst, limit)
