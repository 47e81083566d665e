"""`python -m ddq` runs the `ddq` command."""

from ddq.cli import main

raise SystemExit(main())
