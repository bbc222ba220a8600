"""torch.nn versions of the model zoo (`sim.catalog.zoo`), for training on real tensors.

Every module's parameter names start with the name of the zoo layer they belong to, so
`flat_layout` can lay the parameters out in the zoo's layer order and each layer's slice of the flat
vector is exactly as large as the zoo says (tests/test_zoo_nets.py checks every model, layer by
layer): the simulator's gradient buckets then cut the real flat vector at the same places.

Choices that keep runs deterministic and replicas independent: batch norm uses batch statistics
only (no running buffers shared between replicas) and VGG's dropout is off.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import torch
from torch import nn
from torch.nn import functional as F

from sim.catalog.zoo import ModelSpec
from sim.catalog.zoo.cnn import CIFAR10_CLASSES, IMAGENET_CLASSES
from sim.catalog.zoo.recsys import (
    CRITEO_CATEGORICAL_FIELDS,
    CRITEO_DENSE_FIELDS,
    CRITEO_HASHED_FEATURES,
    DEEPFM_EMBEDDING_DIM,
    DEEPFM_HIDDEN,
)
from sim.catalog.zoo.transformers import BERT_POSITIONS, BERT_TOKEN_TYPES, BERT_VOCAB, GPT2_POSITIONS, GPT2_VOCAB

FIELDS = CRITEO_DENSE_FIELDS + CRITEO_CATEGORICAL_FIELDS


def _bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, track_running_stats=False)


def _conv(cin: int, cout: int, k: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, k, stride, padding=k // 2, bias=False)


# ----------------------------------------------------------------------------------------- CNNs
class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck (stride in the 3x3 convolution), torchvision's names."""

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = 4 * width
        self.conv1, self.bn1 = _conv(cin, width, 1), _bn(width)
        self.conv2, self.bn2 = _conv(width, width, 3, stride), _bn(width)
        self.conv3, self.bn3 = _conv(width, cout, 1), _bn(cout)
        self.downsample = nn.Sequential(_conv(cin, cout, 1, stride), _bn(cout)) if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet50(nn.Module):
    def __init__(self, classes: int = IMAGENET_CLASSES) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = _bn(64)
        cin = 64
        for stage, (blocks, width, stride) in enumerate(((3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2)), 1):
            layers = []
            for b in range(blocks):
                layers.append(Bottleneck(cin, width, stride if b == 0 else 1))
                cin = 4 * width
            setattr(self, f"layer{stage}", nn.Sequential(*layers))
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class VGG16(nn.Module):
    """Configuration D, torchvision's indices (dropout slots kept as identities)."""

    def __init__(self, classes: int = IMAGENET_CLASSES) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for v in (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"):
            if v == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                layers += [nn.Conv2d(cin, int(v), 3, padding=1), nn.ReLU()]
                cin = int(v)
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Identity(),
            nn.Linear(4096, 4096), nn.ReLU(), nn.Identity(),
            nn.Linear(4096, classes),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), 7)
        return self.classifier(torch.flatten(x, 1))


class WideBlock(nn.Module):
    """Pre-activation wide block; a 1x1 shortcut where the width or the size changes."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.bn1, self.conv1 = _bn(cin), _conv(cin, cout, 3, stride)
        self.bn2, self.conv2 = _bn(cout), _conv(cout, cout, 3)
        self.shortcut = _conv(cin, cout, 1, stride) if cin != cout or stride != 1 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        act = F.relu(self.bn1(x))
        out = self.conv2(F.relu(self.bn2(self.conv1(act))))
        return out + (x if self.shortcut is None else self.shortcut(act))


class WRN26x10(nn.Module):
    def __init__(self, classes: int = CIFAR10_CLASSES) -> None:
        super().__init__()
        self.conv1 = _conv(3, 16, 3)
        cin = 16
        for g, (width, stride) in enumerate(((160, 1), (320, 2), (640, 2)), 1):
            blocks = []
            for b in range(4):
                blocks.append(WideBlock(cin, width, stride if b == 0 else 1))
                cin = width
            setattr(self, f"group{g}", nn.Sequential(*blocks))
        self.bn = _bn(cin)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.group3(self.group2(self.group1(self.conv1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(F.relu(self.bn(x)), 1), 1))


class BasicBlock(nn.Module):
    """Post-activation basic block, torchvision's names; option-B 1x1 projection where the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv(cin, cout, 3, stride), _bn(cout)
        self.conv2, self.bn2 = _conv(cout, cout, 3), _bn(cout)
        self.downsample = nn.Sequential(_conv(cin, cout, 1, stride), _bn(cout)) if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet32(nn.Module):
    """He et al.'s CIFAR ResNet-32: 16/32/64 channels, five basic blocks per stage."""

    def __init__(self, classes: int = CIFAR10_CLASSES, blocks: int = 5) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv(3, 16, 3), _bn(16)
        cin = 16
        for stage, (width, stride) in enumerate(((16, 1), (32, 2), (64, 2)), 1):
            layers = []
            for b in range(blocks):
                layers.append(BasicBlock(cin, width, stride if b == 0 else 1))
                cin = width
            setattr(self, f"layer{stage}", nn.Sequential(*layers))
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# ---------------------------------------------------------------------------------- transformers
class Attention(nn.Module):
    def __init__(self, d: int, heads: int, causal: bool) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, d = x.shape
        q, k, v = self.qkv(x).view(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.out(y.transpose(1, 2).reshape(n, t, d))


class MLP(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))


