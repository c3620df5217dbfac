"""The `conveyor` command run from a framework's own CLI (`flask conveyor ...`,
`manage.py conveyor ...`): the same commands, with the framework's app filled in."""

from __future__ import annotations

import multiprocessing  # noqa: F401 - see import_path_of
import sys
from collections.abc import Sequence

from conveyor.app import Conveyor
from conveyor.model.errors import ConfigurationError

# Commands whose first positional argument is the app; the others take --app.
_APP_FIRST = frozenset({"worker", "scheduler", "dashboard"})
_NO_APP = frozenset({"demo"})


def import_path_of(app: Conveyor) -> str:
    """`module:attribute` under which `app` can be imported: what worker pool children
    and `--reload` use to load it again in a new process.

    An app defined in a script run directly is found as `__mp_main__:attr`:
    multiprocessing (imported above, so this does not depend on what the command line
    happened to import first) names the main module so in this process, and a pool
    child has it under that name too (a spawned one runs the script again as such)."""
    for name in sorted(sys.modules):
        module = sys.modules[name]
        if name == "__main__" or module is None:
            continue
        for attr, value in sorted(vars(module).items()):
            if value is app and not attr.startswith("_"):
                return f"{name}:{attr}"
    raise ConfigurationError(
        f"{app!r} is not a module attribute, so a worker process cannot import it: "
        "define it at module level, or pass its import path (import_path='pkg.mod:jobs')"
    )


def command_line(app_path: str, args: Sequence[str]) -> list[str]:
    """`args` for the `conveyor` command, with the app given the way `args[0]` takes it."""
    args = list(args)
    if not args or args[0].startswith("-") or args[0] in _NO_APP:
        return args
    if "--app" in args or "--url" in args or any(a.startswith(("--app=", "--url=")) for a in args):
        return args
    if args[0] in _APP_FIRST:
        return [args[0], app_path, *args[1:]]
    return [*args, "--app", app_path]
