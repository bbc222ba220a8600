"""What the simulator needs to know about a model: its layers' parameter counts and FLOPs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

HOT_ROWS = ("first", "scattered")


@dataclass(frozen=True)
class Lookup:
    """An embedding table's access pattern: why its gradient is sparse (docs/sparse.md).

    Each sample looks up `per_sample` ids among the table's first `space` rows (0: all of them),
    drawn from a bounded power law with exponent `zipf_s` (0: uniform). `hot_rows` says where the
    popular ids sit: `first` (ids assigned by frequency, as vocabularies are) or `scattered`
    (hashed ids). Only the rows a batch looked up get a gradient.
    """

    per_sample: float
    zipf_s: float = 0.0
    hot_rows: str = "first"
    space: int = 0
    source: str = ""

    def __post_init__(self) -> None:
        if self.per_sample <= 0 or self.zipf_s < 0 or self.space < 0:
            raise ValueError("lookup: per_sample must be > 0, zipf_s and space >= 0")
        if self.hot_rows not in HOT_ROWS:
            raise ValueError(f"lookup: hot_rows {self.hot_rows!r}; allowed: {', '.join(HOT_ROWS)}")


@dataclass(frozen=True)
class Layer:
    """One trainable layer (or a fused group of small ones) in forward order.

    `forward_flops` counts FLOPs for one sample's forward pass, a multiply-add being 2 FLOPs.
    """

    name: str
    params: int
    forward_flops: float
    rows: int = 0  # an embedding table's rows (its `params / rows` values each); 0: not a table
    lookup: Optional[Lookup] = None  # set for tables whose gradient holds only looked-up rows

    def __post_init__(self) -> None:
        if self.params < 0 or self.forward_flops < 0:
            raise ValueError(f"layer {self.name!r}: params and forward_flops must be >= 0")
        if self.lookup is not None and (self.rows <= 0 or self.params % self.rows):
            raise ValueError(f"layer {self.name!r}: a lookup table needs rows > 0 dividing params")


@dataclass(frozen=True)
class ModelSpec:
    """A model as a sequence of layers, plus where its figures come from."""

    name: str
    layers: tuple[Layer, ...]
    source: str = ""
    sample: str = "one input sample"  # what one sample is (an image, a 128-token sequence, ...)

    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def forward_flops(self) -> float:
        return sum(layer.forward_flops for layer in self.layers)

    @property
    def training_flops(self) -> float:
        """FLOPs per sample for forward + backward (backward costs twice the forward)."""
        return 3.0 * self.forward_flops
