"""`conveyor enqueue` and `conveyor jobs list|show|cancel`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..admin import make_filter
from ..app import Conveyor
from ..errors import JobNotFound, UnknownTask
from ..job import JobState
from ..task import Task
from . import render
from .exits import OK, CliError
from .parsing import Commands, Parser, non_negative_float, positive_int, split_csv

STATES = [s.value for s in JobState]


def register(commands: Commands, target: Parser) -> None:
    enqueue = commands.add_parser(
        "enqueue", parents=[target], help="enqueue one job and print its id",
        description="Enqueue TASK with ARGs. Each ARG (and each --kw value) is JSON when it "
                    "parses as JSON, else a string: 42 is a number, '\"42\"' and abc are strings.",
    )
    enqueue.add_argument("task", metavar="TASK",
                         help="task name; a unique suffix such as send_email is enough")
    enqueue.add_argument("args", metavar="ARG", nargs="*", help="positional argument")
    enqueue.add_argument("--kw", metavar="KEY=JSON", action="append", default=[],
                         help="keyword argument (repeatable)")
    enqueue.add_argument("--queue", "-q", help="queue (default: the task's)")
    enqueue.add_argument("--delay", type=non_negative_float, metavar="SECONDS",
                         help="run no earlier than this many seconds from now")
    enqueue.add_argument("--priority", type=int, help="higher runs first (default: the task's)")
    enqueue.add_argument("--job-id", help="your own id; enqueueing an id that is still active "
                                          "returns the existing job instead of a second one")
    enqueue.set_defaults(handler=enqueue_command, need_tasks=True)

    jobs = commands.add_parser("jobs", help="list, show or cancel jobs")
    verbs = jobs.add_subparsers(dest="verb", metavar="VERB", required=True)
    listing = verbs.add_parser("list", parents=[target], help="list jobs, newest first")
    listing.add_argument("--state", "-s", action="append", default=[], type=split_csv,
                         metavar="STATE", help=f"one of {', '.join(STATES)} (repeatable, or a,b)")
    listing.add_argument("--queue", "-q", action="append", default=[], type=split_csv,
                         metavar="QUEUE", help="only these queues (repeatable, or a,b)")
    listing.add_argument("--task", "-t", action="append", default=[], type=split_csv,
                         metavar="TASK", help="only these tasks, full names (repeatable, or a,b)")
    listing.add_argument("--limit", "-n", type=positive_int, default=50, metavar="N",
                         help="show at most N (default 50)")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    listing.set_defaults(handler=list_command)

    show = verbs.add_parser("show", parents=[target],
                            help="one job in full: fields, errors with tracebacks, progress")
    show.add_argument("job_id", metavar="JOB_ID")
    show.add_argument("--json", action="store_true", help="print the job as JSON")
    show.set_defaults(handler=show_command)

    cancel = verbs.add_parser("cancel", parents=[target],
                              help="cancel a waiting job, or ask a running one to stop")
    cancel.add_argument("job_id", metavar="JOB_ID")
    cancel.set_defaults(handler=cancel_command)


# --- enqueue --------------------------------------------------------------------------
def cli_value(text: str) -> Any:
    """JSON when it parses, else the text itself: `42` -> 42, `hello` -> "hello"."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def keyword_arguments(pairs: list[str]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise CliError(f"--kw {pair!r}: expected KEY=VALUE with KEY a Python name")
        kwargs[key] = cli_value(value)
    return kwargs


def find_task(app: Conveyor, name: str) -> Task[Any, Any]:
    """The task named `name`, or the one task whose name ends with `.name`
    (tasks are named module.function by default; typing that in full is tedious)."""
    if name in app.tasks:
        return app.tasks[name]
    matches = [t for n, t in app.tasks.items() if n.endswith("." + name)]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise CliError(f"task name {name!r} is ambiguous: "
                       f"{', '.join(sorted(t.name for t in matches))}")
    raise UnknownTask(name, list(app.tasks))


async def enqueue_command(app: Conveyor, args: argparse.Namespace) -> int:
    task = find_task(app, args.task)
    options: dict[str, Any] = {
        key: value for key, value in (("queue", args.queue), ("delay", args.delay),
                                      ("priority", args.priority), ("job_id", args.job_id))
        if value is not None
    }
    positional = [cli_value(a) for a in args.args]
    handle = await task.options(**options).enqueue_async(*positional,
                                                         **keyword_arguments(args.kw))
    print(handle.id)
    return OK


# --- jobs ---------------------------------------------------------------------------------
def _states(groups: list[list[str]]) -> list[str]:
    states = [s for group in groups for s in group]
    unknown = [s for s in states if s not in STATES]
    if unknown:
        raise CliError(f"unknown state {unknown[0]!r}; states: {', '.join(STATES)}")
    return states


async def list_command(app: Conveyor, args: argparse.Namespace) -> int:
    where = make_filter(states=_states(args.state),
                        queues=[q for g in args.queue for q in g],
                        tasks=[t for g in args.task for t in g])
    jobs = await app.admin.list(where, limit=args.limit)
    if args.json:
        for job in jobs:
            print(json.dumps(render.job_json(job), ensure_ascii=False))
        return OK
    if not jobs:
        print("no jobs match")
        return OK
    print(render.table(*render.job_rows(jobs)))
    total = await app.admin.count(where)
    if total > len(jobs):
        print(f"({len(jobs)} of {total} shown; raise --limit or narrow with --state/--queue/--task)")
    return OK


async def show_command(app: Conveyor, args: argparse.Namespace) -> int:
    job = await app.admin.get(args.job_id)
    if job is None:
        raise JobNotFound(f"no job with id {args.job_id!r} (never enqueued, or pruned/purged)")
    if args.json:
        print(json.dumps(render.job_json(job), indent=2, ensure_ascii=False))
    else:
        print(render.job_detail(job))
    return OK


async def cancel_command(app: Conveyor, args: argparse.Namespace) -> int:
    before = await app.admin.get(args.job_id)
    if before is not None and before.is_finished:
        # cancel() returns the job as it is now, which cannot tell "just cancelled"
        # from "was already cancelled"; looking first can.
        print(f"job {before.id} is already {before.state.value}; nothing to cancel")
        return OK
    job = await app.admin.cancel(args.job_id)
    if job is None:
        raise JobNotFound(f"no job with id {args.job_id!r} (never enqueued, or pruned/purged)")
    if job.state is JobState.CANCELLED:
        print(f"job {job.id} cancelled")
    elif job.state is JobState.RUNNING:
        print(f"job {job.id} is running: asked it to stop (its handler sees cancel_requested)")
    else:
        print(f"job {job.id} is {job.state.value}; nothing to cancel")
    return OK
