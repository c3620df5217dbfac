"""A pool of worker processes: `conveyor worker APP -p 4 -c 10`.

The supervisor (this process) runs no jobs. It starts N children, each running the
ordinary asyncio `Worker` with `-c` slots, and:

* restarts a child that dies, and returns the dead child's running jobs at once
  instead of waiting for their leases to run out (see `_release_orphans`);
* replaces a child that retires after `max_tasks_per_child` jobs or past
  `max_memory_per_child` of resident memory: the child stops claiming, finishes its
  jobs, writes their outcomes and exits; its replacement starts as soon as it says
  it is retiring, so capacity does not dip;
* replaces a child whose sync handler ignored its hard time limit (the child
  returns its other jobs and exits, which is what stops that code);
* on SIGTERM/SIGINT tells every child to drain; a second signal, or the grace
  period running out, is a cold stop (running jobs go back without using an
  attempt); a third kills the children and returns their jobs itself.

The first children are forked at the command's start, before the app is imported
(`fork.py`): the process has one thread then (checked), no app and no backend,
so nothing that spawn protects against exists to be inherited, and the children load
the app alongside the supervisor instead of after it. Every later child (a
replacement) is started with the "spawn" context: a fresh interpreter that imports
the app by its `module:attr` path. By then the supervisor holds its backend connection
(to return orphans) and threads (the SQLite backend's, the sync facade's portal): a
fork while one of them holds a lock deadlocks the child, and a shared socket is
corrupted by two writers. Without a provably thread-free start (not Linux, a thread
already running) the first children are spawned too. A forkserver would make
replacements cheaper only by keeping a process that has imported Conveyor, whose
children are not the supervisor's (it could not reap them or read their exit status);
a replacement spawned costs about a single worker's start (docs/pool.md has
the figures).

The child's side (its signals, its commands and reports over the pipe) is in
`child.py`; the settings in `config.py`.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import time
from dataclasses import dataclass
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any

from conveyor.backends.claiming import QueuePlan
from conveyor.worker.config import WorkerConfig
from conveyor.worker.pool.child import (
    COLD,
    DRAIN,
    GO,
    RETIRING,
    STOP_SIGNALS,
    child_main,
    child_settings,
    child_worker_id,
)
from conveyor.worker.pool.config import PoolConfig
from conveyor.worker.pool.fork import ForkedStart
from conveyor.worker.rescue import release_worker_jobs
from conveyor.worker.worker import ExitStatus

if TYPE_CHECKING:
    from conveyor.app import Conveyor

log = logging.getLogger("conveyor.pool")


@dataclass(eq=False)
class _Child:
    slot: int
    worker_id: str
    process: BaseProcess
    conn: Connection
    started_at: float
    retiring: str | None = None  # why it is being replaced, once it said so
    killed: bool = False  # by us: its jobs are returned without using an attempt

    @property
    def pid(self) -> int:
        return self.process.pid or 0


class Supervisor:
    """Run `pool.processes` worker children until stopped; see the module docstring.

    >>> status = await Supervisor(app, "myapp.tasks:app", WorkerConfig(), PoolConfig(4)).run()
    """

    def __init__(
        self,
        app: Conveyor,
        app_path: str,
        config: WorkerConfig,
        pool: PoolConfig,
        forked: ForkedStart | None = None,
    ) -> None:
        self.app = app
        self.app_path = app_path
        self.config = config
        self.pool = pool
        self._forked = forked  # children forked at the command's start (fork.py)
        self._mp = multiprocessing.get_context("spawn")
        self._children: dict[int, _Child] = {}  # by pid, while running
        self._slots: dict[int, _Child] = {}  # slot -> its current (not retiring) child
        self._generation = 0
        self._stopping = 0  # 0 running, 1 draining, 2 cold, 3 killing
        self._stop_statuses: list[int] = []  # exit codes of children that exited in the stop
        self._all_exited = asyncio.Event()
        self._crashes: dict[int, int] = {}  # slot -> recent quick deaths
        self._background: set[asyncio.Task[Any]] = set()  # orphan returns in flight
        self._timers: set[asyncio.Task[Any]] = set()
        self.restarts = 0
        self.orphans_returned = 0

    # --- control ------------------------------------------------------------------------
    def stop(self) -> None:
        """First call: children drain. Second: cold stop. Third: kill them."""
        self._stopping = min(self._stopping + 1, 3)
        if not self._children:
            self._all_exited.set()  # between a death and its delayed restart
        if self._stopping == 1:
            log.info(
                "stopping the pool: %d children drain (grace %.0fs)",
                len(self._children),
                self.config.grace_period,
            )
            self._command_all(DRAIN)
            self._spawn(self._grace_timer(), self._timers)
        elif self._stopping == 2:
            log.warning("cold stop: children return their running jobs")
            self._command_all(COLD)
            self._spawn(self._cold_timer(), self._timers)
        else:
            log.error("stop requested a third time: killing the children")
            self._kill_all()

    async def run(self) -> ExitStatus:
        loop = asyncio.get_running_loop()
        if self._forked is None:
            await self.app.backend()  # for returning orphans; opened before any child
            for slot in range(self.pool.processes):
                self._start_child(slot, loop)
        else:
            forked = self._forked.adopt()
            for early in forked:
                self._generation += 1
                self._watch(
                    _Child(
                        early.slot, early.worker_id, early.process, early.conn, time.monotonic()
                    ),
                    loop,
                )
            await self.app.backend()  # while the children open theirs
            if not self._stopping:  # they claim nothing before this
                for early in forked:
                    if early.pid in self._children:
                        self._command(self._children[early.pid], GO)
            # A replacement is spawned, and the first spawn would start multiprocessing's
            # resource tracker (an interpreter) on its critical path: start it now.
            resource_tracker.ensure_running()
        plan = QueuePlan(self.config.queues, self.config.queue_weights)
        log.info(
            "pool started: %d processes x %d slots, queues=%s",
            self.pool.processes,
            self.config.concurrency,
            plan.spec,
        )
        await self._all_exited.wait()
        for timer in self._timers:
            timer.cancel()
        # Orphan returns still in flight (a child died during the stop) finish first.
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
        status = self._status()
        log.info(
            "pool stopped (%s): %d restarts, %d orphaned jobs returned",
            status.name.lower(),
            self.restarts,
            self.orphans_returned,
        )
        return status

    def _status(self) -> ExitStatus:
        """Drained only if every child drained; a crash during the stop is an error."""
        if any(code not in (ExitStatus.DRAINED, ExitStatus.COLD) for code in self._stop_statuses):
            return ExitStatus.ERROR
        if self._stopping >= 2 or ExitStatus.COLD in self._stop_statuses:
            return ExitStatus.COLD
        return ExitStatus.DRAINED

    # --- children -------------------------------------------------------------------------
    def _start_child(self, slot: int, loop: asyncio.AbstractEventLoop) -> None:
        self._generation += 1
        worker_id = child_worker_id(slot, self._generation)
        ours, theirs = self._mp.Pipe(duplex=True)
        process = self._mp.Process(
            target=child_main,
            name=f"conveyor-child-{slot}",
            args=(
                self.app_path,
                child_settings(self.config, self.pool, slot),
                worker_id,
                theirs,
                self.pool.max_memory_per_child,
                self.pool.log_level,
                self.pool.log_format,
                self.pool.metrics,
            ),
        )
        # A group-wide SIGTERM/SIGINT during a child's start must neither kill it nor
        # be lost. The child inherits this thread's signal mask across exec, so it boots
        # with both blocked and pending until child_main ignores them (it takes orders
        # over its pipe). Only the mask changes here, never the dispositions: a signal
        # sent meanwhile goes to another thread of this process, whose handler still
        # wakes the loop (set to ignored, it was dropped and the pool never stopped).
        # The spawn start launches multiprocessing's resource tracker on first use and
        # then unblocks both signals; started beforehand, it leaves the mask alone.
        resource_tracker.ensure_running()
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        theirs.close()  # the child holds the only other end: EOF tells it we are gone
        self._watch(_Child(slot, worker_id, process, ours, time.monotonic()), loop)

    def _watch(self, child: _Child, loop: asyncio.AbstractEventLoop) -> None:
        slot, process, ours = child.slot, child.process, child.conn
        self._children[child.pid] = child
        self._slots[slot] = child
        loop.add_reader(process.sentinel, self._on_exit, child)
        loop.add_reader(ours.fileno(), self._on_report, child)
        log.info("child %d started (pid %d, %s)", slot, child.pid, child.worker_id)
        if self._stopping:  # started during a stop (a replacement in flight): stop it too
            self._command(child, DRAIN if self._stopping == 1 else COLD)

    def _on_report(self, child: _Child) -> None:
        loop = asyncio.get_running_loop()
        try:
            kind, detail = child.conn.recv()
        except (EOFError, OSError):
            loop.remove_reader(child.conn.fileno())
            return
        if kind == RETIRING and child.retiring is None:
            child.retiring = str(detail)
            log.info(
                "child %d (pid %d) retiring (%s): starting its replacement",
                child.slot,
                child.pid,
                detail,
            )
            if not self._stopping and self._slots.get(child.slot) is child:
                self.restarts += 1
                self._start_child(child.slot, loop)

    def _on_exit(self, child: _Child) -> None:
        loop = asyncio.get_running_loop()
        loop.remove_reader(child.process.sentinel)
        try:
            loop.remove_reader(child.conn.fileno())
        except (ValueError, OSError):
            pass
        # The sentinel fires as the process ends; reaping it may take a moment more.
        child.process.join(10)
        code = child.process.exitcode
        child.conn.close()
        self._children.pop(child.pid, None)
        if self.pool.metrics:  # its in-flight gauge no longer counts
            from conveyor.observe.metrics import mark_process_dead

            mark_process_dead(child.pid)
        crashed = code is None or code < 0 or code not in (ExitStatus.DRAINED, ExitStatus.COLD)
        how = (
            f"killed by {signal.Signals(-code).name}"
            if code is not None and code < 0
            else f"exit status {code}"
        )
        if self._stopping:
            self._stop_statuses.append(
                ExitStatus.COLD
                if child.killed
                else code
                if code is not None and code >= 0
                else ExitStatus.ERROR
            )
        if crashed and not child.killed:
            log.error("child %d (pid %d) died (%s)", child.slot, child.pid, how)
        else:
            log.info("child %d (pid %d) exited (%s)", child.slot, child.pid, how)
        # A child that exited by itself (0 drained, 3 cold) wrote every outcome before it
        # did (the worker waits for its completer); one that crashed or was killed may
        # have left running jobs behind.
        if crashed or child.killed:
            self._spawn(self._release_orphans(child, charge=not child.killed, how=how))
        if self._slots.get(child.slot) is child:
            del self._slots[child.slot]
            if not self._stopping:
                self.restarts += 1
                delay = self._restart_delay(child, crashed)
                if delay:
                    log.warning(
                        "child %d keeps dying at start; restarting in %.1fs", child.slot, delay
                    )
                    loop.call_later(delay, self._restart_if_running, child.slot)
                else:
                    self._start_child(child.slot, loop)
        if not self._children and self._stopping:
            self._all_exited.set()

    def _restart_if_running(self, slot: int) -> None:
        if not self._stopping and slot not in self._slots:
            self._start_child(slot, asyncio.get_running_loop())

    def _restart_delay(self, child: _Child, crashed: bool) -> float:
        if crashed and time.monotonic() - child.started_at < self.pool.crash_loop_window:
            crashes = self._crashes[child.slot] = self._crashes.get(child.slot, 0) + 1
            return 0.0 if crashes == 1 else float(min(0.5 * 2 ** (crashes - 2), 30.0))
        self._crashes.pop(child.slot, None)
        return 0.0

    def _command(self, child: _Child, command: str) -> None:
        try:
            child.conn.send(command)
        except OSError:
            pass  # it is exiting; its sentinel will tell

    def _command_all(self, command: str) -> None:
        for child in list(self._children.values()):
            self._command(child, command)

    def _kill_all(self) -> None:
        for child in list(self._children.values()):
            child.killed = True
            try:
                os.kill(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    async def _grace_timer(self) -> None:
        await asyncio.sleep(self.config.grace_period)
        if self._children and self._stopping == 1:
            # The children go cold by themselves now; this is the backstop for one
            # whose loop cannot run.
            self._stopping = 2
            self._spawn(self._cold_timer(), self._timers)

    async def _cold_timer(self) -> None:
        await asyncio.sleep(self.pool.cold_stop_timeout)
        if self._children:
            log.error(
                "%d children did not stop %.0fs into a cold stop: killing them",
                len(self._children),
                self.pool.cold_stop_timeout,
            )
            self._stopping = 3
            self._kill_all()

    def _spawn(self, coro: Any, into: set[asyncio.Task[Any]] | None = None) -> None:
        tasks = self._background if into is None else into
        task = asyncio.get_running_loop().create_task(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    # --- orphans --------------------------------------------------------------------------
    async def _release_orphans(self, child: _Child, *, charge: bool, how: str) -> None:
        """Return the jobs a dead child still held.

        Safe against a child that is only slow: this runs only after the child's
        process has exited (its sentinel fired and it was reaped), so it can write
        nothing any more. The jobs are found in the backend by the worker id the
        supervisor gave the child, so there is no window (as there would be with
        jobs the child reported after claiming) in which a claimed job is unknown.
        Every release is fenced by the job's lease token: a job that the child
        settled just before dying, or that was rescued and claimed again meanwhile,
        is not running under that token and is left alone.

        A crash uses the attempt (WorkerLost, like a lease expiry), so a job that
        kills its process every time ends dead instead of looping; children stopped
        by the supervisor itself (a forced shutdown) do not.
        """
        deadline = time.monotonic() + 60.0
        failures = 0
        while True:
            try:
                released = await self._release_once(child, charge, how)
                break
            except Exception as exc:
                failures += 1
                if time.monotonic() > deadline:
                    log.error(
                        "could not return the jobs of dead child %s (%s); their leases "
                        "will expire and the rescuer returns them",
                        child.worker_id,
                        exc,
                    )
                    return
                await asyncio.sleep(min(0.1 * 2**failures, 5.0))
        if released:
            self.orphans_returned += len(released)
            log.warning(
                "returned %d job(s) of child %d (pid %d, %s)%s: %s",
                len(released),
                child.slot,
                child.pid,
                how,
                "" if charge else " without using an attempt",
                released[:10],
            )

    async def _release_once(self, child: _Child, charge: bool, how: str) -> list[str]:
        return await release_worker_jobs(
            await self.app.backend(),
            child.worker_id,
            self.app.clock(),
            charge=charge,
            message=f"pool child {child.pid} running this job died ({how})",
            app_version=self.app.version,
        )  # the child ran this app's code


def run_pool(
    app: Conveyor,
    app_path: str,
    config: WorkerConfig,
    pool: PoolConfig,
    forked: ForkedStart | None = None,
) -> ExitStatus:
    """Run a pool until SIGTERM/SIGINT; the process's exit status follows the return.
    `forked`: children forked at the start (`fork.fork_children`), else they are
    spawned."""

    async def serve() -> ExitStatus:
        supervisor = Supervisor(app, app_path, config, pool, forked)
        loop = asyncio.get_running_loop()
        handled = (signal.SIGTERM, signal.SIGINT)
        received = 0

        def on_signal(signum: int) -> None:
            nonlocal received
            received += 1
            step = (
                "draining; send again to stop at once",
                "cold stop; send again to kill the children",
                "killing the children",
            )[min(received, 3) - 1]
            log.info("%s received (%s)", signal.Signals(signum).name, step)
            supervisor.stop()

        for signum in handled:
            loop.add_signal_handler(signum, on_signal, signum)
        # Signals that came while the forked children started, handled now that the
        # supervisor has adopted them (call_soon: after run() took them in).
        for kept in forked.take_signals() if forked else ():
            loop.call_soon(on_signal, kept)
        try:
            return await supervisor.run()
        finally:
            for signum in handled:
                loop.remove_signal_handler(signum)
            await app.aclose()

    return asyncio.run(serve())
