"""`python -m real.emulate up|down|status ...` (the same as `syncsim emulate ...`)."""

import sys

from real.emulate.cli import main

sys.exit(main())
