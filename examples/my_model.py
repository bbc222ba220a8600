"""A small image classifier written as any PyTorch user would, to profile as your own model:
`syncsim profile my_model:build --input float32:3x32x32 --classes 10 ...` from this folder
(docs/profiles.md, "Your own model")."""

from __future__ import annotations

import torch
from torch import nn


class SmallNet(nn.Module):
    """A convolution, a hidden layer and a classifier head: three layers that own parameters."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, kernel_size=3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(4)  # no parameters: its time is the convolution's span
        self.hidden = nn.Linear(16 * 4 * 4, 64)
        self.head = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.conv(x))).flatten(1)
        return self.head(torch.relu(self.hidden(x)))


def build() -> nn.Module:
    """The factory `syncsim profile my_model:build` calls."""
    return SmallNet()
