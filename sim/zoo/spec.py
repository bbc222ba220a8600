"""What the simulator needs to know about a model: its layers' parameter counts and FLOPs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layer:
    """One trainable layer (or a fused group of small ones) in forward order.

    `forward_flops` counts FLOPs for one sample's forward pass, a multiply-add being 2 FLOPs.
    """

    name: str
    params: int
    forward_flops: float

    def __post_init__(self) -> None:
        if self.params < 0 or self.forward_flops < 0:
            raise ValueError(f"layer {self.name!r}: params and forward_flops must be >= 0")


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
