import sys
from pathlib import Path

# the tests import their helpers as a plain module
sys.path.insert(0, str(Path(__file__).parent))

from policies.registry import add_search_folder  # noqa: E402

add_search_folder(Path(__file__).parent)  # configs name test plug-ins as custom_policies:Class


import pytest  # noqa: E402


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list:
    """The figures the plotting modules would save, kept open for the test to inspect (no files)."""
    import sim.experiments.sweep_plot
    import sim.results.plots

    figures: list = []

    def keep(fig, path):  # type: ignore[no-untyped-def]
        figures.append(fig)

    monkeypatch.setattr(sim.results.plots, "save_figure", keep)
    monkeypatch.setattr(sim.experiments.sweep_plot, "save_figure", keep)
    return figures
