"""sim/numerics/shards.py: FSDP's shard boundaries and the full model the owners of the shards hold."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from sim.numerics.shards import full_models, shards  # noqa: E402


def test_shards_are_chunks_of_the_padded_length() -> None:
    """FSDP pads a flat parameter of n elements to a multiple of p: chunks of ceil(n / p), the padding last."""
    assert shards(0, 10, 4) == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert shards(0, 9, 4) == [(0, 3), (3, 6), (6, 9), (9, 9)]  # 12 padded: the last rank holds padding only
    assert shards(10, 18, 2) == [(10, 14), (14, 18)]
    assert shards(5, 5, 3) == [(5, 5)] * 3


def test_each_element_of_the_full_model_comes_from_its_owners() -> None:
    nan = float("nan")
    # one bucket of 4 elements, two ranks: rank 0 owns [0, 2), rank 1 owns [2, 4); what they do not own is junk
    params = torch.tensor([[1.0, 2.0, nan, 9.0], [7.0, nan, 3.0, 4.0]])
    owned = [[((0, 4), (0, 2))], [((0, 4), (2, 4))]]
    assert torch.equal(full_models(params, owned), torch.tensor([[1.0, 2.0, 3.0, 4.0]] * 2))


def test_the_replicas_of_a_shard_hold_it_together() -> None:
    """Hybrid sharding: ranks 0 and 2 own the first element, 1 and 3 the second; the owners' mean."""
    nan = float("nan")
    params = torch.tensor([[1.0, nan], [nan, 3.0], [2.0, nan], [nan, 3.0]])
    first, second = [((0, 2), (0, 1))], [((0, 2), (1, 2))]
    full = full_models(params, [first, second, first, second])
    assert torch.equal(full, torch.tensor([[1.0, 3.0], [1.5, 3.0], [2.0, 3.0], [1.5, 3.0]]))


def test_without_shards_the_replicas_come_back_as_they_are() -> None:
    params = torch.randn(3, 5)
    assert full_models(params, [[], [], []]) is params
