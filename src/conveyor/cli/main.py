"""`conveyor` command: parser, dispatch, and the one place errors become exit codes."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence

from ..app import Conveyor
from ..errors import (
    ArgumentValidationError,
    ConfigurationError,
    ConveyorError,
    InvalidJob,
    JobNotFound,
    SerializationError,
    UnknownTask,
)
from ..version import __version__
from . import (
    commands_admin,
    commands_audit,
    commands_breakers,
    commands_dashboard,
    commands_demo,
    commands_jobs,
    commands_ops,
    commands_schedules,
    commands_worker,
)
from .exits import FAILURE, INTERRUPTED, USAGE, CliError, scrub_passwords
from .loading import add_target_arguments, app_from_arguments, open_backend
from .parsing import Parser

# Bad input the user can fix by changing the command line or the configuration.
_USAGE_ERRORS = (ConfigurationError, UnknownTask, ArgumentValidationError, SerializationError,
                 InvalidJob)


def build_parser() -> argparse.ArgumentParser:
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
    commands_worker.register(commands)
    commands_schedules.register(commands)
    commands_jobs.register(commands, target)
    commands_admin.register(commands, target)
    commands_audit.register(commands, target)
    commands_demo.register(commands)
    commands_ops.register(commands, target)
    commands_breakers.register(commands, target)
    commands_dashboard.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
        return _fail(f"unexpected {type(exc).__name__}: {exc} "
                     "(set CONVEYOR_DEBUG=1 to see the traceback)", FAILURE)


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
