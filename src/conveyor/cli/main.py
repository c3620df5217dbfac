"""`conveyor` command: parser, dispatch, and the one place errors become exit codes."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
from collections.abc import Sequence

from conveyor.app import Conveyor
from conveyor.cli.exits import FAILURE, INTERRUPTED, USAGE, CliError, scrub_passwords
from conveyor.cli.loading import add_target_arguments, app_from_arguments, open_backend
from conveyor.cli.parsing import Parser
from conveyor.model.errors import (
    ArgumentValidationError,
    ConfigurationError,
    ConveyorError,
    InvalidJob,
    JobNotFound,
    SerializationError,
    UnknownTask,
)
from conveyor.model.version import __version__

# Bad input the user can fix by changing the command line or the configuration.
_USAGE_ERRORS = (
    ConfigurationError,
    UnknownTask,
    ArgumentValidationError,
    SerializationError,
    InvalidJob,
)


# Each command and the module that registers it. The modules are imported only for
# the command given (`conveyor worker` needs neither rich nor the admin commands, and
# a worker's start is that much shorter); `conveyor`, `--help` or an unknown command
# registers them all, in this order.
COMMANDS = {
    "worker": "commands_worker",
    "scheduler": "commands_schedules",
    "cron": "commands_schedules",
    "enqueue": "commands_jobs",
    "jobs": "commands_jobs",
    "stats": "commands_admin",
    "dead": "commands_admin",
    "queue": "commands_admin",
    "migrate": "commands_admin",
    "audit": "commands_audit",
    "demo": "commands_demo",
    "workers": "commands_ops",
    "queues": "commands_ops",
    "throughput": "commands_ops",
    "breakers": "commands_breakers",
    "dashboard": "commands_dashboard",
}
_WITHOUT_TARGET = {"commands_worker", "commands_schedules", "commands_demo", "commands_dashboard"}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for `argv`: every command, or only the one `argv` names."""
    parser = Parser(
        prog="conveyor",
        description="Conveyor background jobs: run workers, enqueue, inspect and repair queues.",
        epilog="Commands other than worker and demo take --app module:attr or --url URL "
        "(default $CONVEYOR_URL).",
    )
    parser.add_argument("--version", action="version", version=f"conveyor {__version__}")
    parser.set_defaults(help_parser=parser)  # `conveyor` alone lists the commands
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    target = Parser(add_help=False)
    add_target_arguments(target)
    named = argv[0] if argv else None  # the top level has no option that takes a value
    modules = [COMMANDS[named]] if named in COMMANDS else dict.fromkeys(COMMANDS.values())
    for name in modules:
        module = importlib.import_module(f"{__package__}.{name}")
        if name in _WITHOUT_TARGET:
            module.register(commands)
        else:
            module.register(commands, target)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv).parse_args(argv)
    if not hasattr(args, "runner") and not hasattr(args, "handler"):
        args.help_parser.print_help()  # a command group without its verb, or nothing
        return USAGE
    try:
        if hasattr(args, "runner"):
            return int(args.runner(args))
        app = app_from_arguments(args, need_tasks=getattr(args, "need_tasks", False))
        return asyncio.run(_session(app, args))
    except CliError as exc:
        return _fail(str(exc), exc.exit_code)
    except _USAGE_ERRORS as exc:
        return _fail(str(exc), USAGE)
    except JobNotFound as exc:
        return _fail(str(exc), FAILURE)
    except ConveyorError as exc:
        return _fail(f"{type(exc).__name__}: {exc}", FAILURE)
    except KeyboardInterrupt:
        return _fail("interrupted", INTERRUPTED)
    except BrokenPipeError:
        # `conveyor jobs list | head`: the reader left; that is not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:
        if os.environ.get("CONVEYOR_DEBUG"):
            raise
        return _fail(
            f"unexpected {type(exc).__name__}: {exc} (set CONVEYOR_DEBUG=1 to see the traceback)",
            FAILURE,
        )


async def _session(app: Conveyor, args: argparse.Namespace) -> int:
    try:
        if getattr(args, "open_backend", True):
            await open_backend(app)
        return int(await args.handler(app, args))
    finally:
        await app.aclose()


def _fail(message: str, code: int) -> int:
    print(f"conveyor: error: {scrub_passwords(' '.join(message.split()))}", file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
