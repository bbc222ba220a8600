"""How one sparse message is laid out on the wire of the real backend, per the op's `SparseCoding`.

A message is one float32 tensor carrying the pairs of one owner's share (`None`: the whole range):

- rows (no `block`): `protocol.pack_pairs`, each non-zero position's id, then the values;
- blocks (`block` = k, OmniReduce): the ids of the blocks holding a non-zero (ids as `pack_pairs`
  writes them), then k values per block, zeros included (a short last block is padded);
- `dense_switch` (SparCML): when that encoding would not be shorter than the share, the share's
  values in position order instead, without ids. A receiver tells the two apart by the length: a
  sparse encoding is always shorter than the share.

Decoding gives back the non-zero pairs, so a reduction sums the same pairs whatever the layout.
"""

from __future__ import annotations

from typing import Optional

import torch

from policies.ops import SparseCoding
from real.protocol import pack_pairs, unpack_pairs
from sim.numerics.sparse_rules import Pairs, owners


class Codec:
    """Encodes and decodes the messages of one op: `n` owners over a `size`-position range."""

    def __init__(self, coding: SparseCoding, n: int, size: int) -> None:
        self.coding, self.n, self.size = coding, n, size
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
        sparse = (
            self._pack_blocks(pairs) if self.block else pack_pairs(pairs.index, pairs.values, self.coding.index_bytes)
        )
        if not self.coding.dense_switch:
            return sparse
        share = self.share(owner)
        if sparse.numel() < len(share):
            return sparse
        dense = torch.zeros(self.size, dtype=torch.float32, device=pairs.values.device)
        dense[pairs.index] = pairs.values.to(torch.float32)
        return dense[share.to(dense.device)]

    def unpack(self, chunk: torch.Tensor, owner: Optional[int]) -> Pairs:
        if self.coding.dense_switch and chunk.numel() == len(self.share(owner)):
            index, values = self.share(owner).to(chunk.device), chunk.clone()
        elif self.block:
            index, values = self._unpack_blocks(chunk)
        else:
            index, values = unpack_pairs(chunk, self.coding.index_bytes)
            return Pairs(index, values)
        keep = values != 0
        return Pairs(index[keep], values[keep])

    def _pack_blocks(self, pairs: Pairs) -> torch.Tensor:
        k = self.block
        assert k is not None
        ids = torch.unique(pairs.index // k)
        values = torch.zeros(len(ids), k, dtype=torch.float32, device=pairs.values.device)
        values[torch.searchsorted(ids, pairs.index // k), pairs.index % k] = pairs.values.to(torch.float32)
        return pack_pairs(ids, values.reshape(-1), self.coding.index_bytes)

    def _unpack_blocks(self, chunk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k = self.block
        assert k is not None
        slots = self.coding.index_bytes // 4
        blocks = chunk.numel() // (slots + k)
        id_type = torch.int32 if slots == 1 else torch.int64  # as `pack_pairs` writes them
        ids = chunk[: blocks * slots].clone().view(id_type).to(torch.int64)
        values = chunk[blocks * slots : blocks * (slots + k)].clone()
        index = (ids[:, None] * k + torch.arange(k, device=ids.device)).reshape(-1)
        inside = index < self.size
        return index[inside], values[inside]
