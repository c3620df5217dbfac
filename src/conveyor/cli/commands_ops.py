"""`conveyor workers`, `conveyor queues` and `conveyor throughput`: what the dashboard
shows, in a terminal."""

from __future__ import annotations

import argparse
import json

from conveyor.app import Conveyor
from conveyor.cli import render
from conveyor.cli.exits import OK
from conveyor.cli.parsing import Commands, Parser, positive_int
from conveyor.ops.queue_overview import queue_overviews


def register(commands: Commands, target: Parser) -> None:
    workers = commands.add_parser(
        "workers", parents=[target], help="live workers: host, pid, queues, busy slots, heartbeat"
    )
    workers.add_argument("--json", action="store_true", help="one JSON object per line")
    workers.set_defaults(handler=workers_command)

    queues = commands.add_parser(
        "queues",
        parents=[target],
        help="per queue: the weights live workers claim it with, the limits the app declares "
        "(rate limit, max_waiting, aging), waiting, throttled and held-by-key jobs",
        description="One line per queue: how the live workers claim it (a weight, e.g. "
        "'6 (2 workers)', or its place in a strict order), the limits the loaded "
        "app declares for it, and its waiting jobs, of which THROTTLED wait for a "
        "rate limit's tokens and HELD BY KEY for a slot of their concurrency key. "
        "Give the app (module:app) to see its limits.",
    )
    queues.add_argument("--json", action="store_true", help="one JSON object per line")
    queues.set_defaults(handler=queues_command)

    throughput = commands.add_parser(
        "throughput",
        parents=[target],
        help="jobs finished per minute by queue, with wait and run latency (p50, p95)",
    )
    throughput.add_argument(
        "--minutes",
        "-m",
        type=positive_int,
        default=10,
        metavar="N",
        help="the last N minutes, the current one included (default 10)",
    )
    throughput.add_argument("--queue", "-q", help="only this queue")
    throughput.set_defaults(handler=throughput_command)


async def workers_command(app: Conveyor, args: argparse.Namespace) -> int:
    workers = await app.admin.workers()
    if args.json:
        for w in workers:
            print(
                json.dumps(
                    {
                        "id": w.id,
                        "host": w.host,
                        "pid": w.pid,
                        "queues": list(w.queues),
                        "concurrency": w.concurrency,
                        "in_flight": w.in_flight,
                        "started_at": w.started_at,
                        "last_heartbeat": w.last_heartbeat,
                        "version": w.version,
                        "stopping": w.stopping,
                    }
                )
            )
        return OK
    if not workers:
        print("no live worker")
        return OK
    now = app.clock()
    print(
        render.table(
            ["WORKER", "HOST", "PID", "QUEUES", "BUSY", "STARTED", "HEARTBEAT", "VERSION", "STATE"],
            [
                [
                    w.id,
                    w.host,
                    w.pid,
                    ",".join(w.queues),
                    f"{w.in_flight}/{w.concurrency}",
                    render.relative(w.started_at, now),
                    render.relative(w.last_heartbeat, now),
                    w.version,
                    "draining" if w.stopping else "running",
                ]
                for w in workers
            ],
        )
    )
    return OK


async def queues_command(app: Conveyor, args: argparse.Namespace) -> int:
    found = await queue_overviews(app)
    if args.json:
        for queue in found:
            print(json.dumps(queue.as_json(), ensure_ascii=False))
        return OK
    if not found:
        print("no queues yet")
        return OK
    print(
        render.table(
            [
                "QUEUE",
                "CLAIMED BY",
                "PAUSED",
                "WAITING",
                "THROTTLED",
                "HELD BY KEY",
                "RUNNING",
                "LIMITS",
            ],
            [
                [
                    q.name,
                    ", ".join(map(str, q.claimed_by)) or "no live worker",
                    "yes" if q.stats.paused else "no",
                    q.waiting,
                    q.stats.throttled,
                    q.stats.held_by_key,
                    q.stats.in_flight,
                    "; ".join(q.limits) or render.NONE,
                ]
                for q in found
            ],
        )
    )
    return OK


async def throughput_command(app: Conveyor, args: argparse.Namespace) -> int:
    minutes = await app.admin.throughput(args.minutes)
    rows: list[list[object]] = []
    for minute in minutes:
        t = minute.total(args.queue)
        rows.append(
            [
                render.timestamp(minute.start)[11:16],
                t.counts["completed"],
                t.counts["failed"],
                t.counts["dead"],
                _q(t.wait.quantile(0.5)),
                _q(t.wait.quantile(0.95)),
                _q(t.run.quantile(0.5)),
                _q(t.run.quantile(0.95)),
            ]
        )
    print(
        render.table(
            ["MINUTE", "DONE", "FAILED", "DEAD", "WAIT P50", "WAIT P95", "RUN P50", "RUN P95"], rows
        )
    )
    return OK


def _q(seconds: float | None) -> str:
    """Histogram quantiles are bucket bounds: "<= 250ms"."""
    if seconds is None:
        return "-"
    if seconds == float("inf"):
        return "> 30m"
    return "<= " + render.duration(seconds)
