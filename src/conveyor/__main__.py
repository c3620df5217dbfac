"""`python -m conveyor ...` is the `conveyor` command."""

from conveyor.cli.main import main

raise SystemExit(main())
