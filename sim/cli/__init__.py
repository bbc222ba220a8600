"""The `syncsim` command line: one module per group of commands, on top of everything (it may import
any layer, and `real`). `main` is the console script's entry point."""

from sim.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
