"""`conveyor stats`, `dead list|redrive|purge`, `queue pause|resume|purge`, `migrate`.

Actions go through `app.admin` as the OS user at this host (`Actor.local("cli")`),
which records each in the audit trail (`conveyor audit`)."""

from __future__ import annotations

import argparse

from conveyor.admin.api import make_filter
from conveyor.app import Conveyor
from conveyor.backends.params import JobFilter
from conveyor.cli import commands_redrive, render
from conveyor.cli.exits import OK, CliError
from conveyor.cli.loading import open_backend
from conveyor.cli.parsing import (
    ERROR_TYPE_HELP,
    TASK_HELP,
    Commands,
    Parser,
    positive_int,
    verbs_of,
)
from conveyor.model.job import Job, JobState
from conveyor.observe.audit import Actor


def register(commands: Commands, target: Parser) -> None:
    stats = commands.add_parser(
        "stats",
        parents=[target],
        help="per queue: jobs by state, in flight (running), oldest available, paused",
    )
    stats.set_defaults(handler=stats_command)

    dead = commands.add_parser("dead", help="the dead-letter queue: list, redrive, purge")
    verbs = verbs_of(dead)
    filters = Parser(add_help=False)
    filters.add_argument(
        "--queue", "-q", action="append", default=[], help="only jobs of this queue (repeatable)"
    )
    filters.add_argument(
        "--task", "-t", action="append", default=[], help=TASK_HELP + " (repeatable)"
    )
    filters.add_argument("--error-type", "-e", metavar="TYPE", help=ERROR_TYPE_HELP)

    listing = verbs.add_parser(
        "list", parents=[target, filters], help="dead jobs, newest first, with their last error"
    )
    listing.add_argument(
        "--limit",
        "-n",
        type=positive_int,
        default=50,
        metavar="N",
        help="show at most N (default 50)",
    )
    listing.set_defaults(handler=dead_list_command)

    redrive = verbs.add_parser(
        "redrive",
        parents=[target, filters],
        help="send dead (or cancelled) jobs back to work with fresh attempts, oldest "
        "failure first; with --rate, paced, stopping by itself if they fail again",
        description="Send dead jobs (or cancelled ones, with --state cancelled) back to their "
        "queue with fresh attempts, oldest failure first; their error history "
        "stays. With --rate the redrive is paced: small batches at that rate, "
        "with a progress bar, stopping by itself when more than --stop-if-failing "
        "of the redriven jobs fail again. Ctrl-C pauses it; --status, --pause, "
        "--resume and --cancel steer a run from anywhere (the dashboard too).",
    )
    redrive.add_argument("job_ids", metavar="JOB_ID", nargs="*", help="only these jobs")
    redrive.add_argument(
        "--state",
        "-s",
        choices=("dead", "cancelled"),
        default="dead",
        help="redrive dead jobs (default) or cancelled ones",
    )
    redrive.add_argument(
        "--batch",
        "--limit",
        "-n",
        dest="limit",
        type=positive_int,
        metavar="N",
        help="at most this many jobs (default 100; with --rate, every match)",
    )
    redrive.add_argument(
        "--dry-run", action="store_true", help="show what would move; move nothing"
    )
    commands_redrive.add_arguments(redrive)
    redrive.set_defaults(handler=dead_redrive_command)

    purge = verbs.add_parser(
        "purge", parents=[target, filters], help="delete dead jobs for good, oldest failure first"
    )
    purge.add_argument("job_ids", metavar="JOB_ID", nargs="*", help="only these jobs")
    purge.add_argument(
        "--batch",
        "--limit",
        "-n",
        dest="limit",
        type=positive_int,
        metavar="N",
        default=1000,
        help="at most this many jobs (default 1000)",
    )
    purge.add_argument("--dry-run", action="store_true", help="show what would be deleted")
    purge.add_argument(
        "--all", action="store_true", help="allow a purge with no filter (every dead job)"
    )
    purge.set_defaults(handler=dead_purge_command)

    queue = commands.add_parser("queue", help="pause, resume or purge a queue")
    queue_verbs = verbs_of(queue)
    for verb, text in (
        ("pause", "workers stop claiming from NAME (running jobs finish)"),
        ("resume", "workers claim from NAME again"),
    ):
        sub = queue_verbs.add_parser(verb, parents=[target], help=text)
        sub.add_argument("name", metavar="NAME")
        sub.set_defaults(handler=queue_command)
    purge_queue = queue_verbs.add_parser(
        "purge",
        parents=[target],
        help="cancel every waiting job of NAME (running jobs finish)",
        description="Cancel the waiting jobs (available, scheduled, retryable) of a queue. "
        "They are cancelled, not deleted: listed until pruned, and "
        "`conveyor dead redrive --state cancelled --queue NAME` brings them back; "
        "`conveyor jobs delete --state cancelled --queue NAME` deletes them.",
    )
    purge_queue.add_argument("name", metavar="NAME")
    purge_queue.add_argument(
        "--task", "-t", action="append", default=[], help=TASK_HELP + " (repeatable)"
    )
    purge_queue.add_argument(
        "--dry-run", action="store_true", help="count what would be cancelled; cancel nothing"
    )
    purge_queue.set_defaults(handler=queue_purge_command)

    migrate = commands.add_parser(
        "migrate", parents=[target], help="apply pending schema migrations and print them"
    )
    # Opening the app's own backend would migrate it first and leave nothing to report.
    migrate.set_defaults(handler=migrate_command, open_backend=False)


async def stats_command(app: Conveyor, args: argparse.Namespace) -> int:
    stats = await app.admin.stats()
    print(render.stats_table(stats) if stats else "no queues yet")
    return OK