class EncoderLayer(nn.Module):
    """BERT's post-norm layer (names in the zoo's order: attn, ln1, mlp, ln2)."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.attn, self.ln1 = Attention(d, heads, causal=False), nn.LayerNorm(d)
        self.mlp, self.ln2 = MLP(d), nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.mlp(x))


class DecoderLayer(nn.Module):
    """GPT-2's pre-norm layer."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(d), Attention(d, heads, causal=True)
        self.ln2, self.mlp = nn.LayerNorm(d), MLP(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class BertEmbeddings(nn.Module):
    def __init__(self, vocab: int, d: int, positions: int) -> None:
        super().__init__()
        self.word, self.position = nn.Embedding(vocab, d), nn.Embedding(positions, d)
        self.token_type, self.ln = nn.Embedding(BERT_TOKEN_TYPES, d), nn.LayerNorm(d)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        x = self.word(tokens) + self.position.weight[:t] + self.token_type.weight[0]
        return self.ln(x)


def _init_transformer(module: nn.Module) -> None:
    """BERT's and GPT-2's initialisation: weights N(0, 0.02), biases zero (with PyTorch's defaults
    the tied output layer's logits start around +-30)."""
    for sub in module.modules():
        if isinstance(sub, (nn.Linear, nn.Embedding)):
            nn.init.normal_(sub.weight, std=0.02)
        if isinstance(sub, nn.Linear) and sub.bias is not None:
            nn.init.zeros_(sub.bias)


class Bert(nn.Module):
    """BERT with pooler; trained as a masked language model whose decoder is the tied word
    embedding (no extra parameters, so the pooler receives no gradient)."""

    def __init__(
        self, d: int, layers: int, heads: int, vocab: int = BERT_VOCAB, positions: int = BERT_POSITIONS
    ) -> None:
        super().__init__()
        self.embeddings = BertEmbeddings(vocab, d, positions)
        self.encoder = nn.Sequential(*(EncoderLayer(d, heads) for _ in range(layers)))
        self.pooler = nn.Linear(d, d)
        _init_transformer(self)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.embeddings(tokens))
        return h @ self.embeddings.word.weight.t()  # token logits


class GPT2(nn.Module):
    def __init__(
        self, d: int = 768, layers: int = 12, heads: int = 12, vocab: int = GPT2_VOCAB, positions: int = GPT2_POSITIONS
    ) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(positions, d)
        self.h = nn.Sequential(*(DecoderLayer(d, heads) for _ in range(layers)))
        self.ln_f = nn.LayerNorm(d)
        _init_transformer(self)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.wte(tokens) + self.wpe.weight[: tokens.shape[1]]
        return self.ln_f(self.h(x)) @ self.wte.weight.t()  # tied head


# ----------------------------------------------------------------------------------------- DeepFM
class FirstOrder(nn.Module):
    def __init__(self, features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(features, 1))
        self.bias = nn.Parameter(torch.zeros(1))


class DeepFM(nn.Module):
    def __init__(
        self, features: int = CRITEO_HASHED_FEATURES, dim: int = DEEPFM_EMBEDDING_DIM, fields: int = FIELDS
    ) -> None:
        super().__init__()
        self.fm = nn.Module()
        self.fm.linear = FirstOrder(features)
        self.embedding = nn.Embedding(features, dim)
        nn.init.normal_(self.embedding.weight, std=0.01)
        widths = (fields * dim, *DEEPFM_HIDDEN)
        self.dnn = nn.ModuleDict({str(i): nn.Linear(widths[i], widths[i + 1]) for i in range(len(DEEPFM_HIDDEN))})
        self.dnn["out"] = nn.Linear(widths[-1], 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        linear = self.fm.linear.weight[ids].sum(dim=(1, 2)) + self.fm.linear.bias
        v = self.embedding(ids)  # (n, fields, dim)
        pairwise = 0.5 * (v.sum(1).pow(2) - v.pow(2).sum(1)).sum(1)
        h = v.flatten(1)
        for i in range(len(DEEPFM_HIDDEN)):
            h = F.relu(self.dnn[str(i)](h))
        return linear + pairwise + self.dnn["out"](h).squeeze(1)  # one logit per sample


BUILDERS: dict[str, Callable[[], nn.Module]] = {
    "resnet50": ResNet50,
    "vgg16": VGG16,
    "wrn26_10": WRN26x10,
    "resnet32": ResNet32,
    "bert_base": lambda: Bert(768, 12, 12),
    "bert_large": lambda: Bert(1024, 24, 16),
    "gpt2": GPT2,
    "deepfm": DeepFM,
}


def build_zoo_module(name: str, features: Optional[int] = None) -> nn.Module:
    """The zoo model `name` (one of TORCH_MODELS; ValueError for the others); `features` shrinks
    DeepFM's hashed feature space."""
    if name not in BUILDERS:
        raise ValueError(
            f"model {name!r} has no torch.nn version (the simulator times it from its zoo layers only); "
            f"buildable: {', '.join(BUILDERS)}"
        )
    if name == "deepfm" and features is not None:
        return DeepFM(features)
    return BUILDERS[name]()


def flat_layout(module: nn.Module, spec: ModelSpec) -> list[tuple[str, list[str]]]:
    """Per zoo layer, in the zoo's order, the module's parameter names that belong to it."""
    names = [n for n, _ in module.named_parameters()]
    taken: set[str] = set()
    layout = []
    for layer in spec.layers:
        mine = [n for n in names if n not in taken and (n.startswith(layer.name + ".") or n == layer.name)]
        taken.update(mine)
        layout.append((layer.name, mine))
    missing = [n for n in names if n not in taken]
    if missing:
        raise ValueError(f"{spec.name}: parameters in no zoo layer: {missing[:5]}")
    return layout
