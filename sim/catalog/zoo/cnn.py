"""Convolutional networks: ResNet-50 and VGG-16 on ImageNet, WideResNet-26-10 and ResNet-32 on CIFAR-10.

Layer names follow the parameter names of the usual PyTorch implementations (torchvision for
ResNet-50, VGG-16 and the basic blocks of ResNet-32), so a layer can be matched against a
`state_dict` by prefix.
"""

from __future__ import annotations

from sim.catalog.zoo.builders import (
    RELU_FLOPS,
    batch_norm,
    conv2d,
    conv_output_size,
    linear,
    plus_flops,
)
from sim.catalog.zoo.spec import Layer, ModelSpec

IMAGENET_CLASSES = 1000
CIFAR10_CLASSES = 10

# (blocks, bottleneck width, stride of the first block) for ResNet-50's four stages.
_RESNET50_STAGES = ((3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2))
_BOTTLENECK_EXPANSION = 4


def bottleneck(
    prefix: str, in_ch: int, width: int, stride: int, in_size: int, stride_in_1x1: bool
) -> tuple[list[Layer], int]:
    """One bottleneck block; returns its layers and its output spatial size."""
    out_ch = width * _BOTTLENECK_EXPANSION
    out_size = conv_output_size(in_size, 1, stride)
    # torchvision (ResNet "v1.5") strides in the 3x3 conv; the original paper (v1) in the first 1x1.
    mid_size = out_size if stride_in_1x1 else in_size
    layers = [
        conv2d(f"{prefix}.conv1", in_ch, width, 1, mid_size, stride=stride if stride_in_1x1 else 1),
        batch_norm(f"{prefix}.bn1", width, mid_size, relu=True),
        conv2d(f"{prefix}.conv2", width, width, 3, out_size, stride=1 if stride_in_1x1 else stride),
        batch_norm(f"{prefix}.bn2", width, out_size, relu=True),
        conv2d(f"{prefix}.conv3", width, out_ch, 1, out_size),
        # The residual add and the final ReLU are folded into the last batch norm.
        batch_norm(f"{prefix}.bn3", out_ch, out_size, relu=True),
    ]
    residual = out_ch * out_size * out_size
    layers[-1] = plus_flops(layers[-1], residual, moved=3 * residual, epilogue=True)
    if stride != 1 or in_ch != out_ch:
        layers += [
            conv2d(f"{prefix}.downsample.0", in_ch, out_ch, 1, out_size, stride=stride),
            batch_norm(f"{prefix}.downsample.1", out_ch, out_size),
        ]
    return layers, out_size


def resnet50_layers(*, stride_in_1x1: bool = False) -> tuple[Layer, ...]:
    """ResNet-50 for 224x224 ImageNet images, torchvision layout (v1.5 unless `stride_in_1x1`)."""
    size = conv_output_size(224, 7, 2, 3)  # 112
    layers = [conv2d("conv1", 3, 64, 7, size, stride=2)]
    pooled = conv_output_size(size, 3, 2, 1)  # 56
    # The 3x3 max pool (9 comparisons per output) is folded into the stem's batch norm.
    pool = plus_flops(
        batch_norm("bn1", 64, size, relu=True), 9 * 64 * pooled * pooled, moved=64 * (size**2 + pooled**2)
    )
    layers.append(pool)
    size, in_ch = pooled, 64
    for stage, (blocks, width, stride) in enumerate(_RESNET50_STAGES, start=1):
        for block in range(blocks):
            block_layers, size = bottleneck(
                f"layer{stage}.{block}",
                in_ch,
                width,
                stride if block == 0 else 1,
                size,
                stride_in_1x1,
            )
            layers += block_layers
            in_ch = width * _BOTTLENECK_EXPANSION
    # Global average pooling (one add per input element) is folded into the classifier.
    layers.append(plus_flops(linear("fc", in_ch, IMAGENET_CLASSES), in_ch * size * size, moved=in_ch * size * size))
    return tuple(layers)


