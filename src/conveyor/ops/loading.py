"""Finding a Conveyor app by its `module:attribute` path: for the command line and
for worker pool children, which import the app afresh (spawn)."""

from __future__ import annotations

import importlib
import os
import sys
import sysconfig
import traceback
from typing import Any

from conveyor.app import Conveyor
from conveyor.model.errors import ConfigurationError, ConveyorError

_NOT_THE_USERS_CODE = (
    "<frozen ",
    os.path.dirname(__file__) + os.sep,
    *{sysconfig.get_paths()[name] + os.sep for name in ("stdlib", "purelib", "platlib")},
)


def load_app(path: str) -> Conveyor:
    """Import `module:attribute` (dots in the attribute walk into objects), with the
    current directory importable first, as uvicorn and gunicorn do.

    >>> app = load_app("myapp.tasks:app")
    """
    module_name, sep, attr_path = path.partition(":")
    if not sep or not module_name or not attr_path:
        raise ConfigurationError(
            f"app path {path!r} must be module:attribute, e.g. myapp.tasks:app"
        )
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    module = _import(module_name, path)
    target: Any = module
    for attr in attr_path.split("."):
        try:
            target = getattr(target, attr)
        except AttributeError:
            raise ConfigurationError(
                f"module {module_name!r} has no attribute {attr_path!r}{_apps_in(module)}"
            ) from None
    if not isinstance(target, Conveyor):
        raise ConfigurationError(
            f"{path} is a {type(target).__name__}, not a Conveyor app{_apps_in(module)}"
        )
    return target


def _import(module_name: str, path: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise ConfigurationError(
                f"cannot import app module {module_name!r}: no module named {missing!r} "
                "(searched the current directory and sys.path)"
            ) from None
        # The app module exists; something it imports does not.
        raise _import_failed(path, exc) from None
    except ConveyorError:
        raise  # the app's declarations refused by Conveyor itself, already in its words
    except Exception as exc:
        if os.environ.get("CONVEYOR_DEBUG"):
            raise
        raise _import_failed(path, exc) from None


def _import_failed(path: str, exc: Exception) -> ConfigurationError:
    """'error while importing the app ...: Type: message (file, line n)'; the command
    line exits 2: the app's code or configuration must change, as with a bad URL."""
    if isinstance(exc, SyntaxError):
        message, where = exc.msg, (exc.filename, exc.lineno)
    else:
        message = str(exc)
        frames = traceback.extract_tb(exc.__traceback__)
        # The failing statement of the user's code: the deepest frame outside the
        # import machinery, the standard library, installed packages and Conveyor
        # (a library's own line says less), else where it was raised.
        own = [f for f in frames if not f.filename.startswith(_NOT_THE_USERS_CODE)]
        chosen = own or frames
        where = (chosen[-1].filename, chosen[-1].lineno) if chosen else (None, None)
    located = f" ({where[0]}, line {where[1]})" if where[0] else ""
    return ConfigurationError(
        f"error while importing the app {path!r}: {type(exc).__name__}: {message}{located}"
    )


def _apps_in(module: Any) -> str:
    names = sorted(n for n, v in vars(module).items() if isinstance(v, Conveyor))
    return f"; Conveyor apps in it: {', '.join(names)}" if names else ""
