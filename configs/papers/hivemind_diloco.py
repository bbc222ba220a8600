"""DiLoCo as OpenDiLoCo ran it through hivemind (arXiv 2407.07852; github.com/PrimeIntellect-ai/OpenDiloco): the
built-in `diloco`, but the outer average is hivemind's butterfly all-reduce, not a ring. hivemind's
`AllReduceRunner` (hivemind/averaging/allreduce.py, github.com/learning-at-home/hivemind) gives each peer a part
of the flat tensor to average; every peer streams each other peer that peer's part at once, the owner reduces
what arrives and streams the averaged part back to every peer. syncsim's `AllReduce(algorithm="butterfly")` is
that exchange (sim/engine/butterfly.py): the ring's bytes per peer, over every pair's connection at once.

Plug-in: `name: hivemind_diloco:HivemindDiLoCo` in a config beside this file (docs/policies.md, "Plug-ins")."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from pydantic import Field

from policies.diloco import DiLoCo, DiLoCoSettings
from policies.ops import AllReduce, Collective, Group


class HivemindDiLoCoSettings(DiLoCoSettings):
    algorithm: Literal["ring", "butterfly"] = Field(
        "butterfly",
        description="the outer average's all-reduce: butterfly (hivemind's) or ring (the built-in diloco's)",
    )


class HivemindDiLoCo(DiLoCo):
    """`diloco` whose outer all-reduce across replicas runs as `algorithm` (default: hivemind's butterfly). With
    replicas of several ranks only the all-reduce across them changes; the reduce-scatter and all-gather inside
    each replica stay rings."""

    name = "hivemind_diloco"
    Settings = HivemindDiLoCoSettings

    def _average_op(self, kind: type[Collective], group: Group, nbytes: float, where: dict) -> Collective:
        op = super()._average_op(kind, group, nbytes, where)
        return replace(op, algorithm=self.settings.algorithm) if isinstance(op, AllReduce) else op
