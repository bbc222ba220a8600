"""DataFrames as Markdown tables, for the tables the docs quote and the tests compare with them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd


def markdown_table(table: pd.DataFrame, cell: Callable[[Any], str] = str) -> str:
    """`table`'s columns as the header and each row through `cell`, one Markdown line per row."""
    lines = ["| " + " | ".join(str(c) for c in table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines)
