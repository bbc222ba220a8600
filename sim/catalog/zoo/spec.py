"""What the simulator needs to know about a model: its layers' parameter counts, tensor shapes and FLOPs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

HOT_ROWS = ("first", "scattered")
# What an operation's arithmetic runs on (sim/compute/roofline.py picks the peak from it and the precision):
# convolutions and matrix products go to tensor cores where the precision allows (PyTorch lets cuDNN
# use TF32 for convolutions by default, not for matrix products); element-wise work and lookups run
# on the ordinary cores and are almost always memory-bound.
OP_KINDS = ("conv", "matmul", "elementwise", "lookup")


@dataclass(frozen=True)
class Op:
    """One piece of a layer's forward pass, as the GPU sees it, for one sample.

    `moved` counts activation values read plus written (weights are counted once per batch, on the
    layer); `kernels` the kernels the eager framework launches for it. `winograd` marks a 3x3
    stride-1 convolution, which cuDNN can run on FP32 cores by Winograd's minimal filtering (fewer
    multiplications than its FLOPs count). `aligned` is false for a matrix product with a dimension
    that is not a multiple of 8 (a vocabulary of 50,257 tokens), which tensor cores run at a
    fraction of their aligned speed (NVIDIA's matrix-multiplication performance guide).
    `full_precision` marks the ops autocast keeps in FP32 (PyTorch's autocast op reference): under
    autocast their values move at 4 bytes, after a kernel that casts their half-precision input.
    `width` is a product's smaller dimension as a matrix product, which sets how much of each
    tensor-core tile it fills (sim/compute/roofline.py).
    """

    kind: str
    flops: float
    moved: float
    kernels: int = 1
    winograd: bool = False
    aligned: bool = True
    full_precision: bool = False  # autocast runs it in FP32 (layer norm, softmax, the loss)
    epilogue: bool = False  # tuned implementations fuse it into the op before it
    # a product's smaller dimension as a matrix product (output channels or reduction length, a
    # head's width); 0: not known, taken as wide
    width: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in OP_KINDS:
            raise ValueError(f"op kind {self.kind!r}; allowed: {', '.join(OP_KINDS)}")
        if self.flops < 0 or self.moved < 0 or self.kernels < 0 or self.width < 0:
            raise ValueError("op: flops, moved, kernels and width must be >= 0")


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


Shape = tuple[int, ...]


def shape_values(shapes: tuple[Shape, ...]) -> int:
    """Values held by tensors of these shapes (a shape `()` is a scalar: one value)."""
    return sum(math.prod(shape) for shape in shapes)


@dataclass(frozen=True)
class Layer:
    """One trainable layer (or a fused group of small ones) in forward order.

    `forward_flops` counts FLOPs for one sample's forward pass, a multiply-add being 2 FLOPs.
    `shapes` are the layer's trainable tensors in the order its PyTorch module lists its parameters
    (`named_parameters`: a module's own tensors, then its children's): weight then bias, an LSTM's
    weight_ih, weight_hh, bias_ih, bias_hh per direction, every tensor of a fused group. What a
    low-rank codec such as PowerSGD factors; empty when not known (a layer built by hand).
    """

    name: str
    params: int
    forward_flops: float
    rows: int = 0  # an embedding table's rows (its `params / rows` values each); 0: not a table
    lookup: Optional[Lookup] = None  # set for tables whose gradient holds only looked-up rows
    # the forward pass as the GPU runs it (its flops sum to `forward_flops`); empty: one matrix
    # product of `forward_flops` that moves no activations (synthetic layers)
    ops: tuple[Op, ...] = ()
    bias: bool = False  # a convolution's or matrix product's bias: a second tensor for autocast to cast
    shapes: tuple[Shape, ...] = ()  # the trainable tensors' shapes in module order; (): not known
    # activation values one sample's forward leaves for this layer's backward, in the training type
    # (what autograd saves); None: not counted, estimated from the ops (`activation_values`)
    saved: Optional[float] = None
    saved_fp32: float = 0.0  # values it saves in FP32 whatever the training type (the loss's log-softmax)
    # FP32 values its backward holds at once besides what it saved (the loss: the gradients with respect to
    # the log-probabilities and to the logits); 0: gradients as large as what it saved (the general rule)
    backward_fp32: float = 0.0
    block: int = -1  # the checkpointed block (a transformer layer) it belongs to; -1: none
    # under op-level selective checkpointing of its block (torchtitan's): the values it keeps per sample, and
    # whether backward recomputes its forward (its matrix product's output was not kept)
    selective_saved: float = 0.0
    selective_recompute: bool = False

    def __post_init__(self) -> None:
        counts = (self.params, self.forward_flops, self.saved or 0.0, self.saved_fp32, self.backward_fp32)
        if min(counts) < 0:
            raise ValueError(
                f"layer {self.name!r}: params, forward_flops, saved, saved_fp32 and backward_fp32 must be >= 0"
            )
        if any(not all(isinstance(d, int) and d >= 1 for d in shape) for shape in self.shapes):
            raise ValueError(f"layer {self.name!r}: shapes {self.shapes} must hold positive integer dimensions")
        if self.shapes and shape_values(self.shapes) != self.params:
            raise ValueError(
                f"layer {self.name!r}: shapes {self.shapes} hold {shape_values(self.shapes)} values, "
                f"but params is {self.params}; they must be equal"
            )
        if self.lookup is not None and (self.rows <= 0 or self.params % self.rows):
            raise ValueError(f"layer {self.name!r}: a lookup table needs rows > 0 dividing params")

    @property
    def activation_values(self) -> float:
        """Values one sample saves for this layer's backward: `saved` where the builder counted them, else
        half of what its ops move (each op keeps its input for backward, about half of what it reads and
        writes; synthetic layers move nothing and count none)."""
        if self.saved is not None:
            return self.saved
        return sum(op.moved for op in self.ops) / 2.0

    @property
    def shaped(self) -> bool:
        """Whether the layer's tensor shapes are known (a layer without parameters has none to know)."""
        return bool(self.shapes) or self.params == 0


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
