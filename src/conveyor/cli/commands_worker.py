"""`conveyor worker`: run jobs until SIGTERM/SIGINT (first drains, second is cold)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from pathlib import Path
from typing import NoReturn

from conveyor.app import Conveyor
from conveyor.backends.claiming import QueuePlan, parse_queues
from conveyor.cli.exits import DEAD_JOBS, USAGE, CliError
from conveyor.cli.loading import APP_PATH_HELP, load_app, open_backend
from conveyor.cli.logs import FORMATS, LEVELS, configure_logging, flush_all
from conveyor.cli.parsing import Commands, positive_float, positive_int, split_csv
from conveyor.model.errors import ConveyorError
from conveyor.model.job import JobState
from conveyor.worker import ExitStatus, Worker, WorkerConfig
from conveyor.worker.pool.config import PoolConfig, parse_size
from conveyor.worker.pool.fork import fork_children
from conveyor.worker.pool.process_exit import report_left_running, threads_left_running
from conveyor.worker.pool.process_start import starting
from conveyor.worker.pool.supervisor import run_pool

log = logging.getLogger("conveyor.cli")
_DEFAULTS = WorkerConfig()


def register(commands: Commands) -> None:
    worker = commands.add_parser(
        "worker",
        help="run jobs until stopped",
        description="Run jobs until SIGTERM or SIGINT. The first signal stops claiming and "
        "waits up to --grace seconds for running jobs (exit 0); a second signal, "
        "or the grace period running out, returns unfinished jobs to their queue "
        "without using an attempt (exit 3). Exit 1 on an error. With --burst "
        "(or --max-jobs) the worker stops by itself; it exits 4 if a job it ran "
        "ended dead.",
    )
    worker.add_argument("app", metavar="MODULE:ATTR", help=APP_PATH_HELP)
    worker.add_argument(
        "--queues",
        "-q",
        action="append",
        type=split_csv,
        metavar="Q1,Q2",
        help="queues to work, in priority order (repeatable), or with weights "
        "that share the worker's slots: critical=6,default=3,bulk=1 "
        "(docs/flow-control.md); default: the app's default queue, then "
        "every queue its tasks use",
    )
    worker.add_argument(
        "--concurrency",
        "-c",
        type=positive_int,
        default=_DEFAULTS.concurrency,
        help=f"jobs run at once (default {_DEFAULTS.concurrency})",
    )
    worker.add_argument(
        "--lease",
        type=positive_float,
        default=_DEFAULTS.lease,
        metavar="SECONDS",
        help="lease length; the jobs of a worker whose host "
        "vanished come back after about this (a killed "
        "worker's within a second; default "
        f"{_DEFAULTS.lease:g})",
    )
    worker.add_argument(
        "--grace",
        type=positive_float,
        default=_DEFAULTS.grace_period,
        metavar="SECONDS",
        help=f"drain time after the first signal (default {_DEFAULTS.grace_period:g})",
    )
    worker.add_argument(
        "--poll",
        type=positive_float,
        default=_DEFAULTS.poll_interval,
        metavar="SECONDS",
        help="fallback poll interval; new jobs wake the "
        f"worker sooner (default {_DEFAULTS.poll_interval:g})",
    )
    worker.add_argument(
        "--no-scheduler",
        action="store_true",
        help="do not enqueue the app's periodic jobs from this worker (by "
        "default every worker does; each tick is still enqueued once)",
    )
    runs = worker.add_argument_group("runs that end by themselves")
    runs.add_argument(
        "--burst",
        action="store_true",
        help="run the jobs that are due, then exit (0, or 4 if any ended "
        "dead): for cron jobs and CI. Jobs due later (delayed, snoozed, "
        "retries in backoff) wait for the next run; schedules do not run",
    )
    runs.add_argument(
        "--max-jobs",
        type=positive_int,
        metavar="N",
        help="claim at most N jobs, finish them and exit (0, or 4 if any ended dead)",
    )
    dev = worker.add_argument_group("development")
    dev.add_argument(
        "--reload",
        action="store_true",
        help="restart the worker when a .py file under the current directory "
        "(or each --reload-dir) changes; it drains first (needs "
        "conveyor[reload])",
    )
    dev.add_argument(
        "--reload-dir",
        action="append",
        type=Path,
        metavar="DIR",
        help="folder to watch instead of the current directory (repeatable)",
    )
    pool = worker.add_argument_group(
        "process pool",
        "-p N runs a supervisor and N child processes of -c slots each: for "
        "CPU-bound work, sync code that must stop at its hard time limit, and "
        "leaky code (docs/pool.md)",
    )
    pool.add_argument(
        "--processes",
        "-p",
        type=positive_int,
        metavar="N",
        help="child processes; a dead child's jobs come back at once and it is "
        "replaced (default: no pool, one process)",
    )
    pool.add_argument(
        "--max-tasks-per-child",
        type=positive_int,
        metavar="N",
        help="replace a child after it has run N jobs (it drains first)",
    )
    pool.add_argument(
        "--max-memory-per-child",
        type=_size,
        metavar="SIZE",
        help="replace a child whose resident memory passes SIZE, e.g. 512MiB, "
        "2GB (it drains first)",
    )
    worker.add_argument("--log-level", choices=LEVELS, default="info")
    worker.add_argument(
        "--log-format",
        choices=FORMATS,
        default="text",
        help="json: one object per line, with job_id, task, queue, attempt and "
        "correlation_id on every line about a job (default text)",
    )
    worker.add_argument(
        "--metrics-port",
        type=positive_int,
        metavar="PORT",
        help="serve Prometheus metrics of this process on PORT (one port per "
        "worker process; see docs/operations.md)",
    )
    worker.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="ADDRESS",
        help="address for --metrics-port (default 127.0.0.1)",
    )
    worker.set_defaults(runner=worker_command)


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _queue_plan(args: argparse.Namespace) -> QueuePlan | None:
    """The -q options, or None for the app's own queues."""
    if not args.queues:
        return None
    try:
        return parse_queues([q for group in args.queues for q in group])
    except ValueError as exc:
        raise CliError(f"worker settings: {exc}", USAGE) from None


