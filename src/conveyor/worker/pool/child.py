"""A pool child: a fresh interpreter (spawn) or a fork taken before the supervisor
loaded the app (`fork.py`), running the ordinary asyncio `Worker`.

Children ignore SIGTERM and SIGINT: a terminal's Ctrl-C or `kill -TERM -PGID` reaches
the whole process group, and a child that acted on it as well as on its supervisor's
command would count two requests and stop cold. They take orders from the
supervisor over a pipe instead, and stop cold on their own when that pipe closes (the
supervisor died). A child that retires by itself (too many jobs, too much memory, a
sync handler past its hard time limit) says so first, so that its replacement starts
while it drains. A forked child is *gated*: it loads the app and opens its backend
alongside the supervisor, then waits for GO before its first claim, so nothing is
claimed before the supervisor can return a dead child's jobs, and a start the
supervisor gives up (a usage error, a signal) leaves nothing behind and says nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import uuid
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from conveyor.observe.logs import configure_logging, flush_all
from conveyor.ops.loading import load_app
from conveyor.worker.config import WorkerConfig
from conveyor.worker.pool.config import PoolConfig, rss_bytes
from conveyor.worker.pool.process_exit import report_left_running, threads_left_running
from conveyor.worker.pool.process_start import starting
from conveyor.worker.worker import ExitStatus, Worker

if TYPE_CHECKING:
    from conveyor.app import Conveyor

log = logging.getLogger("conveyor.pool")

# Supervisor -> child commands and child -> supervisor reports, over the child's pipe.
DRAIN, COLD, GO = "drain", "cold", "go"
RETIRING = "retiring"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

# A forked child builds its settings from the app it loaded itself (the default queues
# are the app's); a spawned one gets them made.
Settings = WorkerConfig | Callable[["Conveyor"], WorkerConfig]


def child_worker_id(slot: int, generation: int) -> str:
    """Unique per child; the supervisor finds a dead child's jobs by it."""
    return f"{socket.gethostname()}:{os.getpid()}:p{slot}.{generation}:{uuid.uuid4().hex[:6]}"


def child_settings(config: WorkerConfig, pool: PoolConfig, slot: int) -> WorkerConfig:
    """The worker settings of the child in `slot`: a budget of jobs, runaway code stops
    it, and only the first slot runs the periodic schedules (ticks are enqueued once
    either way; N schedulers per pool would only add load)."""
    return replace(
        config,
        max_jobs=pool.max_tasks_per_child,
        stop_on_runaway=True,
        scheduler=config.scheduler and slot == 0,
    )


class _Gate:
    """A gated child's first command: GO, or how it is to stop before it ran anything."""

    def __init__(self, conn: Connection, gated: bool) -> None:
        self.conn, self.first = conn, None if gated else GO

    def wait(self) -> str:
        if self.first is None:
            try:
                self.first = str(self.conn.recv())
            except (EOFError, OSError):  # the supervisor gave the start up
                self.first = COLD
        return self.first

    async def wait_async(self) -> str:
        if self.first is None:
            loop = asyncio.get_running_loop()
            readable = loop.create_future()
            loop.add_reader(self.conn.fileno(), readable.set_result, None)
            try:
                await readable
            finally:
                loop.remove_reader(self.conn.fileno())
        return self.wait()


def child_main(
    app_path: str,
    config: Settings,
    worker_id: str,
    conn: Connection,
    max_memory: int | None,
    log_level: str,
    log_format: str = "text",
    metrics: bool = False,
    gated: bool = False,
) -> None:
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # blocked by the supervisor
    # The supervisor's own format, each line naming the child's pid.
    configure_logging(log_level, log_format, process_label="child")
    gate = _Gate(conn, gated)
    try:
        with starting():  # a forked child comes with the collector paused: see there
            app = load_app(app_path)
            from conveyor.observe.instrumentation import instrument

            instrument(app, metrics=metrics, tracing=None)
            settings = config if isinstance(config, WorkerConfig) else config(app)
        status = asyncio.run(_child(app, settings, worker_id, conn, max_memory, gate))
    except BaseException:
        # Before GO the supervisor is still starting: if it goes on, this child's error
        # is news; if it gave up, it says why itself (the same app failed it).
        if gate.wait() == GO:
            log.exception("pool child %s failed", worker_id)
        status = ExitStatus.ERROR
    # Always os._exit, as a thread left running (a sync handler abandoned at its hard
    # limit, one a handler started) would hold a normal exit; see process_exit.
    left = threads_left_running()
    if left:
        report_left_running(left)
    flush_all()
    os._exit(int(status))


async def _child(
    app: Conveyor,
    config: WorkerConfig,
    worker_id: str,
    conn: Connection,
    max_memory: int | None,
    gate: _Gate,
) -> ExitStatus:
    if gate.first is None:
        try:
            await app.backend()  # alongside the supervisor, which opens its own
            first = await gate.wait_async()
        except BaseException:
            await app.aclose()
            raise
        if first != GO:  # stopped while starting: nothing ran
            await app.aclose()
            return ExitStatus.DRAINED if first == DRAIN else ExitStatus.COLD

    def over_memory() -> str | None:
        if max_memory is None:
            return None
        rss = rss_bytes()
        if rss <= max_memory:
            return None
        return f"resident memory {rss >> 20} MiB is over the {max_memory >> 20} MiB limit"

    if max_memory is not None and rss_bytes() > max_memory:
        log.warning(
            "this child already uses %d MiB at start, over --max-memory-per-child "
            "(%d MiB): each child will run one batch of jobs before it is replaced",
            rss_bytes() >> 20,
            max_memory >> 20,
        )
    worker = Worker(app, config, worker_id=worker_id, retire_when=over_memory)
    loop = asyncio.get_running_loop()
    commanded = False  # the supervisor asked us to stop: no retirement report

    def cold() -> None:
        if not worker.stopping:
            worker.stop()
        worker.stop()

    def on_command() -> None:
        nonlocal commanded
        try:
            command = conn.recv()
        except (EOFError, OSError):
            loop.remove_reader(conn.fileno())
            log.error("pool supervisor is gone: returning running jobs and stopping")
            commanded = True
            cold()
            return
        if command not in (DRAIN, COLD):
            return  # GO came before the loop took over the pipe
        commanded = True
        if command == DRAIN and not worker.stopping:
            worker.stop()
        elif command == COLD:
            cold()

    async def watch() -> None:
        reported = False
        while True:
            if not worker.stopping and max_memory is not None and worker.claimed:
                reason = over_memory()  # also while every slot is busy with long jobs
                if reason is not None:
                    log.info("%s: draining", reason)
                    worker.retired_because = reason
                    worker.stop()
            if worker.stopping and not commanded and not reported:
                reason = (
                    "hard time limit"
                    if worker.counts["runaway"]
                    else worker.retired_because or "stopped"
                )
                try:
                    conn.send((RETIRING, reason))
                except OSError:
                    pass
                reported = True
            await asyncio.sleep(0.2)

    loop.add_reader(conn.fileno(), on_command)
    watcher = asyncio.create_task(watch())
    try:
        return await worker.run()
    finally:
        watcher.cancel()
        try:
            loop.remove_reader(conn.fileno())
        except (ValueError, OSError):
            pass
        await app.aclose()
