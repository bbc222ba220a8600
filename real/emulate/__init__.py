"""An emulated cluster on one Linux machine: a network namespace per host, Linux bridges for the
switches, veth pairs shaped at the NICs and rack uplinks, with per-connection fair queues by default
(docs/emulation.md).

    with emulated_cluster(load_config("configs/x.yaml"), scale=0.01) as emu:
        argv = emu.exec_prefix("h0") + ["python", "worker.py", "--addr", emu.address("h0")]
"""

from real.emulate.emulation import EmulatedHost, Emulation
from real.emulate.errors import EmulationError
from real.emulate.lifecycle import down, down_all, emulated_cluster, up
from real.emulate.plan import DEFAULT_SUBNET, EmulationPlan, plan_cluster, plan_config

__all__ = [
    "DEFAULT_SUBNET",
    "EmulatedHost",
    "Emulation",
    "EmulationError",
    "EmulationPlan",
    "down",
    "down_all",
    "emulated_cluster",
    "plan_cluster",
    "plan_config",
    "up",
]
