"""The loss's backward holds what sim/compute/activations.py says: besides the saved FP32 log-probabilities,
two more FP32 tensors of a value per token and word (their gradient, and the logits' gradient), measured
on this machine's allocator as autograd runs the backward of a bf16 head and an FP32 cross-entropy."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from real.device_use import _allocated_counter
from sim.catalog.zoo.llm import decoder_model
from tests.test_memory import small_arch

ALLOCATED = _allocated_counter()


class PeakAfterEachOp(TorchDispatchMode):
    """The C library's in-use bytes read after every op: the largest reading."""

    def __init__(self) -> None:
        super().__init__()
        self.peak = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        assert ALLOCATED is not None
        self.peak = max(self.peak, ALLOCATED())
        return out


def loss_backward_peak(tokens: int, vocab: int, width: int = 64) -> float:
    """Bytes above the post-forward count at the peak of a head's and loss's backward."""
    assert ALLOCATED is not None
    torch.manual_seed(0)
    weight = torch.randn(vocab, width, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (tokens,))
    for _ in range(2):  # the first backward under a dispatch mode allocates the mode's own bookkeeping
        hidden = torch.randn(tokens, width, dtype=torch.bfloat16)
        logits = hidden @ weight.t()
        loss = F.cross_entropy(logits.float(), labels)  # as Hugging Face's and torchtitan's losses cast
        del logits  # torchtitan frees the logits before backward
        base = ALLOCATED()
        watch = PeakAfterEachOp()
        with watch:
            loss.backward()
    return watch.peak - base


@pytest.mark.skipif(ALLOCATED is None, reason="the C library has no mallinfo2")
def test_cross_entropy_backward_holds_two_fp32_vocabulary_tensors_beyond_its_saved_log_probabilities() -> None:
    tokens, vocab = 1024, 8192  # 32 MiB per FP32 tensor: far above malloc's bookkeeping
    unit = 4 * tokens * vocab
    assert loss_backward_peak(tokens, vocab) / unit == pytest.approx(2.0, abs=0.1)


def test_the_head_declares_that_transient_and_the_loss_keeps_its_log_probabilities() -> None:
    arch = small_arch()
    head = decoder_model("small", arch, "test").layers[-1]
    assert head.name == "lm_head"
    assert head.saved_fp32 == arch.vocab * arch.seq_len
    assert head.backward_fp32 == 2 * arch.vocab * arch.seq_len