def _dead_filter(args: argparse.Namespace) -> JobFilter:
    return make_filter(
        states=[getattr(args, "state", None) or JobState.DEAD],
        queues=args.queue,
        tasks=args.task,
        error_type=args.error_type,
        ids=getattr(args, "job_ids", ()),
    )


def _dead_table(jobs: list[Job]) -> str:
    rows: list[list[object]] = [
        [
            j.id,
            j.task,
            j.queue,
            j.attempt,
            render.relative(j.finished_at),
            render.failed_app_version(j),
            render.last_error(j),
        ]
        for j in jobs
    ]
    return render.table(
        ["ID", "TASK", "QUEUE", "ATTEMPTS", "DIED", "APP VERSION", "LAST ERROR"], rows
    )


async def dead_list_command(app: Conveyor, args: argparse.Namespace) -> int:
    where = _dead_filter(args)
    jobs = await app.admin.list(where, limit=args.limit)
    if not jobs:
        print("no dead jobs match")
        return OK
    print(_dead_table(jobs))
    total = await app.admin.count(where)
    if total > len(jobs):
        print(f"({len(jobs)} of {total} shown; raise --limit or narrow with filters)")
    return OK


async def dead_redrive_command(app: Conveyor, args: argparse.Namespace) -> int:
    if commands_redrive.steers_a_run(args):
        return await commands_redrive.steer(app, args)
    where = _dead_filter(args)
    if args.rate is not None and not args.dry_run:
        return await commands_redrive.paced(app, args, where)
    jobs = await app.admin.redrive(
        where, limit=args.limit or 100, dry_run=args.dry_run, by=Actor.local("cli")
    )
    if not jobs:
        print(f"no {args.state} jobs match; nothing to redrive")
        return OK
    if args.dry_run:
        print(f"would redrive {len(jobs)} job(s) (dry run, nothing moved):")
        print(_dead_table(jobs))
    else:
        print(f"redrove {len(jobs)} job(s) back to available:")
        print(
            render.table(
                ["ID", "TASK", "QUEUE", "STATE"],
                [[j.id, j.task, j.queue, j.state.value] for j in jobs],
            )
        )
    await _more_hint(app, where, len(jobs) if args.dry_run else 0, "redrive")
    return OK


async def dead_purge_command(app: Conveyor, args: argparse.Namespace) -> int:
    if not (args.all or args.queue or args.task or args.error_type or args.job_ids):
        raise CliError(
            "refusing to purge every dead job: narrow it with --queue/--task/"
            "--error-type/JOB_ID, or pass --all"
        )
    where = _dead_filter(args)
    ids = await app.admin.delete(
        where, limit=args.limit, dry_run=args.dry_run, by=Actor.local("cli")
    )
    if not ids:
        print("no dead jobs match; nothing to purge")
        return OK
    if args.dry_run:
        print(f"would delete {len(ids)} dead job(s) (dry run, nothing deleted):")
        chosen = await app.admin.list(make_filter(states=[JobState.DEAD], ids=ids), limit=len(ids))
        by_id = {j.id: j for j in chosen}
        print(_dead_table([by_id[i] for i in ids if i in by_id]))
    else:
        print(f"deleted {len(ids)} dead job(s):")
        print("\n".join(ids))
    await _more_hint(app, where, len(ids) if args.dry_run else 0, "purge")
    return OK


async def _more_hint(app: Conveyor, where: JobFilter, still_counted: int, verb: str) -> None:
    """Say so when the batch limit left matching jobs behind. `still_counted` is how
    many of the jobs just shown still match (a dry run changed nothing)."""
    left = await app.admin.count(where) - still_counted
    if left > 0:
        print(f"({left} more match; run again or raise --batch to {verb} them)")


async def queue_command(app: Conveyor, args: argparse.Namespace) -> int:
    if args.verb == "pause":
        await app.admin.pause(args.name, by=Actor.local("cli"))
        print(f"queue {args.name} paused: workers stop claiming from it; running jobs finish")
    else:
        await app.admin.resume(args.name, by=Actor.local("cli"))
        print(f"queue {args.name} resumed")
    return OK


async def queue_purge_command(app: Conveyor, args: argparse.Namespace) -> int:
    where = make_filter(tasks=args.task)
    if args.dry_run:
        n = await app.admin.purge(args.name, where, dry_run=True)
        print(
            f"would cancel {n:,} waiting job(s) of queue {args.name} (dry run, nothing cancelled)"
        )
        if n:
            waiting = make_filter(
                queues=[args.name], tasks=args.task, states=["available", "scheduled", "retryable"]
            )
            print(render.table(*render.job_rows(await app.admin.list(waiting, limit=20))))
            if n > 20:
                print(f"(20 of {n:,} shown)")
        return OK
    n = await app.admin.purge(args.name, where, by=Actor.local("cli"))
    print(
        f"cancelled {n:,} waiting job(s) of queue {args.name}"
        + (
            f"; bring them back with `conveyor dead redrive --state cancelled --queue "
            f"{args.name} --batch {n}`"
            if n
            else ""
        )
    )
    return OK


async def migrate_command(app: Conveyor, args: argparse.Namespace) -> int:
    # An app migrates itself on first use (auto_migrate); a twin that does not lets us
    # apply the pending migrations here and say which they were.
    twin = Conveyor(app.url, auto_migrate=False)
    try:
        await open_backend(twin)
        applied = await twin.admin.migrate()
    finally:
        await twin.aclose()
    if applied:
        print("applied migrations: " + ", ".join(f"{v:04d}" for v in applied))
    else:
        print("schema up to date: no migrations to apply")
    return OK
