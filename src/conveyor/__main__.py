"""`python -m conveyor ...` is the `conveyor` command."""

from .cli.main import main

raise SystemExit(main())
