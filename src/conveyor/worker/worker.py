"""The asyncio worker, composed of small services: producer (claims jobs into
free slots), executor (runs one job), completer (batched outcome writes),
heartbeater (extends leases), rescuer (returns expired leases), presence (its
record, its liveness signal, and the watch that returns the jobs of workers whose
signal is gone; see presence.py) and pruner (retention), and the scheduler
(periodic schedules; see conveyor.scheduling). Any number of workers may share
one backend."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Literal

from conveyor.backends.claiming import QueuePlan
from conveyor.backends.contract import Backend
from conveyor.backends.params import ClaimedJobs, JobWait, Lease, RecordWrite, Retention
from conveyor.downstreams.breaker_view import REFRESH_INTERVAL
from conveyor.downstreams.retry_ledger import SYNC_INTERVAL
from conveyor.model.job import Job
from conveyor.model.version import __version__
from conveyor.observe.minute_stats import RECORD_TTL, STATS_NAMESPACE, MinuteRecorder
from conveyor.scheduling.scheduler import Scheduler
from conveyor.worker.completer import Completer
from conveyor.worker.config import WorkerConfig
from conveyor.worker.executor import JobExecutor
from conveyor.worker.held_jobs import HeldJobs, RunningJob
from conveyor.worker.presence import Presence
from conveyor.worker.rescue import rescue_expired
from conveyor.worker.thread_bridge import ThreadBridge
from conveyor.worker.unlimited_calls import unlimited_callers

if TYPE_CHECKING:
    from conveyor.worker.app_protocol import WorkerApp

log = logging.getLogger("conveyor.worker")
TOKEN_WAIT_MIN = 0.005  # seconds: the shortest wait for a rate limit's next token


class ExitStatus(IntEnum):
    DRAINED = 0  # stopped claiming and every started job finished
    ERROR = 1
    COLD = 3  # grace period over or second signal: running jobs were returned


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Worker(HeldJobs):
    """Run jobs from `config.queues` until stopped.

    >>> status = await Worker(app, WorkerConfig(queues=("default",), concurrency=20)).run()
    """

    def __init__(
        self,
        app: WorkerApp,
        config: WorkerConfig = WorkerConfig(),
        worker_id: str | None = None,
        retire_when: Callable[[], str | None] | None = None,
    ) -> None:
        self.app = app
        self.config = config
        # A pool supervisor names its children, so that it can find a dead child's jobs.
        self.id = worker_id or new_worker_id()
        self.claimed = 0
        # Asked before every claim; a reason (say, memory over a limit) makes the worker
        # stop claiming and drain, as a pool child does to be replaced.
        self.retire_when = retire_when
        self.retired_because: str | None = None
        self.counts: Counter[str] = Counter()  # outcome state -> jobs, for summaries
        self._running: dict[str, RunningJob] = {}
        self._unsettled: dict[str, Lease] = {}  # claimed and not yet written back
        self._stop_claiming = asyncio.Event()
        self._cold = asyncio.Event()
        self._closing = asyncio.Event()  # run() is ending: the maintenance loops stop
        self._slot_freed = asyncio.Event()
        self._key_slot_freed = asyncio.Event()
        self._keyed_settling: set[str] = set()
        self._threads = ThreadBridge(config.thread_pool_size or config.concurrency)
        self._backend: Backend | None = None
        self._started_at = app.clock()
        # Its record in `workers` and its liveness signal (presence.py).
        self._presence = Presence(self.id, config, app.clock, self._closing, self._record)
        self._completer: Completer | None = None
        self._executor = JobExecutor(app, self.id, self._threads)
        self.minute_stats = MinuteRecorder(self.id)  # throughput for dashboards
        self._executor.on_runaway = self._on_runaway
        self._queue_plan = QueuePlan(config.queues, config.queue_weights, slots=config.concurrency)

    # --- control -----------------------------------------------------------------
    def stop(self) -> None:
        """First call: stop claiming and drain. Second call: cold stop."""
        if self._stop_claiming.is_set():
            if not self._cold.is_set():
                log.warning("second stop request: returning %d running jobs", len(self._running))
            self._cold.set()
        else:
            log.info(
                "stop requested: draining %d running jobs (grace %.0fs)",
                len(self._running),
                self.config.grace_period,
            )
            self._stop_claiming.set()

    @property
    def in_flight(self) -> int:
        return len(self._running)

    @property
    def stopping(self) -> bool:
        """True once the worker stopped claiming (asked to, or its job budget is spent)."""
        return self._stop_claiming.is_set()

    def _on_runaway(self, job: Job) -> None:
        self.counts["runaway"] += 1
        if self.config.stop_on_runaway:
            log.error(
                "job %s (%s): handler ignored its hard time limit; returning the "
                "other jobs and stopping so that this process can be replaced",
                job.id,
                job.task,
            )
            self.stop()
            self.stop()
        else:
            log.error(
                "job %s (%s): handler ignored its hard time limit; it keeps running "
                "until it returns (run with -p to have it stopped)",
                job.id,
                job.task,
            )

    # --- main --------------------------------------------------------------------------
    async def run(self) -> ExitStatus:
        # Built before anything starts: a bad schedule stops the worker at start-up.
        # A burst run ends when nothing is due: the schedules need a process that stays.
        scheduler = Scheduler(self.app) if self.config.scheduler and not self.config.burst else None
        self._backend = backend = await self.app.backend()
        self._completer = Completer(backend, self._on_settled)
        await self._presence.start(backend)  # the liveness signal, before the first claim
        if len(self.app.breakers):  # the first claim already knows which breakers are open
            try:
                await self._refresh_breakers()
            except Exception as exc:
                log.warning("reading the circuit breakers failed (%s); retrying in 1s", exc)
        log.info(
            "worker %s started: queues=%s concurrency=%d",
            self.id,
            self._queue_plan.spec,
            self.config.concurrency,
        )
        for warning in unlimited_callers(
            self.app.tasks.values(), self.app.rate_limits, self.config.concurrency
        ):
            log.warning(warning)
        services = [
            asyncio.create_task(self._completer.run(), name="completer"),
            asyncio.create_task(
                self._every(self.config.heartbeat_every, self._heartbeat), name="heartbeat"
            ),
            asyncio.create_task(self._presence.keep_announced(), name="announce"),
            asyncio.create_task(
                self._every(self.config.rescue_interval, self._rescue, first=0.0), name="rescue"
            ),
            asyncio.create_task(self._every(self.config.prune_interval, self._prune), name="prune"),
            asyncio.create_task(
                self._every(self.config.stats_interval, self._write_stats), name="stats"
            ),
        ]
        if self._presence.liveness is not None:
            services.append(asyncio.create_task(self._presence.watch(), name="liveness"))
        if any(task.defaults.retry.budget is not None for task in self.app.tasks.values()):
            services.append(
                asyncio.create_task(
                    self._every(SYNC_INTERVAL, self._sync_retry_budgets), name="retry-budgets"
                )
            )
        if len(self.app.breakers):
            services.append(
                asyncio.create_task(
                    self._every(REFRESH_INTERVAL, self._refresh_breakers), name="breakers"
                )
            )
        adaptive = [
            t.defaults.concurrency.adaptive
            for t in self.app.tasks.values()
            if t.defaults.concurrency is not None and t.defaults.concurrency.adaptive
        ]
        if adaptive:
            controller = self._executor.adaptive
            services.append(
                asyncio.create_task(
                    controller.run(
                        backend, self.app.clock, controller.sync_interval(adaptive), self._closing
                    ),
                    name="adaptive-limits",
                )
            )
        if scheduler is not None and scheduler.schedules:
            services.append(
                asyncio.create_task(scheduler.run(self._stop_claiming), name="scheduler")
            )
        producer = asyncio.create_task(self._produce(), name="producer")
        try:
            await self._stop_claiming.wait()
            await producer
            status = await self._drain()
            self._completer.close()
            await services[0]
        finally:
            # Set before the cancels, which can be lost (see _every): the loops end anyway.
            self._closing.set()
            for service in [producer, *services]:
                service.cancel()
            await asyncio.gather(producer, *services, return_exceptions=True)
            self._threads.shutdown()
            try:
                await self._write_stats()
            except Exception:
                pass
            await self._presence.leave()  # last: every outcome is written
        log.info("worker %s stopped (%s): %s", self.id, status.name.lower(), dict(self.counts))
        return status

    async def _drain(self) -> ExitStatus:
        status = ExitStatus.DRAINED
        if self._running:
            finished: asyncio.Future[object] = asyncio.ensure_future(
                asyncio.gather(*(r.task for r in self._running.values()), return_exceptions=True)
            )
            cold: asyncio.Future[object] = asyncio.ensure_future(self._cold.wait())
            await asyncio.wait(
                [finished, cold],
                timeout=self.config.grace_period,
                return_when=asyncio.FIRST_COMPLETED,
            )
            cold.cancel()
            if self._running:
                status = ExitStatus.COLD
                self._cold.set()
                await self._return_running()
        assert self._completer is not None
        await self._completer.flushed()
        return status

    # --- producer ------------------------------------------------------------------
    async def _produce(self) -> None:
        assert self._backend is not None
        failures = 0
        idle_checked = False  # burst: the last claim followed a flush with nothing running
        stop = asyncio.create_task(self._stop_claiming.wait())
        try:
            while not self._stop_claiming.is_set():
                if not self._presence.claims_allowed.is_set():
                    allowed = asyncio.create_task(self._presence.claims_allowed.wait())
                    await asyncio.wait([stop, allowed], return_when=asyncio.FIRST_COMPLETED)
                    allowed.cancel()
                    continue
                free = self.config.concurrency - len(self._running)
                if free <= 0:
                    self._slot_freed.clear()
                    await self._until(stop, self._slot_freed.wait())
                    continue
                # Never before the first job: a limit below a fresh process's own size
                # would otherwise replace children that never ran anything, forever.
                reason = (
                    self.retire_when() if self.retire_when is not None and self.claimed else None
                )
                if reason is not None:
                    log.info("%s: draining", reason)
                    self.retired_because = reason
                    self._stop_claiming.set()
                    break
                want = min(free, self.config.fetch_batch)
                if self.config.max_jobs is not None:
                    want = min(want, self.config.max_jobs - self.claimed)
                breakers = self._executor.breaker_view
                breakers.changed.clear()  # a change from now on makes the idle wait short
                self._key_slot_freed.clear()  # a keyed settle during the claim is kept
                try:
                    jobs = await self._backend.fetch_jobs(
                        self._queue_plan.request(
                            want,
                            self.id,
                            self.config.lease,
                            self._running_by_queue(),
                            breakers.claim_limits(),
                        )
                    )
                    failures = 0
                except Exception as exc:
                    failures += 1
                    delay = min(0.1 * 2**failures, 10.0)
                    log.warning("claiming jobs failed (%s); retrying in %.1fs", exc, delay)
                    await asyncio.wait([stop], timeout=delay)
                    continue
                for job in jobs:
                    self._start(job)
                self.claimed += len(jobs)
                if self.config.max_jobs is not None and self.claimed >= self.config.max_jobs:
                    log.info("claimed %d jobs (max_jobs): draining", self.claimed)
                    self.retired_because = "max tasks"
                    self._stop_claiming.set()
                    break
                if len(jobs) < want and self.config.burst:
                    # Nothing more is due now. Running jobs may make more due (a retry
                    # at once, a follow-up they enqueue), and so may outcomes not yet
                    # written: the burst is over when a claim made after every outcome
                    # was written, with nothing running, finds nothing.
                    if jobs or self._running:
                        idle_checked = False
                        if self._running:
                            self._slot_freed.clear()
                            await self._until(stop, self._slot_freed.wait())
                        continue
                    if idle_checked:
                        log.info("burst: nothing more is due; stopping")
                        self.retired_because = "burst over"
                        self._stop_claiming.set()
                        break
                    assert self._completer is not None
                    await self._until(stop, self._completer.flushed())
                    idle_checked = True
                    continue
                if len(jobs) < want:
                    waiter = asyncio.create_task(
                        self._backend.wait_for_jobs(
                            JobWait(queues=self.config.queues, timeout=self._idle_wait(jobs))
                        )
                    )
                    # A breaker turning half-open or closed has work for this claim,
                    # and so has a key's slot passed on by a settle.
                    changed = asyncio.create_task(breakers.changed.wait())
                    freed = asyncio.create_task(self._key_slot_freed.wait())
                    await asyncio.wait(
                        [stop, waiter, changed, freed], return_when=asyncio.FIRST_COMPLETED
                    )
                    for pending in (waiter, changed, freed):
                        if not pending.done():
                            pending.cancel()
        finally:
            stop.cancel()

    def _idle_wait(self, jobs: ClaimedJobs) -> float:
        """How long to wait for a wake-up after a short claim: the poll interval, or
        less when a rate limit held jobs back and its next token is due sooner (then
        the claim that follows gets it; the worker does not poll in between). Never
        under TOKEN_WAIT_MIN: at high rates a claim takes the tokens of that time."""
        due = jobs.next_token_at
        if due is None:
            return self.config.poll_interval
        return min(self.config.poll_interval, max(TOKEN_WAIT_MIN, due - self.app.clock()))

    def _running_by_queue(self) -> Counter[str]:
        """What holds this worker's slots: weighted claims share slots, not claims."""
        return Counter(r.job.queue for r in self._running.values())

    @staticmethod
    async def _until(stop: asyncio.Task[Literal[True]], waiting: Coroutine[Any, Any, Any]) -> None:
        """Wait for `waiting` or for the stop, whichever comes first."""
        waiter = asyncio.ensure_future(waiting)
        await asyncio.wait([stop, waiter], return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()

    # --- maintenance services ---------------------------------------------------------
    async def _every(
        self, interval: float, action: Callable[[], Awaitable[None]], first: float | None = None
    ) -> None:
        """Run `action` every `interval` seconds until the worker closes.

        The loop ends when `_closing` is set, not only when cancelled, because a cancel
        can be lost: on Python 3.11, asyncio.wait_for returns its result instead of
        raising when the cancel lands just as what it awaits completes, and
        psycopg_pool's getconn waits with it. A pool child told to drain while it was
        still starting had its first rescue pass cancelled right as the pool handed
        over its first connection; the pass returned normally, the loop slept and ran
        again, and run() waited on it forever (the pool never exited).
        """
        delay = interval if first is None else first
        while not await self._closed_within(delay):
            try:
                await action()
            except Exception as exc:
                log.warning("%s failed: %s", getattr(action, "__name__", action), exc)
            delay = interval

    async def _closed_within(self, seconds: float) -> bool:
        """Wait up to `seconds`, less if the worker closes; True once it has."""
        try:
            async with asyncio.timeout(seconds):
                await self._closing.wait()
        except TimeoutError:
            pass
        return self._closing.is_set()

    def _record(self) -> dict[str, object]:
        """This worker as `conveyor workers` and the dashboard show it (the presence
        adds its liveness token)."""
        return {
            "id": self.id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": list(self.config.queues),
            "concurrency": self.config.concurrency,
            # None: strict order. What `conveyor queues` shows each queue claimed with.
            "queue_weights": None
            if self.config.queue_weights is None
            else list(self.config.queue_weights),
            "in_flight": len(self._running),
            "started_at": self._started_at,
            "last_heartbeat": self.app.clock(),
            "version": __version__,
            "stopping": self._stop_claiming.is_set(),
        }

    async def _write_stats(self) -> None:
        assert self._backend is not None
        records = self.minute_stats.take_dirty(self.app.clock())
        try:
            for key, value in records:
                await self._backend.put_record(
                    RecordWrite(namespace=STATS_NAMESPACE, key=key, value=value, ttl=RECORD_TTL)
                )
        except BaseException:
            self.minute_stats.restore_dirty(records)
            raise

    async def _sync_retry_budgets(self) -> None:
        assert self._backend is not None
        await self._executor.retry_ledger.sync(self._backend, self.app.clock())

    async def _refresh_breakers(self) -> None:
        assert self._backend is not None
        await self._executor.breaker_view.refresh(self._backend, self.app.clock())

    async def _rescue(self) -> None:
        assert self._backend is not None
        rescued = await rescue_expired(self._backend, self.app.clock())
        if rescued:
            log.warning("rescued %d jobs whose lease expired: %s", len(rescued), rescued[:10])

    async def _prune(self) -> None:
        assert self._backend is not None
        now = self.app.clock()
        pruned = await self._backend.prune_jobs(
            Retention(
                completed_before=now - self.config.completed_retention,
                dead_before=now - self.config.dead_retention,
            )
        )
        if pruned:
            log.info("pruned %d finished jobs past retention", pruned)
        expired = await self.app.claim_check.expire_results(self._backend, now)
        if expired:
            log.info("cleared %d results past their result_ttl", expired)
        swept = await self.app.claim_check.sweep_orphans(self._backend, now)
        if swept:
            log.info("deleted %d blobs whose job is gone", swept)
