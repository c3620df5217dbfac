"""`conveyor audit`: the operator actions recorded in the backend, newest first."""

from __future__ import annotations

import argparse
import json
import re

from conveyor.app import Conveyor
from conveyor.cli import render
from conveyor.cli.exits import OK
from conveyor.cli.parsing import Commands, Parser, positive_int
from conveyor.observe.audit import RETENTION, AuditEntry

_SPAN = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def span(text: str) -> float:
    match = _SPAN.match(text.strip().lower())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a span such as 90m, 12h or 7d")
    return float(match.group(1)) * _UNIT[match.group(2)]


def register(commands: Commands, target: Parser) -> None:
    audit = commands.add_parser(
        "audit",
        parents=[target],
        help="operator actions (retry, redrive, cancel, delete, purge, pause, resume) with "
        "who, when, what and how many",
        description="Every operator action taken through the CLI, the dashboard or the API, "
        f"newest first; kept {RETENTION / 86400:.0f} days.",
    )
    audit.add_argument(
        "--since",
        type=span,
        default=7 * 86400.0,
        metavar="SPAN",
        help="how far back, e.g. 90m, 12h, 30d (default 7d)",
    )
    audit.add_argument(
        "--action",
        "-a",
        action="append",
        default=[],
        metavar="ACTION",
        help="only this action, e.g. purge or 'redrive run started' (repeatable)",
    )
    audit.add_argument("--job", metavar="JOB_ID", help="only the actions that touched this job")
    audit.add_argument(
        "--limit",
        "-n",
        type=positive_int,
        default=50,
        metavar="N",
        help="show at most N (default 50)",
    )
    audit.add_argument("--json", action="store_true", help="one JSON object per line")
    audit.set_defaults(handler=audit_command)


def _what(entry: AuditEntry) -> str:
    parts = [entry.target] if entry.target else []
    if entry.filter:
        parts.append(
            " ".join(
                f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}"
                for k, v in entry.filter.items()
            )
        )
    if entry.note:
        parts.append(entry.note)
    return "; ".join(parts)


async def audit_command(app: Conveyor, args: argparse.Namespace) -> int:
    if args.job:
        entries = list(reversed(await app.admin.actions_on(args.job)))[: args.limit]
    else:
        entries = await app.admin.audit(
            since=app.clock() - args.since, limit=args.limit, actions=args.action
        )
    if args.json:
        for e in entries:
            print(json.dumps({"key": e.key, **json.loads(e.to_json())}, ensure_ascii=False))
        return OK
    if not entries:
        print("no operator actions recorded" + ("" if args.job else " in that time"))
        return OK
    print(
        render.table(
            ["WHEN", "BY", "VIA", "ACTION", "JOBS", "WHAT"],
            [
                [
                    render.timestamp(e.at),
                    e.by + (f"@{e.host}" if e.host else ""),
                    e.via,
                    e.action,
                    e.count,
                    _what(e),
                ]
                for e in entries
            ],
        )
    )
    return OK
