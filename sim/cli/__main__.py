"""`python -m sim.cli ARGS`: the `syncsim` command without its console script."""

import sys

from sim.cli.main import main

sys.exit(main())
