"""`conveyor breakers [list|open NAME|close NAME]`: the circuit breakers' shared state
(docs/downstreams.md), and opening or closing one by hand through `app.admin`, which
records it in the audit trail."""

from __future__ import annotations

import argparse
import json

from conveyor.app import Conveyor
from conveyor.cli import render
from conveyor.cli.exits import OK, USAGE, CliError
from conveyor.cli.parsing import Commands, Parser, positive_int, verbs_of
from conveyor.observe.audit import Actor
from conveyor.rules.breakers import OPEN, BreakerState

HISTORY_SHOWN = 5


def register(commands: Commands, target: Parser) -> None:
    group = commands.add_parser(
        "breakers",
        parents=[target],
        help="circuit breakers: state, failures counted, recent transitions; open or close one",
        description="Alone or with `list`: each breaker's state (closed, open, half-open), the "
        "failures counted in its window, when it opened and its recent transitions. "
        "`open NAME` holds a breaker open until `close NAME`; workers follow within "
        "their one-second refresh.",
    )
    group.set_defaults(handler=list_command, history=HISTORY_SHOWN, json=False)
    verbs = verbs_of(group)
    listing = verbs.add_parser("list", parents=[target], help="every breaker's state")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    listing.add_argument(
        "--history",
        type=positive_int,
        default=HISTORY_SHOWN,
        metavar="N",
        help=f"show the last N transitions of each (default {HISTORY_SHOWN})",
    )
    listing.set_defaults(handler=list_command)
    for verb, text in (
        ("open", "open NAME by hand: its jobs wait until `close NAME`"),
        ("close", "close NAME by hand: its jobs are claimed again"),
    ):
        action = verbs.add_parser(verb, parents=[target], help=text)
        action.add_argument("name", metavar="NAME")
        action.set_defaults(handler=set_command)


async def list_command(app: Conveyor, args: argparse.Namespace) -> int:
    breakers = await app.admin.breakers()
    now = app.clock()
    if args.json:
        for name, state in breakers.items():
            print(
                json.dumps(
                    {
                        "name": name,
                        "state": state.state,
                        "failures": state.counted(app.breakers.get(name), now),
                        "opened_at": state.opened_at,
                        "held": state.held,
                        "history": [
                            {"at": t.at, "from": t.source, "to": t.target, "reason": t.reason}
                            for t in state.history
                        ],
                    }
                )
            )
        return OK
    if not breakers:
        print("no circuit breaker (declare one with app.breaker(...))")
        return OK
    print(
        render.table(
            ["BREAKER", "STATE", "FAILURES", "OPENED", "PROBE"],
            [
                [
                    name,
                    state.state + (" (by hand)" if state.held else ""),
                    state.counted(app.breakers.get(name), now),
                    render.relative(state.opened_at, now),
                    probe_due(app, name, state, now),
                ]
                for name, state in breakers.items()
            ],
        )
    )
    for name, state in breakers.items():
        if state.history:
            print(f"\n{name}: recent transitions")
            for t in state.history[-args.history :]:
                print(f"  {render.timestamp(t.at)}  {t.source} -> {t.target}  {t.reason}")
    return OK


def probe_due(app: Conveyor, name: str, state: BreakerState, now: float) -> str:
    breaker = app.breakers.get(name)
    if state.state != OPEN:
        return render.NONE
    if state.held:
        return "when closed by hand"
    due = None if breaker is None else state.probe_due_at(breaker)
    return render.relative(due, now) if due is not None else "after its cooldown"


async def set_command(app: Conveyor, args: argparse.Namespace) -> int:
    known = await app.admin.breakers()
    if args.name not in known:
        names = ", ".join(known) or "none"
        raise CliError(
            f"breaker {args.name!r} is not known (known: {names}); pass "
            "--app module:attr to name one the app declares",
            USAGE,
        )
    opening = args.verb == "open"
    state = await app.admin.set_breaker(args.name, open=opening, by=Actor.local("cli"))
    if opening:
        print(
            f"breaker {args.name} is open (held until `conveyor breakers close "
            f"{args.name}`): workers stop claiming its jobs within a second"
        )
    else:
        print(f"breaker {args.name} is {state.state}: workers claim its jobs again within a second")
    return OK
