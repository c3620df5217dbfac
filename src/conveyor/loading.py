"""Finding a Conveyor app by its `module:attribute` path: for the command line and
for worker pool children, which import the app afresh (spawn)."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from .app import Conveyor
from .errors import ConfigurationError


def load_app(path: str) -> Conveyor:
    """Import `module:attribute` (dots in the attribute walk into objects), with the
    current directory importable first, as uvicorn and gunicorn do.

    >>> app = load_app("myapp.tasks:app")
    """
    module_name, sep, attr_path = path.partition(":")
    if not sep or not module_name or not attr_path:
        raise ConfigurationError(
            f"app path {path!r} must be module:attribute, e.g. myapp.tasks:app")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    module = _import(module_name)
    target: Any = module
    for attr in attr_path.split("."):
        try:
            target = getattr(target, attr)
        except AttributeError:
            raise ConfigurationError(f"module {module_name!r} has no attribute {attr_path!r}"
                                     f"{_apps_in(module)}") from None
    if not isinstance(target, Conveyor):
        raise ConfigurationError(f"{path} is a {type(target).__name__}, not a Conveyor app"
                                 f"{_apps_in(module)}")
    return target


def _import(module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise ConfigurationError(
                f"cannot import app module {module_name!r}: no module named {missing!r} "
                "(searched the current directory and sys.path)") from None
        # The app module exists; something it imports does not.
        raise ConfigurationError(f"importing app module {module_name!r} failed: {exc}") from None
    except ImportError as exc:
        raise ConfigurationError(f"importing app module {module_name!r} failed: {exc}") from None
    except SyntaxError as exc:
        raise ConfigurationError(f"importing app module {module_name!r} failed: {exc.msg} "
                                 f"({exc.filename}, line {exc.lineno})") from None


def _apps_in(module: Any) -> str:
    names = sorted(n for n, v in vars(module).items() if isinstance(v, Conveyor))
    return f"; Conveyor apps in it: {', '.join(names)}" if names else ""
