"""Top-k gradient sparsification with error feedback, per tensor (numerics mode and real backend).

Each worker adds the residual it kept back last time to its new gradient, keeps the k largest
magnitudes of every tensor (k = ceil(density x elements)), sends those, and keeps the rest as the
next residual, so nothing is lost, only delayed (Stich et al. 2018; Lin et al.'s deep gradient
compression). Tensors of at most `dense_below` elements pass whole, as in Zen's sparsifier.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Optional

import torch


class ErrorFeedbackTopK:
    def __init__(self, tensor_sizes: Sequence[int], density: float, dense_below: int) -> None:
        self.density = density
        self.spans: list[tuple[int, int, int]] = []  # (start, end, k) of the tensors that are sparsified
        start = 0
        for size in tensor_sizes:
            if size > dense_below:
                self.spans.append((start, start + size, max(1, math.ceil(density * size))))
            start += size
        self.size = start
        self.residual: Optional[torch.Tensor] = None

    def __call__(self, grad: torch.Tensor) -> torch.Tensor:
        """The sparsified gradient to send; the rest is kept as the residual."""
        if self.residual is None:
            self.residual = torch.zeros_like(grad)
        acc = grad + self.residual
        sent = acc.clone()
        for a, b, k in self.spans:
            part = acc[a:b]
            keep = torch.topk(part.abs(), k, sorted=False).indices
            sent[a:b] = 0
            sent[a + keep] = part[keep]
        self.residual = acc - sent
        return sent
