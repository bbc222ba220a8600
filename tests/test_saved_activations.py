"""What autograd saves for backward, per layer (real/saved_activations.py), against hand counts of what
each op keeps: activations once per storage, for the layer that saved them first; no parameters, views of
them, or autocast's copies of them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from real.model_input import parse_input  # noqa: E402
from real.profiler import measure_module_profile  # noqa: E402
from real.saved_activations import saved_bytes  # noqa: E402
from real.user_model import module_layout  # noqa: E402

CPU = torch.device("cpu")
BATCH = 4


def mean_loss(out: torch.Tensor, _: object) -> torch.Tensor:
    return out.mean()  # its backward keeps only the shape: it saves nothing


def tiny() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))


def measured(module: nn.Module, called: list[str], x: torch.Tensor, precision: str = "fp32") -> list[int]:
    return saved_bytes(module, (x,), None, mean_loss, module_layout(module, called), precision, CPU)


def test_a_linear_relu_linear_saves_its_input_and_the_relu_output_once() -> None:
    # layer 0 (its span: Linear, then the ReLU): the batch it multiplies, 4 x 16 fp32, and the ReLU's
    # output, 4 x 32 fp32. Layer 1's Linear saves that same output as its input (the storage is counted
    # once, for the layer that saved it first) and its weight's transpose (a parameter's view: left out)
    x = torch.randn(BATCH, 16)
    assert measured(tiny(), ["0", "1", "2"], x) == [BATCH * 16 * 4 + BATCH * 32 * 4, 0] == [768, 0]


def test_under_autocast_the_16_bit_activations_count_and_the_weights_copies_do_not() -> None:
    # bf16 autocast: Linear 0 saves the bf16 cast of the batch, the ReLU its bf16 output; layer 1's bf16 copy
    # of its weight (cast from the parameter, then transposed) is the parameters' term, not an activation
    x = torch.randn(BATCH, 16)
    assert measured(tiny(), ["0", "1", "2"], x, "bf16") == [BATCH * 16 * 2 + BATCH * 32 * 2, 0] == [384, 0]


class LookedUp(nn.Module):
    """An embedding read by the parent's code (its module never called), then a Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.fc = nn.Linear(8, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.fc(nn.functional.embedding(ids, self.emb.weight).mean(1))


def test_what_is_saved_before_any_layer_is_called_goes_to_the_first_one_called() -> None:
    # the lookup saves its ids (4 x 3 int64) before any layer's module is called: they go to fc, the
    # first called, with fc's input (the mean over the 3 positions, 4 x 8 fp32); the uncalled emb gets none
    module = LookedUp()
    ids = torch.randint(10, (BATCH, 3))
    layout = module_layout(module, ["", "fc"])
    assert [name for name, _ in layout] == ["fc", "emb"]
    got = saved_bytes(module, (ids,), None, mean_loss, layout, "fp32", CPU)
    assert got == [BATCH * 3 * 8 + BATCH * 8 * 4, 0] == [224, 0]


def test_a_profiled_module_records_the_hand_counted_bytes_in_its_layers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tiny_saved.py").write_text(
        "from torch import nn\n\n\ndef build():\n"
        "    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))\n"
    )
    monkeypatch.chdir(tmp_path)
    try:
        profile = measure_module_profile(
            "tiny_saved:build", [parse_input("float32:16")], BATCH, device="cpu", warmup=0, repeats=1
        )
    finally:  # loaded from this folder: no other test may find it imported
        sys.modules.pop("tiny_saved", None)
    assert [t.saved_bytes for t in profile.layers] == [768, 0] and profile.saved_bytes == 768


class Checkpointed(nn.Module):
    """Linear a, then b and d inside one checkpointed region (ReLUs between them), then Linear c."""

    def __init__(self, checkpointed: bool) -> None:
        super().__init__()
        self.a, self.b, self.d, self.c = nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 32), nn.Linear(32, 8)
        self.checkpointed = checkpointed

    def region(self, h: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.d(torch.relu(self.b(torch.relu(h)))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        if self.checkpointed:
            h = torch.utils.checkpoint.checkpoint(self.region, h, use_reentrant=False)
        else:
            h = self.region(h)
        return self.c(h)


def test_a_checkpointed_region_counts_the_input_it_keeps_not_what_it_recomputes() -> None:
    x, row = torch.randn(BATCH, 16), BATCH * 32 * 4  # a 4 x 32 fp32 activation: 512 bytes
    # without: the batch, then each of the three ReLUs' outputs (which b, d and c save again as inputs)
    plain = Checkpointed(False)
    assert measured(plain, ["a", "b", "d", "c"], x) == [256 + row, row, row, 0]
    # with: the batch, the region's input (kept for its recompute, before b is called) and c's input
    kept = Checkpointed(True)
    assert measured(kept, ["a", "b", "d", "c"], x) == [256 + row, 0, 0, row]