def resnet50() -> ModelSpec:
    return ModelSpec(
        name="resnet50",
        layers=resnet50_layers(),
        source="He et al. 2016 (arXiv:1512.03385), torchvision layout (stride in the 3x3 conv)",
        sample="one 224x224 RGB image",
    )


# VGG-16 ("configuration D"): conv widths, "M" for a 2x2 max pool.
_VGG16_FEATURES = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M",
                   512, 512, 512, "M", 512, 512, 512, "M")  # fmt: skip


def vgg16() -> ModelSpec:
    """VGG-16 for 224x224 images, no batch norm, with its three fully-connected layers."""
    layers: list[Layer] = []
    size, in_ch, index = 224, 3, 0  # `index` mirrors torchvision's `features.N` numbering
    for item in _VGG16_FEATURES:
        if item == "M":
            size //= 2
            # 2x2 pooling: 4 comparisons per output, folded into the conv before it.
            layers[-1] = plus_flops(layers[-1], 4 * in_ch * size * size, moved=5 * in_ch * size * size)
            index += 1
            continue
        out_ch = int(item)
        conv = conv2d(f"features.{index}", in_ch, out_ch, 3, size, bias=True)
        layers.append(plus_flops(conv, RELU_FLOPS * out_ch * size * size, moved=2 * out_ch * size * size))
        in_ch, index = out_ch, index + 2  # conv, ReLU
    flat = in_ch * size * size  # 512 * 7 * 7; torchvision's adaptive pool is the identity here
    layers += [
        # ReLU then dropout after each hidden layer
        plus_flops(
            plus_flops(linear("classifier.0", flat, 4096), RELU_FLOPS * 4096, moved=2 * 4096), 0, moved=2 * 4096
        ),
        plus_flops(
            plus_flops(linear("classifier.3", 4096, 4096), RELU_FLOPS * 4096, moved=2 * 4096), 0, moved=2 * 4096
        ),
        linear("classifier.6", 4096, IMAGENET_CLASSES),
    ]
    return ModelSpec(
        name="vgg16",
        layers=tuple(layers),
        source="Simonyan & Zisserman 2015 (arXiv:1409.1556), configuration D, torchvision layout",
        sample="one 224x224 RGB image",
    )


def wide_resnet_layers(depth: int, widen: int, *, classes: int = CIFAR10_CLASSES) -> tuple[Layer, ...]:
    """A pre-activation WideResNet for 32x32 CIFAR images.

    `depth` counts the 3x3 convolutions plus the classifier, as for CIFAR ResNets: depth = 6n + 2
    with n basic blocks per group (1x1 shortcut convs are not counted). WRN-26-10 therefore has
    n = 4, the same network as Zagoruyko & Komodakis' WRN-28-10, whose depth = 6n + 4 counts the
    three shortcut convs (one per group) instead of the classifier.
    """
    if (depth - 2) % 6:
        raise ValueError(f"depth must be 6n + 2 for a WideResNet, got {depth}")
    n = (depth - 2) // 6
    size = 32
    layers = [conv2d("conv1", 3, 16, 3, size)]
    in_ch = 16
    for group, (width, stride) in enumerate(((16, 1), (32, 2), (64, 2)), start=1):
        out_ch = width * widen
        for block in range(n):
            prefix = f"group{group}.{block}"
            s = stride if block == 0 else 1
            out_size = conv_output_size(size, 3, s, 1)
            layers += [
                batch_norm(f"{prefix}.bn1", in_ch, size, relu=True),
                conv2d(f"{prefix}.conv1", in_ch, out_ch, 3, out_size, stride=s),
                batch_norm(f"{prefix}.bn2", out_ch, out_size, relu=True),
                # The residual add is folded into the block's last conv.
                plus_flops(
                    conv2d(f"{prefix}.conv2", out_ch, out_ch, 3, out_size),
                    out_ch * out_size * out_size,
                    moved=3 * out_ch * out_size * out_size,
                ),
            ]
            if in_ch != out_ch:
                layers.append(conv2d(f"{prefix}.shortcut", in_ch, out_ch, 1, out_size, stride=s))
            in_ch, size = out_ch, out_size
    layers.append(batch_norm("bn", in_ch, size, relu=True))
    # Global average pooling folded into the classifier.
    layers.append(plus_flops(linear("fc", in_ch, classes), in_ch * size * size, moved=in_ch * size * size))
    return tuple(layers)


