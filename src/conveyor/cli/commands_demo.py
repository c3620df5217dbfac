"""`conveyor demo`: a self-contained tour on a throwaway SQLite file."""

from __future__ import annotations

import argparse
from pathlib import Path

from conveyor.cli.logs import configure_logging
from conveyor.cli.parsing import Commands


def register(commands: Commands) -> None:
    demo = commands.add_parser(
        "demo",
        help="run example jobs end to end on a temporary SQLite file",
        description="Enqueue example jobs (successes, a transient failure that retries, a "
        "poison pill that goes dead, a delayed job), run a worker until they "
        "finish and print what happened. Exit 0 if everything went as expected.",
    )
    demo.add_argument(
        "--db", type=Path, metavar="PATH", help="SQLite file to use (default: a new temporary file)"
    )
    demo.set_defaults(runner=demo_command)


def demo_command(args: argparse.Namespace) -> int:
    from conveyor.cli import demo  # only this command needs it

    configure_logging("info")
    return demo.run(args.db)
