"""What a run produced and what is made of it: the `Result` and its tables (built from the engine's
rows), the trace, the figures, the terminal summary. Imports the engine and the layers below it.

`from sim.results import Result` is the public way in."""

from sim.results.result import Result

__all__ = ["Result"]