def wrn26_10() -> ModelSpec:
    return ModelSpec(
        name="wrn26_10",
        layers=wide_resnet_layers(26, 10),
        source=(
            "Zagoruyko & Komodakis 2016 (arXiv:1605.07146); depth counted as 6n+2, "
            "so 4 blocks per group as in their WRN-28-10"
        ),
        sample="one 32x32 RGB image (CIFAR-10)",
    )


def _basic_block(prefix: str, in_ch: int, out_ch: int, stride: int, in_size: int) -> tuple[list[Layer], int]:
    """One post-activation basic block (two 3x3 convs); returns its layers and its output size."""
    out_size = conv_output_size(in_size, 3, stride, 1)
    layers = [
        conv2d(f"{prefix}.conv1", in_ch, out_ch, 3, out_size, stride=stride),
        batch_norm(f"{prefix}.bn1", out_ch, out_size, relu=True),
        conv2d(f"{prefix}.conv2", out_ch, out_ch, 3, out_size),
        # The residual add and the final ReLU are folded into the last batch norm.
        plus_flops(
            batch_norm(f"{prefix}.bn2", out_ch, out_size, relu=True),
            out_ch * out_size * out_size,
            moved=3 * out_ch * out_size * out_size,
        ),
    ]
    if stride != 1 or in_ch != out_ch:
        # Option B: a 1x1 projection (with batch norm) only where the shape changes.
        layers += [
            conv2d(f"{prefix}.downsample.0", in_ch, out_ch, 1, out_size, stride=stride),
            batch_norm(f"{prefix}.downsample.1", out_ch, out_size),
        ]
    return layers, out_size


def cifar_resnet_layers(depth: int, *, classes: int = CIFAR10_CLASSES) -> tuple[Layer, ...]:
    """He et al.'s CIFAR ResNet (section 4.2) for 32x32 images, depth = 6n + 2.

    A 3x3 conv with 16 channels, three stages of n basic blocks with 16, 32 and 64 channels (stride 2
    at the start of the second and third), global average pooling and a linear classifier. Shortcuts
    are identities except at the two downsampling blocks, which project with a 1x1 conv plus batch
    norm (option B), as the TensorFlow CIFAR ResNets (official models, Tensor2Tensor) do.
    """
    if depth < 8 or (depth - 2) % 6:
        raise ValueError(f"depth must be 6n + 2 with n >= 1 for a CIFAR ResNet, got {depth}")
    n = (depth - 2) // 6
    size = 32
    layers = [conv2d("conv1", 3, 16, 3, size), batch_norm("bn1", 16, size, relu=True)]
    in_ch = 16
    for stage, (width, stride) in enumerate(((16, 1), (32, 2), (64, 2)), start=1):
        for block in range(n):
            block_layers, size = _basic_block(f"layer{stage}.{block}", in_ch, width, stride if block == 0 else 1, size)
            layers += block_layers
            in_ch = width
    # Global average pooling folded into the classifier.
    layers.append(plus_flops(linear("fc", in_ch, classes), in_ch * size * size, moved=in_ch * size * size))
    return tuple(layers)


def resnet32() -> ModelSpec:
    """ResNet-32 on CIFAR-10: n = 5, 466,906 parameters, 0.07 GMACs per image (see docs/zoo.md)."""
    return ModelSpec(
        name="resnet32",
        layers=cifar_resnet_layers(32),
        source=(
            "He et al. 2016 (arXiv:1512.03385), CIFAR-10 ResNet with n = 5; "
            "1x1 projection shortcuts with batch norm at the two downsampling blocks (option B)"
        ),
        sample="one 32x32 RGB image (CIFAR-10)",
    )