def _worker_config(args: argparse.Namespace, plan: QueuePlan) -> WorkerConfig:
    try:
        return WorkerConfig(
            queues=plan.queues,
            queue_weights=plan.weights,
            concurrency=args.concurrency,
            lease=args.lease,
            grace_period=args.grace,
            poll_interval=args.poll,
            scheduler=not args.no_scheduler,
            burst=args.burst,
            max_jobs=args.max_jobs,
        )
    except ValueError as exc:
        raise CliError(f"worker settings: {exc}", USAGE) from None


def _pool_config(args: argparse.Namespace) -> PoolConfig:
    for option in ("burst", "max_jobs"):
        if getattr(args, option):
            raise CliError(
                f"--{option.replace('_', '-')} runs one worker process: drop "
                "-p/--processes (children recycle with --max-tasks-per-child)",
                USAGE,
            )
    return PoolConfig(
        processes=args.processes,
        max_tasks_per_child=args.max_tasks_per_child,
        max_memory_per_child=args.max_memory_per_child,
        log_level=args.log_level.upper(),
        log_format=args.log_format,
        metrics=bool(args.metrics_port),
    )


def default_queues(app: Conveyor) -> tuple[str, ...]:
    """The app's default queue first, then its tasks' queues in registration order
    (a worker serves its queues in the order given)."""
    queues = [app.default_queue, *(t.defaults.queue for t in app.tasks.values())]
    return tuple(dict.fromkeys(queues))


