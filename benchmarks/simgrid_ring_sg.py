"""SimGrid 4's side of `simgrid_ring.py`: one ring all-reduce, step by step, on a platform given as JSON.

Run with the system Python that Debian's `python3-simgrid` installs into (`/usr/bin/python3`), not the
project's venv: `/usr/bin/python3 benchmarks/simgrid_ring_sg.py PLATFORM.json`. PLATFORM.json (written by
`simgrid_ring.py` from syncsim's own cluster) holds:

- `links`: [bandwidth bytes/s, latency s] for each directed link on a ring path;
- `paths`: for ring member i, the link ids of its path to member i + 1 (mod P);
- `nbytes`: the all-reduce's size; every member sends nbytes / P in each of the 2(P - 1) steps.

Each member is an actor on a host of its own. In step s it starts sending its chunk to the next member,
receives the previous member's chunk of the same step, then waits for its own send: a member enters
step s + 1 only once it has both delivered and received step s (the dependency of a ring all-reduce,
reduce-scatter then all-gather). Prints one JSON line: the simulated time and the count of transfers.

The SimGrid settings that make its network the ideal one syncsim's `network_model: ideal` assumes (a
transfer over a path of latency L and bottleneck bandwidth B takes L + size / B when alone), each an
option documented in SimGrid's "Configuring SimGrid" page:

- `network/model:CM02`, the analytic max-min model without LV08's slow-start corrections; and its
  `latency-factor` and `bandwidth-factor` set to 1 and `weight-S` to 0 explicitly (CM02's defaults);
- `network/crosstraffic:0`: otherwise every transfer also loads its reverse path with a flow of 5% of
  the bandwidth (the acknowledgements), which here would share each host's up-links with the ring's
  data;
- `network/TCP-gamma`: CM02 caps a flow at gamma / (2 x path latency), the TCP window over the RTT;
  set far above any link's bandwidth so the cap never binds (syncsim's star has no window limit);
- `surf/precision:1e-9`: the default (1e-5 s) is coarser than the 1 us GPU-host links and rounds
  event dates.
"""

from __future__ import annotations

import json
import sys

from simgrid import Actor, Engine, LinkInRoute, Mailbox, NetZone

IDEAL = (
    "--cfg=network/model:CM02",
    "--cfg=network/latency-factor:1",
    "--cfg=network/bandwidth-factor:1",
    "--cfg=network/weight-S:0",
    "--cfg=network/crosstraffic:0",
    "--cfg=network/TCP-gamma:1e18",
    "--cfg=surf/precision:1e-9",
    "--log=root.thres:critical",  # SimGrid's INFO lines about the settings would mix into stdout
)


def member(rank: int, size: int, steps: int, chunk: int) -> None:
    """Ring member `rank`: `steps` rounds of send-to-next, receive-from-previous."""
    inbox, outbox = Mailbox.by_name(f"m{rank}"), Mailbox.by_name(f"m{(rank + 1) % size}")
    for _ in range(steps):
        sent = outbox.put_async(rank, chunk)
        inbox.get()
        sent.wait()


def main(argv: list[str]) -> None:
    with open(argv[1]) as f:
        spec = json.load(f)
    engine = Engine([argv[0], *IDEAL])
    zone = NetZone.create_full_zone("ring")
    links = []
    for i, (bandwidth, latency) in enumerate(spec["links"]):
        links.append(zone.create_link(f"l{i}", float(bandwidth)).set_latency(float(latency)).seal())
    size = len(spec["paths"])
    hosts = [zone.create_host(f"r{i}", 1e9).seal() for i in range(size)]
    for i, path in enumerate(spec["paths"]):
        # one direction only: the ring's routes, each its own directed links as in syncsim's link table
        zone.add_route(
            hosts[i].netpoint, hosts[(i + 1) % size].netpoint, None, None, [LinkInRoute(links[j]) for j in path], False
        )
    zone.seal()
    steps = 2 * (size - 1)
    chunk = int(spec["nbytes"]) // size
    if chunk * size != int(spec["nbytes"]):
        raise ValueError(
            f"nbytes: {spec['nbytes']} must be a multiple of the {size} members (SimGrid sends whole bytes)"
        )
    for i in range(size):
        Actor.create(f"a{i}", hosts[i], member, i, size, steps, chunk)
    engine.run()
    print(json.dumps({"simulated_s": engine.clock, "transfers": steps * size}))


if __name__ == "__main__":
    main(sys.argv)
