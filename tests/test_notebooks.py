"""Notebooks execute top to bottom on a fresh kernel, from any directory (their cells assert what they
show), draw their figures, and each .ipynb is its paired jupytext `.py` (percent format, the readable
source)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

FOLDER = Path(__file__).parent.parent / "notebooks"
NOTEBOOKS = sorted(FOLDER.glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path, tmp_path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    # the kernel starts in an unrelated folder: a notebook must find what it needs through the package
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs if o.output_type == "error"]
    assert not errors, [f"{e['ename']}: {e['evalue']}" for e in errors]
    figures = [
        o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs if "image/png" in o.get("data", {})
    ]
    assert figures, f"{path.name} drew no figure"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_matches_its_percent_source(path: Path) -> None:
    jupytext = pytest.importorskip("jupytext")
    source = path.with_suffix(".py")
    assert source.is_file(), f"{source.name} is missing: pair it with `jupytext --set-formats ipynb,py:percent`"
    cells = lambda nb: [(c.cell_type, c.source.strip()) for c in nb.cells]  # noqa: E731
    assert cells(jupytext.read(source)) == cells(nbformat.read(path, as_version=4)), (
        f"{path.name} and {source.name} differ: run `jupytext --sync {source}`"
    )
