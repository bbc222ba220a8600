"""`python -m sim.cli ARGS`: the `syncsim` command without its console script."""

from sim.cli.main import console

console()
