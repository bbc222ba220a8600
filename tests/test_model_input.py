"""`syncsim profile module:factory --input SPEC`: the target and input specifications, checked before
torch is imported, and the seeded batch an input specification builds."""

from __future__ import annotations

import argparse

import pytest

from real.model_input import MAX_SAMPLE_VALUES, InputSpec, parse_input, parse_target


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("float32:3x224x224", InputSpec("float32", (3, 224, 224))),
        ("int64:1024:vocab=32000", InputSpec("int64", (1024,), 32000)),
        ("bfloat16:13", InputSpec("bfloat16", (13,))),
        ("int32:4x8:vocab=2", InputSpec("int32", (4, 8), 2)),
    ],
)
def test_an_input_specification_reads_back_as_written(text: str, spec: InputSpec) -> None:
    assert parse_input(text) == spec
    assert str(spec) == text  # the profile's notes record it so; the refusal's hint repeats it


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("float32", "expected DTYPE:DIMS[:vocab=N]"),
        ("float32:3:vocab=2:x", "expected DTYPE:DIMS[:vocab=N]"),
        ("f32:3", "dtype 'f32' in 'f32:3'; allowed: float32, float16, bfloat16, float64, int64, int32"),
        ("float32:3x0", "dimensions '3x0' in 'float32:3x0': expected integers >= 1 joined by x"),
        ("float32:3xa", "dimensions '3xa'"),
        ("float32:", "dimensions ''"),
        (f"float32:{MAX_SAMPLE_VALUES}x2", f"at most {MAX_SAMPLE_VALUES:,} values a sample"),
        ("int64:8", "'int64:8': an integer input needs :vocab=N"),
        ("int64:8:vocab=0", "'vocab=0' in 'int64:8:vocab=0': expected vocab=N (an integer >= 1)"),
        ("int64:8:size=3", "'size=3' in"),
        ("float32:8:vocab=3", "for an integer dtype only"),
    ],
)
def test_a_bad_input_specification_is_an_argument_error_naming_it(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as error:
        parse_input(text)
    assert message in str(error.value)


def test_a_target_is_a_plain_file_name_and_a_callable() -> None:
    assert parse_target("my_model:build") == ("my_model", "build")
    assert parse_target("my_model:Models.small") == ("my_model", "Models.small")
    refused = {
        "my_model": "expected module:factory, where module.py is a file in the working directory",
        "my_model.py:build": "'my_model.py' is not a file's name (no dots, slashes or relative names) (write "
        "my_model:build)",
        "models/my_model:build": "'models/my_model' is not a file's name",
        "../my_model:build": "is not a file's name",
        "json:build": "json.py would shadow the standard library's 'json'; rename the file",
        "sys:build": "would shadow the standard library's 'sys'",
        "my_model:1build": "'1build' is not a callable's name",
        "my_model:": "'' is not a callable's name",
    }
    for text, message in refused.items():
        with pytest.raises(argparse.ArgumentTypeError) as error:
            parse_target(text)
        assert message in str(error.value), text


def test_a_batch_has_the_sample_shape_behind_the_batch_and_ids_below_the_vocabulary() -> None:
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    ids = InputSpec("int64", (5, 7), 3).batch(4, g)
    assert ids.shape == (4, 5, 7) and ids.dtype == torch.int64
    assert int(ids.min()) >= 0 and int(ids.max()) <= 2 and len(ids.unique()) == 3  # 140 draws: every id shows
    images = InputSpec("bfloat16", (3, 2, 2)).batch(2, g)
    assert images.shape == (2, 3, 2, 2) and images.dtype == torch.bfloat16
    again = InputSpec("int64", (5, 7), 3).batch(4, torch.Generator().manual_seed(0))
    assert torch.equal(ids, again)  # seeded: the same batch from the same seed
