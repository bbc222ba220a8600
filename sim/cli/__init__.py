"""The `syncsim` command line: one module per group of commands, on top of everything (it may import
any layer, and `real`). `console` is the console script's entry point: `main` (which tests call), then exit."""

from sim.cli.main import build_parser, console, main

__all__ = ["build_parser", "console", "main"]
