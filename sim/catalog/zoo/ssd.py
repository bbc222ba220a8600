"""SSD300 v1.1 (Liu et al. 2016, arXiv:1512.02325) with a ResNet-50 backbone on COCO, as NVIDIA's PyTorch
code builds it (`_SSD` below, ssd/model.py cited by line).

The backbone is torchvision's ResNet-50 up to conv4_x (`layer3`), whose first block strides 1 instead
of 2, so a 300x300 image leaves it as a 38x38 map of 1,024 channels. Five extra blocks (a 1x1 then a
3x3 convolution, each with batch norm and ReLU) shrink it to 19, 10, 5, 3 and 1; each of the six maps
feeds a 3x3 box-offset head and a 3x3 class head (81 COCO classes incl. background) for its 4 or 6
default boxes per position: 38^2*4 + 19^2*6 + 10^2*6 + 5^2*6 + 3^2*4 + 1*4 = 8,732 boxes. The loss
(smooth L1 on the matched boxes, cross-entropy with hard-negative mining) is folded into the last head.
Layer names are the module's parameter names (`feature_extractor.feature_extractor.N` is torchvision's
`children()[N]`).
"""

from __future__ import annotations

from sim.catalog.zoo.builders import RELU_FLOPS, SOFTMAX_FLOPS, batch_norm, conv2d, conv_output_size, plus_flops
from sim.catalog.zoo.cnn import bottleneck
from sim.catalog.zoo.spec import Layer, ModelSpec

_DLE = "NVIDIA/DeepLearningExamples@729963dd47e7c8bd462ad10bfac7a7b0b604e6dd"
_SSD = f"{_DLE}:PyTorch/Detection/SSD"

# "The input size is fixed to 300x300" (README.md L53)
SSD_IMAGE_SIZE = 300
# COCO's 80 classes and the background (ssd/model.py L61)
SSD_CLASSES = 81
# channels of the six maps the heads read (ssd/model.py L31, resnet50), the extra blocks' inner
# widths (L77) and default boxes per position (L63)
SSD_MAP_CHANNELS = (1024, 512, 512, 256, 256, 256)
SSD_EXTRA_WIDTHS = (256, 256, 128, 128, 128)
SSD_DEFAULT_BOXES = (4, 6, 6, 6, 4, 4)
# ResNet-50's stages up to conv4_x: (blocks, bottleneck width, stride); the third strides 1 in
# NVIDIA's backbone (ssd/model.py L44-L48)
_BACKBONE_STAGES = ((3, 64, 1), (4, 128, 2), (6, 256, 1))


def backbone(size: int) -> tuple[list[Layer], int]:
    """ResNet-50's stem and first three stages (ssd/model.py L42, torchvision layout); returns the
    layers and the output map's side."""
    prefix = "feature_extractor.feature_extractor"
    out = conv_output_size(size, 7, 2, 3)
    layers = [conv2d(f"{prefix}.0", 3, 64, 7, out, stride=2)]
    pooled = conv_output_size(out, 3, 2, 1)
    # The 3x3 max pool (9 comparisons per output) is folded into the stem's batch norm.
    stem = plus_flops(
        batch_norm(f"{prefix}.1", 64, out, relu=True), 9 * 64 * pooled**2, moved=64 * (out**2 + pooled**2)
    )
    layers.append(stem)
    size, in_ch = pooled, 64
    for child, (blocks, width, stride) in enumerate(_BACKBONE_STAGES, start=4):
        for block in range(blocks):
            block_layers, size = bottleneck(
                f"{prefix}.{child}.{block}", in_ch, width, stride if block == 0 else 1, size, stride_in_1x1=False
            )
            layers += block_layers
            in_ch = width * 4
    return layers, size


def extra_block(index: int, in_ch: int, width: int, out_ch: int, in_size: int) -> tuple[list[Layer], int]:
    """One additional block (ssd/model.py L75-L99): a 1x1 convolution, then a 3x3 one that strides 2
    with padding 1 (the first three) or 1 without padding (the last two), each with batch norm and ReLU."""
    stride, padding = (2, 1) if index < 3 else (1, 0)
    out_size = conv_output_size(in_size, 3, stride, padding)
    prefix = f"additional_blocks.{index}"
    layers = [
        conv2d(f"{prefix}.0", in_ch, width, 1, in_size),
        batch_norm(f"{prefix}.1", width, in_size, relu=True),
        conv2d(f"{prefix}.3", width, out_ch, 3, out_size, stride=stride),
        batch_norm(f"{prefix}.4", out_ch, out_size, relu=True),
    ]
    return layers, out_size


def default_boxes(sides: list[int]) -> int:
    """Default boxes over maps of these sides (SSD_DEFAULT_BOXES per position)."""
    return sum(per * s * s for per, s in zip(SSD_DEFAULT_BOXES, sides))


def ssd300_layers(size: int = SSD_IMAGE_SIZE) -> tuple[tuple[Layer, ...], list[int]]:
    """SSD300 for one `size` x `size` image, in the order the forward pass runs: backbone, extra
    blocks, then the heads map by map (box offsets, then classes; bbox_view, ssd/model.py L108-L115);
    also the six maps' sides."""
    layers, side = backbone(size)
    sides = [side]
    for index, width in enumerate(SSD_EXTRA_WIDTHS):
        block, side = extra_block(index, SSD_MAP_CHANNELS[index], width, SSD_MAP_CHANNELS[index + 1], side)
        layers += block
        sides.append(side)
    boxes = default_boxes(sides)
    for i, (channels, per, s) in enumerate(zip(SSD_MAP_CHANNELS, SSD_DEFAULT_BOXES, sides)):
        layers.append(conv2d(f"loc.{i}", channels, per * 4, 3, s, bias=True))
        layers.append(conv2d(f"conf.{i}", channels, per * SSD_CLASSES, 3, s, bias=True))
    outputs = float(boxes * (4 + SSD_CLASSES))
    logits = float(boxes * SSD_CLASSES)
    last = layers[-1]
    last = plus_flops(last, 0.0, moved=2 * outputs, kernels=2)  # the maps' outputs concatenated (Loss: 8,732 boxes)
    # cross-entropy per box in FP32 under autocast, smooth L1 on the 4 offsets, hard-negative mining's
    # two sorts of the 8,732 losses, the masked sums (Loss, ssd/model.py L159-L197)
    last = plus_flops(last, SOFTMAX_FLOPS * logits, moved=2 * logits + 2 * boxes, kernels=2, full_precision=True)
    last = plus_flops(last, 6.0 * boxes * 4, moved=5.0 * boxes * 4, kernels=3)
    last = plus_flops(last, RELU_FLOPS * boxes, moved=8.0 * boxes, kernels=6)
    layers[-1] = last
    return tuple(layers), sides


def ssd300() -> ModelSpec:
    return ModelSpec(
        name="ssd300",
        layers=ssd300_layers()[0],
        source=f"Liu et al. 2016 (arXiv:1512.02325), SSD300 v1.1 with a ResNet-50 backbone as {_SSD} builds it",
        sample=f"one {SSD_IMAGE_SIZE}x{SSD_IMAGE_SIZE} RGB image (COCO)",
    )
