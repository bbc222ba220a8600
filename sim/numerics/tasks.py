"""Data sets and models of numerics mode: sklearn's bundled digits or a seeded synthetic set, and a
logistic regression, MLP or small CNN whose parameters live in one flat vector.

Nothing is downloaded: `load_digits` reads the copy that ships with scikit-learn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from sim.config.numerics import NumericsConfig


@dataclass(frozen=True)
class Dataset:
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    classes: int


def load_dataset(cfg: NumericsConfig, seed: int) -> Dataset:
    """The samples, split into train and held-out by a permutation drawn from `seed`."""
    from sklearn.datasets import load_digits, make_classification

    if cfg.dataset == "digits":
        digits = load_digits()
        x = digits.data.astype(np.float32) / 16.0  # pixel intensities 0..16
        y = digits.target.astype(np.int64)
        if cfg.model == "cnn":
            x = x.reshape(-1, 1, 8, 8)
    else:
        s = cfg.synthetic
        x, y = make_classification(
            n_samples=s.samples,
            n_features=s.features,
            n_informative=s.informative,
            n_redundant=0,
            n_classes=s.classes,
            class_sep=s.class_sep,
            random_state=seed,
        )
        x, y = x.astype(np.float32), y.astype(np.int64)
    order = np.random.default_rng([seed, 0x5EED]).permutation(len(y))
    n_test = cfg.split[1]  # validated to leave a training sample
    test, train = order[:n_test], order[n_test:]
    x_train, x_test = x[train], x[test]
    if cfg.dataset == "synthetic":  # standardise with the training statistics only
        mean, std = x_train.mean(axis=0), x_train.std(axis=0) + 1e-6
        x_train, x_test = (x_train - mean) / std, (x_test - mean) / std
    return Dataset(
        torch.from_numpy(np.ascontiguousarray(x_train)),
        torch.from_numpy(y[train]),
        torch.from_numpy(np.ascontiguousarray(x_test)),
        torch.from_numpy(y[test]),
        int(y.max()) + 1,
    )


def build_model(cfg: NumericsConfig, data: Dataset) -> nn.Module:
    features = int(data.x_train[0].numel())
    if cfg.model == "logreg":
        return nn.Linear(features, data.classes)
    if cfg.model == "mlp":
        layers: list[nn.Module] = []
        width = features
        for h in cfg.hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        return nn.Sequential(*layers, nn.Linear(width, data.classes))
    c1, c2 = (cfg.channels + cfg.channels[-1:])[:2]  # one width given: both convs use it
    return nn.Sequential(
        nn.Conv2d(1, c1, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(c1, c2, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(c2 * 16, data.classes),
    )


def accumulate_gradient(
    loss: torch.Tensor,
    leaves: Sequence[torch.Tensor],
    grad: torch.Tensor,
    views: Sequence[torch.Tensor],
    loss_scale: float = 1.0,
) -> None:
    """Backward of `loss` into the flat gradient `grad`, of which `views` are the slices shaped as `leaves`.

    `grad` is zeroed and each view set as its leaf's `.grad` before backward: autograd's AccumulateGrad then
    adds the leaf's gradient into it in place (a defined `.grad`, outside grad mode), so the only temporaries
    are one tensor's gradient at a time, never a model-length vector. 0 + g is g exactly, so the values are
    those `torch.autograd.grad` returns. A leaf nothing depends on keeps its zeros."""
    grad.zero_()
    for leaf, view in zip(leaves, views):
        leaf.grad = view
    (loss * loss_scale if loss_scale != 1.0 else loss).backward()
    if loss_scale != 1.0:
        grad.div_(loss_scale)


class Task:
    """A model with flat parameters: losses, gradients and accuracy as functions of a 1-D tensor."""

    gradient_in_place = True  # `gradient` writes into `out` (sim.numerics.replica)

    def __init__(self, cfg: NumericsConfig, seed: int) -> None:
        self.cfg = cfg
        self.data = load_dataset(cfg, seed)
        with torch.random.fork_rng(devices=[]):  # seeded init without touching the caller's RNG
            torch.manual_seed(seed)
            self.module = build_model(cfg, self.data)
        self.initial = torch.cat([p.detach().reshape(-1) for p in self.module.parameters()]).clone()
        self.size = int(self.initial.numel())
        self.layers = list(self.module) if isinstance(self.module, nn.Sequential) else [self.module]
        self.tensor_sizes = [int(p.numel()) for p in self.module.parameters()]  # in flat order
        self.tensor_shapes = [tuple(int(d) for d in p.shape) for p in self.module.parameters()]  # in flat order

    def forward(self, flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The model's logits with parameters taken from `flat`, layer by layer (functional_call costs
        more than the tiny models' arithmetic; tests check this path against the nn.Module)."""
        return self._apply(self._tensors(flat), x)

    def _tensors(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """`flat` cut into the parameter tensors, in flat order (views)."""
        views, offset = [], 0
        for n, shape in zip(self.tensor_sizes, self.tensor_shapes):
            views.append(flat[offset : offset + n].view(shape))
            offset += n
        return views

    def _apply(self, tensors: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        given = iter(tensors)
        for layer in self.layers:
            if isinstance(layer, (nn.Linear, nn.Conv2d)):
                weight, bias = next(given), next(given)
                if isinstance(layer, nn.Linear):
                    x = F.linear(x, weight, bias)
                else:
                    x = F.conv2d(x, weight, bias, padding=layer.padding)
            elif isinstance(layer, nn.ReLU):
                x = F.relu(x)
            elif isinstance(layer, nn.MaxPool2d):
                x = F.max_pool2d(x, layer.kernel_size)
            elif isinstance(layer, nn.Flatten):
                x = x.flatten(1)
            else:  # pragma: no cover - build_model makes only the layers above
                raise TypeError(f"no functional rule for {type(layer).__name__}")
        return x

    def gradient(
        self,
        flat: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        loss_scale: float = 1.0,
        out: Optional[torch.Tensor] = None,
    ) -> tuple[torch.Tensor, float]:
        """The mean cross-entropy gradient over the batch, written into `out` (or a new vector), and the loss
        (`loss_scale`: backward runs on the loss times it, and the gradient is divided by it again: fp16
        training, real/precision.py). A leaf per parameter tensor, each accumulating into its slice of the
        gradient (`accumulate_gradient`): slices of one flat leaf would each hand back a zero-filled vector
        of the whole model's length."""
        leaves = [t.detach().requires_grad_(True) for t in self._tensors(flat)]
        grad = torch.empty_like(flat) if out is None else out
        loss = F.cross_entropy(self._apply(leaves, x), y)
        accumulate_gradient(loss, leaves, grad, self._tensors(grad), loss_scale)
        return grad, float(loss.detach())

    @torch.no_grad()
    def evaluate(self, flat: torch.Tensor) -> tuple[float, float]:
        """(loss, accuracy) on the held-out split."""
        logits = self.forward(flat, self.data.x_test)
        loss = F.cross_entropy(logits, self.data.y_test)
        accuracy = (logits.argmax(dim=1) == self.data.y_test).float().mean()
        return float(loss), float(accuracy)
