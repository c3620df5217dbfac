"""Exit codes and the one error type the command line turns into a one-line message."""

from __future__ import annotations

import re

OK = 0
FAILURE = 1  # the command ran and something is wrong: a job id that does not exist, a backend down
USAGE = 2  # bad input: arguments, app path, URL, task name (argparse uses 2 too)
# 3 is the worker's cold stop (conveyor.worker.ExitStatus.COLD)
DEAD_JOBS = 4  # `worker --burst` / `--max-jobs`: it ran to its end and a job ended dead
INTERRUPTED = 130

_PASSWORD_IN_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s/@:]*:)[^\s/@]+@")


class CliError(Exception):
    """Stops the command with one line on stderr and `exit_code`."""

    def __init__(self, message: str, exit_code: int = USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def scrub_passwords(text: str) -> str:
    """Hide any `scheme://user:password@` password in a message, whoever wrote it:
    errors raised by backends or by a user's app may quote a URL whole."""
    return _PASSWORD_IN_URL.sub(r"\1***@", text)
