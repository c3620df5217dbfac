"""`conveyor enqueue` and `conveyor jobs list|show|cancel|retry|delete`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from conveyor.admin.api import make_filter
from conveyor.app import Conveyor
from conveyor.cli import render
from conveyor.cli.exits import OK, CliError
from conveyor.cli.parsing import (
    ERROR_TYPE_HELP,
    TASK_HELP,
    Commands,
    Parser,
    non_negative_float,
    positive_int,
    split_csv,
    verbs_of,
)
from conveyor.model.errors import JobNotFound, UnknownTask
from conveyor.model.job import TERMINAL_STATES, Job, JobState
from conveyor.model.names import AmbiguousTaskName, match_task_name
from conveyor.observe.audit import Actor
from conveyor.observe.timeline import timeline
from conveyor.task import Task

STATES = [s.value for s in JobState]


def register(commands: Commands, target: Parser) -> None:
    enqueue = commands.add_parser(
        "enqueue",
        parents=[target],
        help="enqueue one job and print its id",
        description="Enqueue TASK with ARGs. Each ARG (and each --kw value) is JSON when it "
        "parses as JSON, else a string: 42 is a number, '\"42\"' and abc are strings.",
    )
    enqueue.add_argument(
        "task", metavar="TASK", help="task name; a unique suffix such as send_email is enough"
    )
    enqueue.add_argument("args", metavar="ARG", nargs="*", help="positional argument")
    enqueue.add_argument(
        "--kw",
        metavar="KEY=JSON",
        action="append",
        default=[],
        help="keyword argument (repeatable)",
    )
    enqueue.add_argument("--queue", "-q", help="queue (default: the task's)")
    enqueue.add_argument(
        "--delay",
        type=non_negative_float,
        metavar="SECONDS",
        help="run no earlier than this many seconds from now",
    )
    enqueue.add_argument("--priority", type=int, help="higher runs first (default: the task's)")
    enqueue.add_argument(
        "--job-id",
        help="your own id; enqueueing an id that is still active "
        "returns the existing job instead of a second one",
    )
    enqueue.set_defaults(handler=enqueue_command, need_tasks=True)

    jobs = commands.add_parser("jobs", help="list, show, cancel, retry or delete jobs")
    verbs = verbs_of(jobs)
    listing = verbs.add_parser("list", parents=[target], help="list jobs, newest first")
    listing.add_argument(
        "--state",
        "-s",
        action="append",
        default=[],
        type=split_csv,
        metavar="STATE",
        help=f"one of {', '.join(STATES)} (repeatable, or a,b)",
    )
    listing.add_argument(
        "--queue",
        "-q",
        action="append",
        default=[],
        type=split_csv,
        metavar="QUEUE",
        help="only these queues (repeatable, or a,b)",
    )
    listing.add_argument(
        "--task",
        "-t",
        action="append",
        default=[],
        type=split_csv,
        metavar="TASK",
        help=TASK_HELP + " (repeatable, or a,b)",
    )
    listing.add_argument("--error-type", "-e", metavar="TYPE", help=ERROR_TYPE_HELP)
    listing.add_argument(
        "--args-contains",
        "-a",
        metavar="TEXT",
        help="text in the arguments' JSON, e.g. alice@example.org or "
        "'\"user_id\":42' (case-sensitive)",
    )
    listing.add_argument(
        "--after",
        metavar="JOB_ID",
        help="the page after this job (the last one of the previous page)",
    )
    listing.add_argument(
        "--limit",
        "-n",
        type=positive_int,
        default=50,
        metavar="N",
        help="show at most N (default 50)",
    )
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    listing.set_defaults(handler=list_command)

    show = verbs.add_parser(
        "show",
        parents=[target],
        help="one job in full: fields, timeline (with operators' actions), "
        "errors with tracebacks, progress",
    )
    show.add_argument("job_id", metavar="JOB_ID")
    show.add_argument("--json", action="store_true", help="print the job as JSON")
    show.set_defaults(handler=show_command)

    cancel = verbs.add_parser(
        "cancel", parents=[target], help="cancel a waiting job, or ask a running one to stop"
    )
    cancel.add_argument("job_id", metavar="JOB_ID")
    cancel.set_defaults(handler=cancel_command)

    retry = verbs.add_parser(
        "retry",
        parents=[target],
        help="send dead or cancelled jobs back to their queue with fresh attempts "
        "(their errors stay); as the dashboard's Retry",
    )
    retry.add_argument("job_ids", metavar="JOB_ID", nargs="+")
    retry.set_defaults(handler=retry_command)

    delete = verbs.add_parser(
        "delete",
        parents=[target],
        help="delete finished jobs (completed, cancelled, dead) for good, by id or filter",
    )
    delete.add_argument("job_ids", metavar="JOB_ID", nargs="*", help="these jobs")
    delete.add_argument(
        "--state",
        "-s",
        action="append",
        default=[],
        type=split_csv,
        metavar="STATE",
        help="completed, cancelled or dead (repeatable, or a,b)",
    )
    delete.add_argument(
        "--queue",
        "-q",
        action="append",
        default=[],
        type=split_csv,
        metavar="QUEUE",
        help="only these queues (repeatable, or a,b)",
    )
    delete.add_argument(
        "--task",
        "-t",
        action="append",
        default=[],
        type=split_csv,
        metavar="TASK",
        help=TASK_HELP + " (repeatable, or a,b)",
    )
    delete.add_argument("--error-type", "-e", metavar="TYPE", help=ERROR_TYPE_HELP)
    delete.add_argument(
        "--batch",
        "--limit",
        "-n",
        dest="limit",
        type=positive_int,
        default=1000,
        metavar="N",
        help="at most this many jobs (default 1000)",
    )
    delete.add_argument("--dry-run", action="store_true", help="show what would be deleted")
    delete.add_argument(
        "--all", action="store_true", help="allow a delete with no filter (every finished job)"
    )
    delete.set_defaults(handler=delete_command)


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
    try:
        found = match_task_name(name, app.tasks)
    except AmbiguousTaskName as exc:
        raise CliError(str(exc)) from None
    if found is None:
        raise UnknownTask(name, list(app.tasks))
    return app.tasks[found]


async def enqueue_command(app: Conveyor, args: argparse.Namespace) -> int:
    task = find_task(app, args.task)
    options: dict[str, Any] = {
        key: value
        for key, value in (
            ("queue", args.queue),
            ("delay", args.delay),
            ("priority", args.priority),
            ("job_id", args.job_id),
        )
        if value is not None
    }
    positional = [cli_value(a) for a in args.args]
    handle = await task.options(**options).enqueue_async(*positional, **keyword_arguments(args.kw))
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
    where = make_filter(
        states=_states(args.state),
        queues=[q for g in args.queue for q in g],
        tasks=[t for g in args.task for t in g],
        error_type=args.error_type,
        args_contains=args.args_contains,
    )
    jobs = await app.admin.list(where, limit=args.limit, after=args.after)
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
        print(
            f"({len(jobs)} of {total} shown; raise --limit or narrow with --state/--queue/--task)"
        )
    return OK


async def show_command(app: Conveyor, args: argparse.Namespace) -> int:
    job = await app.admin.get(args.job_id)
    if job is None:
        raise JobNotFound(f"no job with id {args.job_id!r} (never enqueued, or pruned/purged)")
    family = await _family(app, job)
    held_back = await app.admin.held_back(job)
    if args.json:
        data = {**render.job_json(job), "held_back": held_back}
        for title, members in family:
            data[title] = [
                {"id": i, "task": j and j.task, "state": j and j.state.value} for i, j in members
            ]
        print(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        print(
            render.job_detail(
                job,
                timeline(job, await app.admin.actions_on(job.id)),
                family,
                held_back,
                app.rate_limits,
            )
        )
    return OK


async def _family(app: Conveyor, job: Job) -> list[tuple[str, list[tuple[str, Job | None]]]]:
    """A workflow member's parents and children (the jobs that were blocked on it), as
    the backend stored them, each with the job as it is now (docs/workflows.md)."""
    backend = await app.backend()
    ids = {
        "parents": await backend.parents_of(job.id),
        "children": await backend.dependants_of(job.id),
    }
    return [(title, [(i, await app.admin.get(i)) for i in found]) for title, found in ids.items()]


async def cancel_command(app: Conveyor, args: argparse.Namespace) -> int:
    before = await app.admin.get(args.job_id)
    if before is not None and before.is_finished:
        # cancel() returns the job as it is now, which cannot tell "just cancelled"
        # from "was already cancelled"; looking first can.
        print(f"job {before.id} is already {before.state.value}; nothing to cancel")
        return OK
    job = await app.admin.cancel(args.job_id, by=Actor.local("cli"))
    if job is None:
        raise JobNotFound(f"no job with id {args.job_id!r} (never enqueued, or pruned/purged)")
    if job.state is JobState.CANCELLED:
        print(f"job {job.id} cancelled")
    elif job.state is JobState.RUNNING:
        print(f"job {job.id} is running: asked it to stop (its handler sees cancel_requested)")
    else:
        print(f"job {job.id} is {job.state.value}; nothing to cancel")
    return OK


async def retry_command(app: Conveyor, args: argparse.Namespace) -> int:
    moved = {j.id for j in await app.admin.retry(args.job_ids, by=Actor.local("cli"))}
    for job_id in dict.fromkeys(args.job_ids):
        if job_id in moved:
            print(f"job {job_id} sent back to its queue")
            continue
        job = await app.admin.get(job_id)
        print(
            f"job {job_id}: "
            + (
                "not found"
                if job is None
                else f"{job.state.value}, not dead or cancelled: not retried"
            )
        )
    return OK if len(moved) == len(set(args.job_ids)) else 1


async def delete_command(app: Conveyor, args: argparse.Namespace) -> int:
    states = _states(args.state)
    if any(s not in TERMINAL_STATES for s in states):
        raise CliError("only finished jobs can be deleted: --state completed, cancelled or dead")
    queues, tasks = [q for g in args.queue for q in g], [t for g in args.task for t in g]
    if not (args.all or args.job_ids or states or queues or tasks or args.error_type):
        raise CliError(
            "refusing to delete every finished job: give JOB_IDs or narrow it "
            "with --state/--queue/--task/--error-type, or pass --all"
        )
    where = make_filter(
        states=states, queues=queues, tasks=tasks, error_type=args.error_type, ids=args.job_ids
    )
    ids = await app.admin.delete(
        where, limit=args.limit, dry_run=args.dry_run, by=Actor.local("cli")
    )
    if not ids:
        print("no finished jobs match; nothing to delete")
        return OK
    print(
        f"{'would delete' if args.dry_run else 'deleted'} {len(ids):,} job(s)"
        + (" (dry run, nothing deleted):" if args.dry_run else ":")
    )
    print("\n".join(ids))
    return OK
