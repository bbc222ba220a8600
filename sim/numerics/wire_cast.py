"""What an op's `wire` type does to the values it moves, on real tensors (docs/policies.md, "Precision on
the wire"). Numerics mode (`replicas.py`) and the real backend (`real/wire_collectives.py`) both call these
functions on the same inputs in the same order, so they leave the same bits.

- Native types (fp32, bf16, fp16): values are cast to the type. A reduction is a ring: chunk c of the
  p members' tensors (`partition` into p equal parts) is summed in the type starting at member c+1,
  each step adding the next member's value to the partial sum and rounding, ending at member c (as
  NCCL's ring reduce-scatter does; `ring_sum`).
- Scaled types (fp8_e4m3, fp8_e5m2, int8, fp4): each block of `block` values is sent as codes plus one
  fp32 scale s = max|x| / grid_max; a value x becomes the grid point nearest x / s (int8: round half to
  even, clamped to +-127; fp4: the e2m1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6, a tie going to the
  smaller; fp8: torch's round to nearest even), and is read back as code * s. A reduction decodes
  every member's chunk, adds them in fp32 in member order, and encodes the sum again for the
  all-gather (`codec_sum`), as INTELLECT-1's int8 all-reduce does.

Blocks start at the start of each chunk a member sends (a chunk is its own tensor on the wire).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from policies.wire import SCALE_BYTES, wire_type

NATIVE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
FP8 = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
FP4_GRID = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
_FP4_MIDPOINTS = (FP4_GRID[1:] + FP4_GRID[:-1]) / 2


def native(wire: str) -> bool:
    return wire in NATIVE


def encoded_bytes(n: int, wire: str, block: int) -> int:
    """Bytes `encode` returns for n values (fp4 packs two codes a byte, an odd last one padded)."""
    t = wire_type(wire)
    return math.ceil(n * t.bits / 8) + (math.ceil(n / block) * SCALE_BYTES if t.scaled else 0)


def _blocks(x: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x (fp32) as rows of `block` values (zero-padded), and each row's largest magnitude."""
    n = x.numel()
    rows = math.ceil(n / block)
    padded = torch.zeros(rows * block, dtype=torch.float32, device=x.device)
    padded[:n] = x
    grid = padded.view(rows, block)
    return grid, grid.abs().amax(dim=1)


def encode(x: torch.Tensor, wire: str, block: int) -> torch.Tensor:
    """The bytes (uint8) n values of a scaled type travel as: codes, then one fp32 scale per block."""
    t = wire_type(wire)
    if not t.scaled:
        raise ValueError(f"wire {wire!r} is not a scaled type; cast to it instead")
    x = x.detach().to(torch.float32).flatten()
    n = x.numel()
    grid, amax = _blocks(x, block)
    scale = amax / t.grid_max
    y = grid / torch.where(scale > 0, scale, torch.ones_like(scale))[:, None]
    if wire == "int8":
        codes = torch.round(y).clamp(-127, 127).to(torch.int8).view(torch.uint8).flatten()[:n]
    elif wire in FP8:
        codes = y.clamp(-t.grid_max, t.grid_max).to(FP8[wire]).view(torch.uint8).flatten()[:n]
    else:  # fp4: sign bit 3, magnitude index bits 0-2; two codes a byte, the first in the low nibble
        index = torch.bucketize(y.abs(), _FP4_MIDPOINTS.to(y.device)).to(torch.uint8)
        nibbles = (index | ((y < 0) & (index > 0)).to(torch.uint8) << 3).flatten()[:n]
        if n % 2:
            nibbles = torch.cat([nibbles, nibbles.new_zeros(1)])
        codes = nibbles[0::2] | (nibbles[1::2] << 4)
    return torch.cat([codes, scale.to(torch.float32).view(torch.uint8)])


def decode(buf: torch.Tensor, n: int, wire: str, block: int) -> torch.Tensor:
    """The n fp32 values `encode` sent as `buf`."""
    t = wire_type(wire)
    rows = math.ceil(n / block)
    code_bytes = math.ceil(n * t.bits / 8)
    codes, scale = buf[:code_bytes], buf[code_bytes : code_bytes + rows * SCALE_BYTES].clone().view(torch.float32)
    if wire == "int8":
        values = codes.clone().view(torch.int8).to(torch.float32)
    elif wire in FP8:
        values = codes.clone().view(FP8[wire]).to(torch.float32)
    else:
        nibbles = torch.stack([codes & 0xF, codes >> 4], dim=1).flatten()[:n]
        values = FP4_GRID.to(buf.device)[(nibbles & 0x7).long()] * torch.where(nibbles >= 8, -1.0, 1.0)
    per_value = scale.repeat_interleave(block)[:n]
    return values * per_value


def round_trip(x: torch.Tensor, wire: str, block: int) -> torch.Tensor:
    """x (fp32) as it arrives after travelling in `wire`."""
    if native(wire):
        return x.to(NATIVE[wire]).to(torch.float32)
    return decode(encode(x, wire, block), x.numel(), wire, block)


def ring_sum(chunks: Sequence[torch.Tensor], c: int, dtype: torch.dtype) -> torch.Tensor:
    """Chunk c's sum as a ring leaves it at member c: `chunks[i]` is member i's chunk c; the partial
    sum starts at member c+1 and each next member adds its value in `dtype` (rounding each step)."""
    p = len(chunks)
    acc = chunks[(c + 1) % p].to(dtype, copy=True)
    for k in range(2, p + 1):
        acc = chunks[(c + k) % p].to(dtype, copy=True).add_(acc)  # the member's own copy plus what it received
    return acc


def codec_sum(decoded: Sequence[torch.Tensor]) -> torch.Tensor:
    """The fp32 sum, in member order, of the members' decoded chunks."""
    acc = decoded[0].clone()
    for d in decoded[1:]:
        acc.add_(d)
    return acc


def reduced_chunk(chunks: Sequence[torch.Tensor], c: int, wire: str, block: int, gather: bool) -> torch.Tensor:
    """Chunk c of the members' sum (fp32) as the owner holds it after the reduce-scatter in `wire`
    (`chunks[i]`: member i's chunk c, fp32); `gather`: as every member holds it after the all-gather
    that follows (a scaled sum encoded again, a native one already in its type)."""
    if native(wire):
        return ring_sum(chunks, c, NATIVE[wire]).to(torch.float32)
    total = codec_sum([round_trip(x, wire, block) for x in chunks])
    return round_trip(total, wire, block) if gather else total
