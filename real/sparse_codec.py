"""How one sparse message is laid out on the wire of the real backend, per the op's `SparseCoding`.

A message is one float32 tensor carrying the pairs of one owner's share (`None`: the whole range),
its values in the codec's `wire` type (`workload.gradient_precision`: two 16-bit values a float32
slot, `protocol.pack_values`; None: fp32), so a message is as many bytes as the simulator prices
(`nbytes`: `index_bytes` an id, the wire's width a value, the pad of an odd count left out):

- rows (no `block`): `protocol.pack_pairs`, each non-zero position's id, then the values;
- blocks (`block` = k, OmniReduce): the ids of the blocks holding a non-zero (ids as `pack_pairs`
  writes them), then k values per block, zeros included (a short last block is padded);
- `dense_switch` (SparCML): when that encoding would not be shorter than the share, the share's
  values in position order instead, without ids. A receiver tells the two apart by the length: a
  sparse encoding is always shorter than the share.

Decoding gives back the pairs as float32, the non-zero ones, so a reduction sums the same pairs
whatever the layout. Values are rounded to the wire type before they are packed
(`sim.numerics.sparse_rules.on_wire`, as numerics mode rounds them), so packing loses nothing.
"""

from __future__ import annotations

from typing import Optional

import torch

from policies.ops import SparseCoding
from real.protocol import (
    pack_pairs,
    pack_values,
    pair_bytes,
    pair_count,
    unpack_pairs,
    unpack_values,
    value_bytes,
    value_floats,
)
from sim.numerics.sparse_rules import Pairs, owners


class Codec:
    """Encodes and decodes the messages of one op: `n` owners over a `size`-position range."""

    def __init__(self, coding: SparseCoding, n: int, size: int, wire: Optional[torch.dtype] = None) -> None:
        self.coding, self.n, self.size, self.wire = coding, n, size, wire
        self.block = coding.block if coding.block is not None and coding.block > 1 else None
        self._shares: dict[Optional[int], torch.Tensor] = {}

    def share(self, owner: Optional[int]) -> torch.Tensor:
        """The positions `owner` owns, ascending (None: the whole range)."""
        if owner not in self._shares:
            every = torch.arange(self.size, dtype=torch.int64)
            self._shares[owner] = (
                every if owner is None else every[owners(every, self.coding, self.n, self.size) == owner]
            )
        return self._shares[owner]

    def pack(self, pairs: Pairs, owner: Optional[int]) -> torch.Tensor:
        wire = self.wire
        sparse = (
            self._pack_blocks(pairs)
            if self.block
            else pack_pairs(pairs.index, pairs.values, self.coding.index_bytes, wire)
        )
        if not self.coding.dense_switch:
            return sparse
        share = self.share(owner)
        if sparse.numel() < value_floats(len(share), wire):
            return sparse
        dense = torch.zeros(self.size, dtype=torch.float32, device=pairs.values.device)
        dense[pairs.index] = pairs.values.to(torch.float32)
        return pack_values(dense[share.to(dense.device)], wire)

    def _dense(self, chunk: torch.Tensor, owner: Optional[int]) -> bool:
        """Is `chunk` an owner's dense share (`dense_switch`) rather than pairs?"""
        return self.coding.dense_switch and chunk.numel() == value_floats(len(self.share(owner)), self.wire)

    def nbytes(self, chunk: torch.Tensor, owner: Optional[int]) -> int:
        """Bytes of ids and values `chunk` (a `pack` output) carries: what the simulator counts for it."""
        if self._dense(chunk, owner):
            return value_bytes(len(self.share(owner)), self.wire)
        per_id = self.block or 1
        ids = pair_count(chunk.numel(), self.coding.index_bytes, self.wire, per_id)
        return pair_bytes(ids, self.coding.index_bytes, self.wire, per_id)

    def unpack(self, chunk: torch.Tensor, owner: Optional[int]) -> Pairs:
        if self._dense(chunk, owner):
            index, values = self.share(owner).to(chunk.device), unpack_values(chunk, len(self.share(owner)), self.wire)
        elif self.block:
            index, values = self._unpack_blocks(chunk)
        else:
            index, values = unpack_pairs(chunk, self.coding.index_bytes, self.wire)
            return Pairs(index, values)
        keep = values != 0
        return Pairs(index[keep], values[keep])

    def _pack_blocks(self, pairs: Pairs) -> torch.Tensor:
        k = self.block
        assert k is not None
        ids = torch.unique(pairs.index // k)
        values = torch.zeros(len(ids), k, dtype=torch.float32, device=pairs.values.device)
        values[torch.searchsorted(ids, pairs.index // k), pairs.index % k] = pairs.values.to(torch.float32)
        return pack_pairs(ids, values.reshape(-1), self.coding.index_bytes, self.wire)

    def _unpack_blocks(self, chunk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k = self.block
        assert k is not None
        slots = self.coding.index_bytes // 4
        blocks = pair_count(chunk.numel(), self.coding.index_bytes, self.wire, k)
        id_type = torch.int32 if slots == 1 else torch.int64  # as `pack_pairs` writes them
        ids = chunk[: blocks * slots].clone().view(id_type).to(torch.int64)
        values = unpack_values(chunk[blocks * slots :], blocks * k, self.wire)
        index = (ids[:, None] * k + torch.arange(k, device=ids.device)).reshape(-1)
        inside = index < self.size
        return index[inside], values[inside]
