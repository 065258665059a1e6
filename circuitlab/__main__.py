"""`python -m circuitlab ...` runs the command line, like the `circuitlab` command."""

from circuitlab.cli import main

raise SystemExit(main())
