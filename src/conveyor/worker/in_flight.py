"""The jobs in flight in a worker, from claim to written outcome: it starts each one on the
executor, turns how it ended into a settlement for the completer, counts the
outcomes, extends their leases (stopping a job whose lease was lost, flagging one an
operator asked to cancel) and, on a cold stop, returns the running ones to their
queue. The worker (worker.py) holds one and calls it; so does its producer."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from conveyor.backends.contract import Backend
from conveyor.backends.params import Heartbeat, Lease, Settlement
from conveyor.context import JobContext
from conveyor.model.errors import CorruptJob
from conveyor.model.job import AttemptError, Job, JobState
from conveyor.model.version import __version__
from conveyor.observe.logs import bind_job
from conveyor.observe.minute_stats import MinuteRecorder
from conveyor.worker.completer import Completer
from conveyor.worker.config import WorkerConfig
from conveyor.worker.executor import JobExecutor
from conveyor.worker.handler_call import INTERRUPTS

if TYPE_CHECKING:
    from conveyor.worker.app_protocol import WorkerApp

log = logging.getLogger("conveyor.worker")
RECANCEL_AFTER = 1.0  # seconds a cold-stopped job has to end before it is cancelled again


def corrupt_outcome(job: Job, now: float, worker_id: str, app_version: str = "") -> Settlement:
    """Dead at once, with a CorruptJob error naming the fields that could not be read."""
    error = AttemptError(
        attempt=job.attempt,
        at=now,
        type=CorruptJob.__name__,
        message=f"the stored job cannot be read: {job.corrupt}"[:4000],
        worker_id=worker_id,
        host=socket.gethostname(),
        version=__version__,
        app_version=app_version,
    )
    return Settlement(job.id, job.lease_token, JobState.DEAD, error=error)


@dataclass
class RunningJob:
    job: Job
    ctx: JobContext
    task: asyncio.Task[None]
    # Set before the worker cancels the task to return the job (a cold stop): the
    # one cancel that gives the attempt back. See _interrupted.
    returning: bool = False


class InFlightJobs:
    """The worker's jobs in flight and what it does to them (see the module docstring)."""

    def __init__(
        self,
        app: WorkerApp,
        config: WorkerConfig,
        worker_id: str,
        executor: JobExecutor,
        counts: Counter[str],
        minute_stats: MinuteRecorder,
    ) -> None:
        self.app = app
        self.config = config
        self.id = worker_id
        self.executor = executor
        self.counts = counts  # outcome state -> jobs, the worker's
        self.minute_stats = minute_stats
        self.running: dict[str, RunningJob] = {}
        self.unsettled: dict[str, Lease] = {}  # claimed and not yet written back
        self.slot_freed = asyncio.Event()
        self.key_slot_freed = asyncio.Event()  # a keyed job's outcome was written (on_settled)
        self._keyed_settling: set[str] = set()
        self.backend: Backend | None = None
        self.completer: Completer | None = None

    def open(self, backend: Backend) -> Completer:
        """Start holding jobs of `backend`: the completer that writes their outcomes."""
        self.backend = backend
        self.completer = Completer(backend, self.on_settled)
        return self.completer

    def __len__(self) -> int:
        return len(self.running)

    def running_by_queue(self) -> Counter[str]:
        """What holds this worker's slots: weighted claims share slots, not claims."""
        return Counter(r.job.queue for r in self.running.values())

    async def return_running(self) -> None:
        """Cancel the running jobs (they go back to their queue) and wait until each has
        ended. A cancel can be lost (see conveyor.plugins.every): a handler awaiting
        redis-py 8 on Python 3.11, whose sends go through asyncio.wait_for, lost most of
        them and ran on as if never asked. So a job still running a moment later is
        cancelled again, until it ends; a handler's own clean-up on cancel gets that
        moment."""
        while True:
            running = [r for r in self.running.values() if not r.task.done()]
            if not running:
                return
            for r in running:
                r.returning = True
                r.task.cancel()
            await asyncio.wait([r.task for r in running], timeout=RECANCEL_AFTER)

    def start(self, job: Job) -> None:
        assert self.backend is not None
        if job.corrupt is not None:
            self._settle_corrupt(job)
            return
        ctx = JobContext(
            job,
            self.backend,
            asyncio.get_running_loop(),
            self.id,
            retention=self.config.dead_retention,
        )
        self.unsettled[job.id] = ctx.lease
        task = asyncio.create_task(self._run_one(job, ctx), name=f"job:{job.id}")
        self.running[job.id] = RunningJob(job, ctx, task)

    async def _run_one(self, job: Job, ctx: JobContext) -> None:
        bind_job(job)  # this task's log lines name the job (conveyor.observe.logs)
        settlement: Settlement | None
        started = time.monotonic()
        try:
            settlement = await self.executor.run(job, ctx)
            self.minute_stats.observe(job, settlement, time.monotonic() - started, self.app.clock())
            if ctx.completed_in_transaction:  # already written, with the handler's own work
                settlement = None
                self.counts[JobState.COMPLETED.value] += 1
        except INTERRUPTS as exc:
            settlement = self._interrupted(job, ctx, exc)
        finally:
            self.running.pop(job.id, None)
            self.slot_freed.set()
        if settlement is None:
            self.unsettled.pop(job.id, None)
            return
        if settlement.error is not None:
            log.warning(
                "job %s %s attempt %d/%d failed: %s: %s -> %s",
                job.id,
                job.task,
                job.attempt,
                job.max_attempts,
                settlement.error.type,
                settlement.error.message,
                settlement.state.value,
            )
        assert self.completer is not None
        if job.concurrency_key is not None:
            self._keyed_settling.add(job.id)
        self.completer.add(settlement)

    def _interrupted(self, job: Job, ctx: JobContext, exc: BaseException) -> Settlement | None:
        """The settlement of an attempt stopped by a cancel (or ShutdownCancel) that
        reached the worker. Only the worker's own reasons spare the attempt: it lost
        the lease (write nothing: another attempt owns the job), or it is returning
        the job (a cold stop: back to its queue, attempt refunded). Anything else,
        say a handler that cancelled its own task, fails the attempt like any other
        error; refunding it would claim the job again at once, forever."""
        running = self.running.get(job.id)
        if ctx.lease_lost:
            return None
        if running is not None and running.returning:
            return Settlement(job.id, job.lease_token, JobState.AVAILABLE, refund_attempt=True)
        return self.executor.failed_outside_the_handler(job, exc)

    def _settle_corrupt(self, job: Job) -> None:
        """A job the backend could not read in full is never run: it ends dead at once,
        fenced by its lease like any outcome, while the rest of its batch runs."""
        assert self.completer is not None
        log.error(
            "job %s (%s) cannot be read, so it is not run and ends dead: %s",
            job.id,
            job.task,
            job.corrupt,
        )
        self.unsettled[job.id] = Lease(job.id, job.lease_token)
        self.completer.add(corrupt_outcome(job, self.app.clock(), self.id, self.app.version))

    def on_settled(self, batch: list[Settlement], stale: list[str]) -> None:
        stale_ids = set(stale)
        for s in batch:
            self.unsettled.pop(s.job_id, None)
            if s.job_id in self._keyed_settling:
                # Its key's next job may just have been given the slot: claim it now,
                # without waiting for a poll (SQLite and PostgreSQL send no wake-up
                # for a key's slot; memory and Redis do).
                self._keyed_settling.discard(s.job_id)
                self.key_slot_freed.set()
            if s.job_id in stale_ids:
                self.counts["stale"] += 1
                log.warning(
                    "job %s: outcome %s rejected, lease token %d is stale "
                    "(a newer attempt owns the job)",
                    s.job_id,
                    s.state.value,
                    s.token,
                )
            else:
                self.counts[s.state.value] += 1

    async def heartbeat(self) -> None:
        if not self.config.heartbeats or not self.unsettled or self.backend is None:
            return
        reply = await self.backend.heartbeat_jobs(
            Heartbeat(leases=list(self.unsettled.values()), lease_seconds=self.config.lease)
        )
        for job_id in reply.lost:
            running = self.running.get(job_id)
            self.unsettled.pop(job_id, None)
            if running is None:
                # The handler is done and its outcome is being written; a heartbeat
                # that crossed that write sees the lease gone. A lease that really was
                # lost shows up as a stale outcome, logged in on_settled.
                continue
            if running.ctx.completed_in_transaction:
                continue  # not lost: completed in the handler's transaction, still returning
            log.warning("job %s: lease lost (another attempt owns it); stopping it", job_id)
            running.ctx.lease_lost = True
            running.task.cancel()
        for job_id in reply.cancel_requested:
            running = self.running.get(job_id)
            if running is not None:
                running.ctx.cancel_requested = True
