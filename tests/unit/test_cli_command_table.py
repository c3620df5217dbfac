"""The command line imports only the module of the command it runs: its table of
commands must name every command, each with the module that registers it."""

from __future__ import annotations

import argparse

from conveyor.cli.main import COMMANDS, build_parser


def _commands(parser: argparse.ArgumentParser) -> set[str]:
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(subparsers.choices)


def test_the_table_names_every_command() -> None:
    assert _commands(build_parser([])) == set(COMMANDS)


def test_each_command_alone_brings_its_own_module_only() -> None:
    for command, module in COMMANDS.items():
        alone = _commands(build_parser([command, "--help"]))
        assert alone == {name for name, owner in COMMANDS.items() if owner == module}, command
