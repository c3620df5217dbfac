"""`conveyor dashboard`: serve the web dashboard (needs `conveyor[web]`)."""

from __future__ import annotations

import argparse
import logging
import os

from conveyor.app import Conveyor
from conveyor.backends import redact_url
from conveyor.cli.exits import USAGE, CliError
from conveyor.cli.loading import APP_PATH_HELP, load_app, reachable
from conveyor.cli.logs import FORMATS, LEVELS
from conveyor.cli.parsing import Commands, positive_float, positive_int

log = logging.getLogger("conveyor.cli")
BASIC_ENV = "CONVEYOR_DASHBOARD_BASIC_AUTH"
TOKEN_ENV = "CONVEYOR_DASHBOARD_TOKEN"


def register(commands: Commands) -> None:
    dashboard = commands.add_parser(
        "dashboard",
        help="serve the web dashboard",
        description="Serve the web dashboard: queues, jobs, dead letters, workers, charts and "
        "/metrics. It listens on 127.0.0.1 unless --host says otherwise, and "
        "refuses to listen elsewhere without --basic-auth or --token (prefer "
        f"${BASIC_ENV} / ${TOKEN_ENV}: flags show in `ps`).",
    )
    dashboard.add_argument(
        "app", metavar="MODULE:ATTR", nargs="?", help=APP_PATH_HELP + "; or pass --url"
    )
    dashboard.add_argument(
        "--url", metavar="URL", help="backend URL instead of an app (default: $CONVEYOR_URL)"
    )
    dashboard.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    dashboard.add_argument(
        "--port", "-p", type=positive_int, default=8080, help="port (default 8080)"
    )
    dashboard.add_argument(
        "--read-only", action="store_true", help="show everything, allow no action"
    )
    dashboard.add_argument(
        "--basic-auth",
        metavar="USER:PASSWORD",
        default=os.environ.get(BASIC_ENV) or None,
        help=f"require HTTP basic auth (default ${BASIC_ENV})",
    )
    dashboard.add_argument(
        "--token",
        metavar="TOKEN",
        default=os.environ.get(TOKEN_ENV) or None,
        help=f"require 'Authorization: Bearer TOKEN' (default ${TOKEN_ENV})",
    )
    dashboard.add_argument(
        "--root-path",
        default="",
        metavar="PREFIX",
        help="the path prefix a reverse proxy serves it under, e.g. /jobs",
    )
    dashboard.add_argument(
        "--poll",
        type=positive_float,
        default=5.0,
        metavar="SECONDS",
        help="live refresh interval of the overview (default 5)",
    )
    dashboard.add_argument(
        "--metrics-top-keys",
        type=positive_int,
        default=20,
        metavar="N",
        help="/metrics: a series for each of the N concurrency keys with "
        "the most running (and held) jobs, one for the rest (default 20)",
    )
    dashboard.add_argument("--log-level", choices=LEVELS, default="info")
    dashboard.add_argument("--log-format", choices=FORMATS, default="text")
    dashboard.set_defaults(runner=dashboard_command)


def dashboard_command(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from conveyor.web import InsecureBind, check_bind, create_dashboard
        from conveyor.web.security import AuthSettings
    except ImportError as exc:
        raise CliError(
            f"the dashboard needs its extra: pip install 'conveyor[web]' ({exc})", USAGE
        ) from None
    from conveyor.cli.logs import configure_logging

    configure_logging(args.log_level, args.log_format)
    app = _target(args)
    try:
        auth = AuthSettings.from_strings(args.basic_auth, args.token)
        check_bind(args.host, auth)
    except (ValueError, InsecureBind) as exc:
        raise CliError(str(exc), USAGE) from None
    asgi = create_dashboard(
        app,
        read_only=args.read_only,
        basic_auth=args.basic_auth,
        token=args.token,
        poll_seconds=args.poll,
        metrics_top_keys=args.metrics_top_keys,
    )
    log.info(
        "dashboard for %s on http://%s:%d%s/%s",
        redact_url(app.url),
        args.host,
        args.port,
        args.root_path,
        " (read-only)" if args.read_only else "",
    )
    uvicorn.run(
        asgi,
        host=args.host,
        port=args.port,
        root_path=args.root_path,
        log_level=args.log_level,
        access_log=False,
        proxy_headers=False,
        log_config=None,
    )  # uvicorn logs through our handler, in our format
    return 0


def _target(args: argparse.Namespace) -> Conveyor:
    if args.app and args.url:
        raise CliError("pass an app or --url, not both")
    if args.app:
        return load_app(args.app)
    url = args.url or os.environ.get("CONVEYOR_URL")
    if not url:
        raise CliError("no backend given: pass MODULE:ATTR, --url URL, or set $CONVEYOR_URL")
    return reachable(Conveyor(url))
