"""What a wire type does to values (sim/numerics/wire_cast.py), against hand-worked grids and sums."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from sim.numerics.wire_cast import (  # noqa: E402
    FP4_GRID,
    codec_sum,
    decode,
    encode,
    encoded_bytes,
    reduced_chunk,
    ring_sum,
    round_trip,
)


def test_fp4_rounds_to_the_e2m1_magnitudes_of_the_block_scale() -> None:
    # one block whose largest magnitude is 6: the scale is 1 and values land on the grid itself
    x = torch.tensor([6.0, 5.1, 3.4, 2.2, 1.3, 0.8, 0.3, -0.2, -5.0, 0.25, -1.6, 2.5])
    got = round_trip(x, "fp4", 12)
    # nearest of 0, .5, 1, 1.5, 2, 3, 4, 6 (a tie, 5.0 and 0.25 and 2.5, goes to the smaller)
    assert got.tolist() == [6.0, 6.0, 3.0, 2.0, 1.5, 1.0, 0.5, 0.0, -4.0, 0.0, -1.5, 2.0]
    assert set(FP4_GRID.tolist()) == {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0}


def test_fp4_scales_each_block_by_its_largest_magnitude_over_6() -> None:
    x = torch.tensor([3.0, 1.0, 0.2, -0.6, 12.0, 7.0, -4.0, 0.0])  # blocks of 4: scales 0.5 and 2
    got = round_trip(x, "fp4", 4)
    # 3/0.5 = 6, 1/0.5 = 2, 0.4 -> 0.5, -1.2 -> -1 ; 12/2 = 6, 3.5 -> 3 (tie), -2, 0
    assert got.tolist() == [3.0, 1.0, 0.25, -0.5, 12.0, 6.0, -4.0, 0.0]
    assert encode(x, "fp4", 4).numel() == 4 + 2 * 4 == encoded_bytes(8, "fp4", 4)  # 2 codes a byte, 2 scales


def test_int8_rounds_to_nearest_on_the_absmax_grid() -> None:
    x = torch.tensor([2.0, 0.7, -0.3, 0.01])
    s = 2.0 / 127
    got = round_trip(x, "int8", 4)
    # 0.7 / s = 44.45 -> 44, -0.3 / s = -19.05 -> -19, 0.01 / s = 0.635 -> 1
    assert got.tolist() == pytest.approx([2.0, 44 * s, -19 * s, 1 * s], rel=1e-6)
    assert encode(x, "int8", 4).numel() == 4 + 4


def test_a_zero_block_stays_zero_and_an_odd_count_decodes() -> None:
    x = torch.tensor([0.0, 0.0, 0.0, 1.0, -2.0])
    for wire in ("int8", "fp4", "fp8_e4m3", "fp8_e5m2"):
        buf = encode(x, wire, 3)
        assert buf.numel() == encoded_bytes(5, wire, 3)
        got = decode(buf, 5, wire, 3)
        assert got[:3].tolist() == [0.0, 0.0, 0.0]
        assert got[3:].tolist() == pytest.approx([1.0, -2.0], rel=0.25)


def test_fp8_keeps_a_block_largest_value_exactly() -> None:
    x = torch.tensor([1e-3, 3e-4, -7e-4, 2e-5])  # far below e4m3's smallest normal without the scale
    got = round_trip(x, "fp8_e4m3", 4)
    assert got[0] == pytest.approx(1e-3, rel=1e-6)
    assert got.tolist() == pytest.approx(x.tolist(), rel=0.07)  # 3 mantissa bits: within 1/16


def test_a_bf16_ring_rounds_every_step() -> None:
    # bf16 holds 8 significant bits: between 256 and 512 its values are 2 apart, a tie going to even
    one, big = torch.tensor([1.0]), torch.tensor([256.0])
    members = [one, big, one]
    # chunk 0 starts at member 1: (256 + 1) -> 256, then + 1 -> 256; one rounding of 258 would keep 258
    assert ring_sum(members, 0, torch.bfloat16).item() == 256.0
    # chunk 1 starts at member 2: (1 + 1) = 2, then + 256 = 258, exact
    assert ring_sum(members, 1, torch.bfloat16).item() == 258.0
    assert reduced_chunk(members, 0, "fp32", 32, True).item() == 258.0


def test_a_scaled_reduction_sums_decoded_values_in_fp32_then_encodes_the_sum() -> None:
    a, b = torch.tensor([2.0, 0.7, -0.3, 0.01]), torch.tensor([-1.0, 0.7, 0.3, 0.02])
    total = round_trip(a, "int8", 4) + round_trip(b, "int8", 4)
    assert torch.equal(codec_sum([round_trip(a, "int8", 4), round_trip(b, "int8", 4)]), total)
    assert torch.equal(reduced_chunk([a, b], 0, "int8", 4, gather=False), total)
    assert torch.equal(reduced_chunk([a, b], 0, "int8", 4, gather=True), round_trip(total, "int8", 4))
