"""`manage.py conveyor ...`: the `conveyor` command with the project's app filled in
(`manage.py conveyor worker -c 20`, `scheduler`, `dashboard`, `jobs list`, ...)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandError, CommandParser

from conveyor.contrib._commands import command_line

APP_PATH = "conveyor.contrib.django:app"


def run(args: list[str]) -> int:
    from conveyor.cli.main import main

    return main(command_line(APP_PATH, args))


class Command(BaseCommand):
    help = (
        "The conveyor command for this project: worker, scheduler, dashboard, jobs, "
        "dead, stats, ... (manage.py conveyor --help)"
    )

    def run_from_argv(self, argv: list[str]) -> NoReturn:
        # From the shell: every argument is conveyor's, and so is the exit code.
        sys.exit(run(argv[2:]))

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.add_argument("conveyor_args", nargs=argparse.REMAINDER)
        return parser

    def handle(self, *args: Any, **options: Any) -> None:
        # call_command("conveyor", "worker", "--burst"): a failure is a CommandError
        # carrying conveyor's exit code.
        code = run([*args, *options.get("conveyor_args", [])])
        if code:
            raise CommandError(f"conveyor exited with {code}", returncode=code)
