"""`conveyor scheduler APP` and `conveyor cron list APP`: periodic schedules.

The behaviour lives in conveyor.ops.schedule_commands; this module only parses.
"""

from __future__ import annotations

import argparse
import asyncio

from conveyor.app import Conveyor
from conveyor.cli.exits import USAGE, CliError
from conveyor.cli.loading import APP_PATH_HELP, load_app, open_backend
from conveyor.cli.logs import LEVELS, configure_logging
from conveyor.cli.parsing import Commands, positive_int, verbs_of
from conveyor.ops.schedule_commands import cron_list, run_scheduler
from conveyor.scheduling.scheduler import Scheduler


def register(commands: Commands) -> None:
    scheduler = commands.add_parser(
        "scheduler",
        help="enqueue the app's periodic jobs (workers do this too, by default)",
        description="Enqueue the app's periodic jobs until SIGTERM or SIGINT, without running "
        "any. Every worker also does this unless started with --no-scheduler; any "
        "number of schedulers and workers may run at once, and each tick is still "
        "enqueued once.",
    )
    scheduler.add_argument("app", metavar="MODULE:ATTR", help=APP_PATH_HELP)
    scheduler.add_argument("--log-level", choices=LEVELS, default="info")
    scheduler.set_defaults(runner=scheduler_command)

    cron = commands.add_parser("cron", help="periodic schedules: list")
    verbs = verbs_of(cron)
    listing = verbs.add_parser(
        "list", help="each schedule with its next fire times (UTC and its zone) and last run"
    )
    listing.add_argument("app", metavar="MODULE:ATTR", help=APP_PATH_HELP)
    listing.add_argument(
        "--next",
        "-n",
        dest="upcoming",
        type=positive_int,
        default=3,
        metavar="N",
        help="show the next N fire times (default 3)",
    )
    listing.add_argument("--json", action="store_true", help="print JSON instead of text")
    listing.set_defaults(runner=cron_list_command)


def scheduler_command(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    app = load_app(args.app)
    if not app.schedules:
        raise CliError(f"{args.app} declares no schedules (use @app.periodic)", USAGE)
    Scheduler(app)  # a bad schedule is a usage error now, before anything connects
    return asyncio.run(_serve(app))


async def _serve(app: Conveyor) -> int:
    await open_backend(app)
    return await run_scheduler(app)


def cron_list_command(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    print(asyncio.run(_list(app, args.upcoming, args.json)))
    return 0


async def _list(app: Conveyor, upcoming: int, as_json: bool) -> str:
    try:
        await open_backend(app)
        return await cron_list(app, upcoming=upcoming, as_json=as_json)
    finally:
        await app.aclose()