def worker_command(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    if args.reload_dir and not args.reload:
        raise CliError("--reload-dir goes with --reload", USAGE)
    if args.reload and args.burst:
        raise CliError(
            "--reload restarts a worker that runs until stopped; a --burst run "
            "ends by itself: pass one of them",
            USAGE,
        )
    if args.reload:
        from conveyor.cli.reload import is_reload_child, run_with_reload

        if not is_reload_child():
            return run_with_reload(args.reload_dir or [Path.cwd()], grace=args.grace)
    plan = _queue_plan(args)  # checked before a pool forks its children

    def settings(app: Conveyor) -> WorkerConfig:
        return _worker_config(args, plan or QueuePlan(default_queues(app)))

    if args.processes:
        pool = _pool_config(args)
        if args.metrics_port:
            share_metrics_between_processes()
        forked = None
        try:
            with starting():
                # Before the app is imported: the children load it alongside this process
                # (worker/pool/fork.py says why that is safe here and nowhere later).
                forked = fork_children(args.app, pool, settings)
                app = load_app(args.app)
                observe(app, args, runs_jobs=False)
            return int(run_pool(app, args.app, settings(app), pool, forked))
        except BaseException:
            if forked is not None:
                forked.abandon()
            raise
    with starting():
        app = load_app(args.app)
        observe(app, args)
        config = settings(app)
    for option in ("max_tasks_per_child", "max_memory_per_child"):
        if getattr(args, option) is not None:
            raise CliError(
                f"--{option.replace('_', '-')} replaces pool children: add -p/--processes N", USAGE
            )
    code = asyncio.run(_serve(app, config))
    mark_process_dead_if_metrics(args)
    # A thread still running (a busy sync handler, one a handler started) would hold
    # the process at exit, however long it runs; every outcome is written: leave.
    left = threads_left_running()
    if left:
        report_left_running(left)
        _exit_now(code)
    return int(code)


async def _serve(app: Conveyor, config: WorkerConfig) -> int:
    await open_backend(app)
    worker = Worker(app, config)
    loop = asyncio.get_running_loop()
    received = 0

    def on_signal(signum: int) -> None:
        nonlocal received
        received += 1
        name = signal.Signals(signum).name
        if received >= 3:
            # Even the cold stop is stuck (say, the backend is unreachable while the last
            # outcomes are written). Other workers return the running jobs once this
            # process's liveness signal is gone (or their leases expire).
            log.error("%s a third time: exiting at once", name)
            _exit_now(ExitStatus.COLD)
        log.info(
            "%s received (%s)",
            name,
            "draining; send again to stop at once" if received == 1 else "cold stop",
        )
        worker.stop()

    handled = [signal.SIGTERM, signal.SIGINT]
    for signum in handled:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        status = await worker.run()
        # A run that ended by itself says whether everything it ran went well.
        if (
            status is ExitStatus.DRAINED
            and (config.burst or config.max_jobs)
            and worker.counts[JobState.DEAD.value]
        ):
            log.warning("%d job(s) ended dead during this run", worker.counts[JobState.DEAD.value])
            return DEAD_JOBS
        return status
    except ConveyorError:
        raise
    except Exception:
        log.exception("worker failed")
        return ExitStatus.ERROR
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)
        await app.aclose()


def observe(app: Conveyor, args: argparse.Namespace, *, runs_jobs: bool = True) -> None:
    """Correlation ids always, tracing when OpenTelemetry is installed, metrics (and
    their endpoint) with --metrics-port: the observers of conveyor.observe.middleware.

    A pool's supervisor (`runs_jobs=False`) neither runs nor enqueues jobs, so it has
    nothing to trace: it skips importing OpenTelemetry, which its children are doing
    on the same cores at the same moment."""
    from conveyor.observe.instrumentation import instrument

    try:
        instrument(
            app, metrics=True if args.metrics_port else False, tracing=None if runs_jobs else False
        )
    except ImportError as exc:
        raise CliError(
            f"--metrics-port needs prometheus-client: pip install 'conveyor[metrics]' ({exc})",
            USAGE,
        ) from None
    if args.metrics_port:
        from conveyor.observe.metrics import serve_metrics

        try:
            server = serve_metrics(args.metrics_port, args.metrics_host)
        except OSError as exc:
            raise CliError(
                f"cannot serve metrics on {args.metrics_host}:{args.metrics_port}: "
                f"{exc.strerror or exc}",
                USAGE,
            ) from None
        log.info("metrics on http://%s:%d/metrics", args.metrics_host, server.port)


def share_metrics_between_processes() -> None:
    """A pool serves its children's metrics on one port: prometheus_client's
    multiprocess mode, in $PROMETHEUS_MULTIPROC_DIR or else a fresh temporary folder
    (removed at exit). Set before the children start: they inherit it."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="conveyor-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = folder
    atexit.register(shutil.rmtree, folder, True)


def mark_process_dead_if_metrics(args: argparse.Namespace) -> None:
    if args.metrics_port:
        from conveyor.observe.metrics import mark_process_dead

        mark_process_dead()


def _exit_now(code: int) -> NoReturn:
    flush_all()
    os._exit(int(code))
