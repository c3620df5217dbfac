"""`conveyor dead redrive --rate 20/s`: a paced redrive in the foreground with a
progress bar (rich), and `--status/--pause/--resume/--cancel RUN` to steer a run from
any terminal. The behaviour lives in `conveyor.ops.redrive_runs`; this module parses,
shows progress and handles Ctrl-C (pause, then resume, cancel or leave it paused).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from conveyor.app import Conveyor
from conveyor.backends.params import JobFilter
from conveyor.cli import render
from conveyor.cli.exits import FAILURE, INTERRUPTED, OK, CliError
from conveyor.cli.parsing import positive_int
from conveyor.observe.audit import Actor
from conveyor.ops.redrive_driver import Driver, drive
from conveyor.ops.redrive_runs import (
    RedriveRun,
    Runs,
    RunStatus,
    format_rate,
    new_driver_id,
    parse_rate,
    parse_share,
)

PLAIN_EVERY = 5.0  # seconds between two progress lines when stdout is not a terminal


def _rate(text: str) -> float:
    try:
        return parse_rate(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _share(text: str) -> float:
    try:
        return parse_share(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(redrive: argparse.ArgumentParser) -> None:
    pace = redrive.add_argument_group("paced redrive")
    pace.add_argument(
        "--rate",
        type=_rate,
        metavar="RATE",
        help="redrive at this pace, e.g. 20/s, 300/min, 1000/h, with a progress bar; Ctrl-C pauses",
    )
    pace.add_argument(
        "--stop-if-failing",
        type=_share,
        default=0.2,
        metavar="SHARE",
        help="stop when more than this share of the redriven jobs fail again "
        "(a retry or dead), e.g. 20%% (the default) or 0.05",
    )
    pace.add_argument(
        "--min-sample",
        type=positive_int,
        default=20,
        metavar="N",
        help="judge the share only once N redriven jobs have an outcome (default 20)",
    )
    steer = pace.add_mutually_exclusive_group()
    steer.add_argument(
        "--status", nargs="?", const="", metavar="RUN", help="show the paced runs (or one) and exit"
    )
    steer.add_argument("--pause", metavar="RUN", help="pause a paced run")
    steer.add_argument(
        "--resume",
        metavar="RUN",
        help="resume a paused run (or one whose process is gone), driven here",
    )
    steer.add_argument("--cancel", metavar="RUN", help="cancel a paced run")


def steers_a_run(args: argparse.Namespace) -> bool:
    return any(getattr(args, name) is not None for name in ("status", "pause", "resume", "cancel"))


async def steer(app: Conveyor, args: argparse.Namespace) -> int:
    runs, actor = Runs(app), Actor.local("cli")
    try:
        if args.status is not None:
            return await _status(runs, args.status)
        if args.pause is not None:
            run = await runs.pause(args.pause, by=actor)
            print(f"run {run.id} paused; resume with `conveyor dead redrive --resume {run.id}`")
            return OK
        if args.cancel is not None:
            run = await runs.cancel(args.cancel, by=actor)
            print(f"run {run.id} cancelled: {run.describe()}")
            return OK
        driver_id = new_driver_id()
        run = await runs.resume(args.resume, driver_id, by=actor)
    except LookupError as exc:
        raise CliError(str(exc).strip("'\""), FAILURE) from None
    except ValueError as exc:
        raise CliError(str(exc), FAILURE) from None
    print(f"run {run.id} resumed: {run.describe()}")
    return await _drive_here(app, run, driver_id)


async def paced(app: Conveyor, args: argparse.Namespace, where: JobFilter) -> int:
    driver_id = new_driver_id()
    run = await Runs(app).start(
        where,
        args.rate,
        by=Actor.local("cli"),
        stop_if_failing=args.stop_if_failing,
        min_sample=args.min_sample,
        limit=args.limit,
        driver=driver_id,
    )
    if run.total == 0:
        await Driver(app, run.id, driver_id).step()  # records it done, nothing moved
        print(f"no {args.state} jobs match; nothing to redrive")
        return OK
    print(
        f"run {run.id}: redriving {run.total:,} job(s) at {format_rate(run.rate)}; it stops "
        f"if more than {run.stop_if_failing:.0%} of them fail again (after "
        f"{run.min_sample}). Ctrl-C pauses."
    )
    return await _drive_here(app, run, driver_id)


async def _drive_here(app: Conveyor, run: RedriveRun, driver_id: str) -> int:
    runs, actor = Runs(app), Actor.local("cli")
    driver = Driver(app, run.id, driver_id)
    interrupted = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, interrupted.set)
    console = Console()
    last_plain = [0.0]
    try:
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[outcomes]}"),
            TimeElapsedColumn(),
            console=console,
            disable=not console.is_terminal,
        ) as progress:
            bar = progress.add_task(f"run {run.id}", total=max(run.total, 1), outcomes="")

            def on_step(r: RedriveRun) -> None:
                progress.update(
                    bar,
                    completed=r.redriven,
                    total=max(r.total, 1),
                    outcomes=f"{r.succeeded:,} ok · {r.failed:,} failing · {r.pending:,} waiting",
                )
                if not console.is_terminal and time.monotonic() - last_plain[0] >= PLAIN_EVERY:
                    last_plain[0] = time.monotonic()
                    print(f"run {r.id}: {r.describe()}", flush=True)

            while True:
                run = await drive(driver, on_step, interrupted)
                if not interrupted.is_set():
                    break
                interrupted.clear()
                run = await runs.pause(run.id, by=actor)
                progress.stop()
                choice = await _ask(run)
                if choice == "r":
                    run = await runs.resume(run.id, driver_id, by=actor)
                    progress.start()
                    continue
                if choice == "c":
                    run = await runs.cancel(run.id, by=actor)
                    print(f"run {run.id} cancelled: {run.describe()}")
                    return OK
                print(
                    f"run {run.id} left paused; resume with "
                    f"`conveyor dead redrive --resume {run.id}`"
                )
                return INTERRUPTED
    finally:
        loop.remove_signal_handler(signal.SIGINT)
    print(f"run {run.id} {run.describe()}")
    if run.status is RunStatus.STOPPED:
        print(
            f"stopped by itself; look at the failures (`conveyor dead list`), then resume "
            f"with `conveyor dead redrive --resume {run.id}` or start again",
            file=sys.stderr,
        )
        return FAILURE
    if run.status is RunStatus.RUNNING:  # another process took it over
        print(f"now driven by {run.driver}")
    return OK


async def _ask(run: RedriveRun) -> str:
    """After Ctrl-C: resume, cancel, or leave the run paused (the default; also what
    happens without a terminal to ask on)."""
    if not sys.stdin.isatty():
        return ""
    prompt = f"\nrun {run.id} paused ({run.describe()}). [r]esume, [c]ancel, Enter: leave paused: "
    try:
        answer = await asyncio.to_thread(input, prompt)
    except (EOFError, KeyboardInterrupt):
        return ""
    return answer.strip().lower()[:1]


async def _status(runs: Runs, run_id: str) -> int:
    if run_id:
        run = await runs.get(run_id)
        if run is None:
            raise CliError(f"no redrive run {run_id!r}", FAILURE)
        found = [run]
    else:
        found = await runs.all()
        if not found:
            print("no paced redrive runs")
            return OK
    print(
        render.table(
            [
                "RUN",
                "STATUS",
                "REDRIVEN",
                "OK",
                "FAILING",
                "WAITING",
                "RATE",
                "BY",
                "STARTED",
                "REASON",
            ],
            [
                [
                    r.id,
                    r.status.value,
                    f"{r.redriven:,}/{r.total:,}",
                    r.succeeded,
                    r.failed,
                    r.pending,
                    format_rate(r.rate),
                    f"{r.by} ({r.via})",
                    render.relative(r.created_at),
                    r.reason or "-",
                ]
                for r in found
            ],
        )
    )
    return OK
