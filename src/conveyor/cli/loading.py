"""Finding the app a command works on: `--app module:attr`, `--url URL` or $CONVEYOR_URL."""

from __future__ import annotations

import argparse
import os

from conveyor.app import Conveyor
from conveyor.backends import IN_PROCESS_ONLY, in_process_only, redact_url
from conveyor.cli.exits import FAILURE, USAGE, CliError
from conveyor.model.errors import BackendUnavailable, ConveyorError
from conveyor.ops.loading import load_app as load_app_of

__all__ = [
    "APP_PATH_HELP",
    "add_target_arguments",
    "app_from_arguments",
    "load_app",
    "open_backend",
]

APP_PATH_HELP = "the app to use, as module:attribute (e.g. myapp.tasks:app)"


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """--app or --url, for every command that works on a backend."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--app", metavar="MODULE:ATTR", help=APP_PATH_HELP)
    group.add_argument(
        "--url",
        metavar="URL",
        help="backend URL, e.g. sqlite:///jobs.db (default: $CONVEYOR_URL); enough for "
        "every command that does not need the task functions",
    )


def load_app(path: str) -> Conveyor:
    """The app at `path`, refused when its backend lives in another process only."""
    return reachable(load_app_of(path))


def reachable(app: Conveyor) -> Conveyor:
    """Every command runs in a process of its own: a backend that lives inside one
    process (memory://) would be a new, empty store here."""
    if in_process_only(app.url):
        raise CliError(f"{redact_url(app.url)}: {IN_PROCESS_ONLY}", USAGE)
    return app


def app_from_arguments(args: argparse.Namespace, *, need_tasks: bool = False) -> Conveyor:
    if args.app:
        return load_app(args.app)
    if need_tasks:
        raise CliError("this command needs the task functions: pass --app module:attribute")
    url = args.url or os.environ.get("CONVEYOR_URL")
    if not url:
        raise CliError(
            "no backend given: pass --app module:attribute, --url URL, or set $CONVEYOR_URL"
        )
    return reachable(Conveyor(url))  # a URL alone: no tasks, which admin commands do not need


async def open_backend(app: Conveyor) -> None:
    """Connect (and migrate, if the app does) now, so a backend that cannot be opened
    is one clear line rather than a driver traceback from the middle of a command."""
    try:
        await app.backend()
    except BackendUnavailable as exc:
        raise CliError(f"cannot open the backend at {redact_url(app.url)}: {exc}", FAILURE) from exc
    except ConveyorError:
        raise
    except Exception as exc:
        raise CliError(
            f"cannot open the backend at {redact_url(app.url)}: {type(exc).__name__}: {exc}",
            FAILURE,
        ) from exc
