"""argparse value types and a parser that reports usage errors in one line."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, NoReturn

from .exits import USAGE


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse prints the whole usage block; one line with the way to more help reads better.
        self.exit(USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


# What `add_subparsers` returns; each commands module adds its parsers to it.
if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[Parser]
else:
    Commands = argparse._SubParsersAction


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

