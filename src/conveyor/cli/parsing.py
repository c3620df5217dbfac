"""argparse value types and a parser that reports usage errors in one line."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, NoReturn

from conveyor.cli.exits import USAGE


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse prints the whole usage block; one line with the way to more help reads better.
        self.exit(USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


# What `add_subparsers` returns; each commands module adds its parsers to it.
if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[Parser]
else:
    Commands = argparse._SubParsersAction


def verbs_of(group: argparse.ArgumentParser) -> Commands:
    """The verbs of a command group (`conveyor dead list|redrive|purge`). The group
    alone prints its help, listing them, instead of an error."""
    group.set_defaults(help_parser=group)
    verbs: Commands = group.add_subparsers(dest="verb", metavar="VERB", parser_class=Parser)
    return verbs


TASK_HELP = "only jobs of this task; a unique suffix such as send_email is enough"
ERROR_TYPE_HELP = "type name of the last error, any case, e.g. ConnectionError"


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def positive_float(text: str) -> float:
    value = _float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = _float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def split_csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
