"""The Python examples in the docs run, in order, as a reader would paste them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).parent.parent / "docs"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


@pytest.mark.parametrize("page", ["policies.md"])
def test_python_blocks_run(page: str) -> None:
    blocks = BLOCK.findall((DOCS / page).read_text())
    assert blocks, f"{page} has no python examples"
    namespace: dict = {"__name__": f"docs_{page}"}
    for code in blocks:
        exec(compile(code, str(DOCS / page), "exec"), namespace)
