"""`python -m circuitlab.cli` (and `torchrun -m circuitlab.cli train ...`)."""

import sys

from circuitlab.cli import main

sys.exit(main())
