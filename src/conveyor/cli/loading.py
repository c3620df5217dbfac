"""Finding the app a command works on: `--app module:attr`, `--url URL` or $CONVEYOR_URL."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

from ..app import Conveyor
from ..backends import redact_url
from ..errors import BackendUnavailable, ConveyorError
from .exits import FAILURE, CliError

APP_PATH_HELP = "the app to use, as module:attribute (e.g. myapp.tasks:app)"


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """--app or --url, for every command that works on a backend."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--app", metavar="MODULE:ATTR", help=APP_PATH_HELP)
    group.add_argument(
        "--url", metavar="URL",
        help="backend URL, e.g. sqlite:///jobs.db (default: $CONVEYOR_URL); enough for "
             "every command that does not need the task functions",
    )


def app_from_arguments(args: argparse.Namespace, *, need_tasks: bool = False) -> Conveyor:
    if args.app:
        return load_app(args.app)
    if need_tasks:
        raise CliError("this command needs the task functions: pass --app module:attribute")
    url = args.url or os.environ.get("CONVEYOR_URL")
    if not url:
        raise CliError("no backend given: pass --app module:attribute, --url URL, "
                       "or set $CONVEYOR_URL")
    return Conveyor(url)  # a URL alone: no tasks, which admin commands do not need


def load_app(path: str) -> Conveyor:
    """Import `module:attribute` (dots in the attribute walk into objects), with the
    current directory importable first, as uvicorn and gunicorn do."""
    module_name, sep, attr_path = path.partition(":")
    if not sep or not module_name or not attr_path:
        raise CliError(f"app path {path!r} must be module:attribute, e.g. myapp.tasks:app")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    module = _import(module_name)
    target: Any = module
    for attr in attr_path.split("."):
        try:
            target = getattr(target, attr)
        except AttributeError:
            raise CliError(f"module {module_name!r} has no attribute {attr_path!r}"
                           f"{_apps_in(module)}") from None
    if not isinstance(target, Conveyor):
        raise CliError(f"{path} is a {type(target).__name__}, not a Conveyor app"
                       f"{_apps_in(module)}")
    return target


def _import(module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise CliError(f"cannot import app module {module_name!r}: no module named "
                           f"{missing!r} (searched the current directory and sys.path)") from None
        # The app module exists; something it imports does not.
        raise CliError(f"importing app module {module_name!r} failed: {exc}") from None
    except ImportError as exc:
        raise CliError(f"importing app module {module_name!r} failed: {exc}") from None
    except SyntaxError as exc:
        raise CliError(f"importing app module {module_name!r} failed: {exc.msg} "
                       f"({exc.filename}, line {exc.lineno})") from None


def _apps_in(module: Any) -> str:
    names = sorted(n for n, v in vars(module).items() if isinstance(v, Conveyor))
    return f"; Conveyor apps in it: {', '.join(names)}" if names else ""


async def open_backend(app: Conveyor) -> None:
    """Connect (and migrate, if the app does) now, so a backend that cannot be opened
    is one clear line rather than a driver traceback from the middle of a command."""
    try:
        await app.backend()
    except BackendUnavailable as exc:
        raise CliError(f"cannot open the backend at {redact_url(app.url)}: {exc}", FAILURE) from exc
    except ConveyorError:
        raise
    except Exception as exc:  # noqa: BLE001 - drivers raise their own types; name them in one line
        raise CliError(f"cannot open the backend at {redact_url(app.url)}: "
                       f"{type(exc).__name__}: {exc}", FAILURE) from exc
