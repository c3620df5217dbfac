"""The asyncio worker, composed of small services: producer (claims jobs into
free slots; producer.py), the held jobs (starts each on the executor, heartbeats
their leases; in_flight.py), executor (runs one job), completer (batched outcome
writes), rescuer (returns expired leases), presence (its record, its liveness signal,
and the watch that returns the jobs of workers whose signal is gone; see presence.py)
and pruner (retention), the scheduler (periodic schedules; see conveyor.scheduling),
and the features as plug-ins (conveyor.plugins; the list: plugins.py). Any number of
workers may share one backend."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from conveyor.backends.contract import Backend
from conveyor.backends.params import RecordWrite, Retention
from conveyor.model.job import Job
from conveyor.model.version import __version__
from conveyor.observe.minute_stats import RECORD_TTL, STATS_NAMESPACE, MinuteRecorder
from conveyor.plugins import WorkerPlugin, every
from conveyor.scheduling.scheduler import Scheduler
from conveyor.worker.config import WorkerConfig
from conveyor.worker.executor import JobExecutor
from conveyor.worker.in_flight import InFlightJobs
from conveyor.worker.plugins import feature_plugins
from conveyor.worker.presence import Presence
from conveyor.worker.producer import Producer
from conveyor.worker.rescue import rescue_expired
from conveyor.worker.thread_bridge import ThreadBridge
from conveyor.worker.unlimited_calls import unlimited_callers

if TYPE_CHECKING:
    from conveyor.worker.app_protocol import WorkerApp

log = logging.getLogger("conveyor.worker")


class ExitStatus(IntEnum):
    DRAINED = 0  # stopped claiming and every started job finished
    ERROR = 1
    COLD = 3  # grace period over or second signal: running jobs were returned


def new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Worker:
    """Run jobs from `config.queues` until stopped.

    >>> status = await Worker(app, WorkerConfig(queues=("default",), concurrency=20)).run()

    `plugins=` adds features to the built-in ones (conveyor.plugins.WorkerPlugin).
    """

    def __init__(
        self,
        app: WorkerApp,
        config: WorkerConfig = WorkerConfig(),
        worker_id: str | None = None,
        retire_when: Callable[[], str | None] | None = None,
        plugins: Sequence[WorkerPlugin] = (),
    ) -> None:
        self.app = app
        self.config = config
        # A pool supervisor names its children, so that it can find a dead child's jobs.
        self.id = worker_id or new_worker_id()
        self.counts: Counter[str] = Counter()  # outcome state -> jobs, for summaries
        self.plugins: list[WorkerPlugin] = [*feature_plugins(app, config), *plugins]
        self._stop_claiming = asyncio.Event()
        self._cold = asyncio.Event()
        self._closing = asyncio.Event()  # run() is ending: the maintenance loops stop
        self._threads = ThreadBridge(config.thread_pool_size or config.concurrency)
        self._backend: Backend | None = None
        self._started_at = app.clock()
        # Its record in `workers` and its liveness signal (presence.py).
        self._presence = Presence(self.id, config, app.clock, self._closing, self._record)
        self._executor = JobExecutor(app, self.id, self._threads, self.plugins)
        self.minute_stats = MinuteRecorder(self.id)  # throughput for dashboards
        self._executor.on_runaway = self._on_runaway
        self.jobs = InFlightJobs(
            app, config, self.id, self._executor, self.counts, self.minute_stats
        )
        self.producer = Producer(
            self.id,
            config,
            self.jobs,
            self.plugins,
            lambda: self.app.clock(),
            self._stop_claiming,
            self._presence.claims_allowed,
            retire_when,
        )

    # --- control -----------------------------------------------------------------
    def stop(self) -> None:
        """First call: stop claiming and drain. Second call: cold stop."""
        if self._stop_claiming.is_set():
            if not self._cold.is_set():
                log.warning("second stop request: returning %d running jobs", len(self.jobs))
            self._cold.set()
        else:
            log.info(
                "stop requested: draining %d running jobs (grace %.0fs)",
                len(self.jobs),
                self.config.grace_period,
            )
            self._stop_claiming.set()

    @property
    def in_flight(self) -> int:
        return len(self.jobs)

    @property
    def stopping(self) -> bool:
        """True once the worker stopped claiming (asked to, or its job budget is spent)."""
        return self._stop_claiming.is_set()

    @property
    def claimed(self) -> int:
        """Jobs claimed so far."""
        return self.producer.claimed

    @property
    def retired_because(self) -> str | None:
        """Why the worker stopped claiming by itself (max tasks, burst over, a retire
        reason), or None."""
        return self.producer.retired_because

    @retired_because.setter
    def retired_because(self, reason: str | None) -> None:
        self.producer.retired_because = reason

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
        completer = self.jobs.open(backend)
        await self._presence.start(backend)  # the liveness signal, before the first claim
        for plugin in self.plugins:
            await plugin.on_start(backend, self.app.clock())
        log.info(
            "worker %s started: queues=%s concurrency=%d",
            self.id,
            self.producer.queue_plan.spec,
            self.config.concurrency,
        )
        for warning in unlimited_callers(
            self.app.tasks.values(), self.app.rate_limits, self.config.concurrency
        ):
            log.warning(warning)
        services = [asyncio.create_task(completer.run(), name="completer")]
        for name, loop in self._services(backend, scheduler):
            services.append(asyncio.create_task(loop, name=name))
        self.producer.start()
        try:
            await self._stop_claiming.wait()
            await self.producer.stop()
            status = await self._drain()
            completer.close()
            await services[0]
        finally:
            # Set before the cancels, which can be lost (see every): the loops end anyway.
            self._closing.set()
            producer = self.producer.cancel()
            for service in services:
                service.cancel()
            await asyncio.gather(*services, return_exceptions=True)
            if producer is not None:
                await asyncio.gather(producer, return_exceptions=True)
            self._threads.shutdown()
            try:
                await self._write_stats()
            except Exception:
                pass
            for plugin in self.plugins:
                try:
                    await plugin.on_stop()
                except Exception as exc:
                    log.warning("%s: stopping failed: %s", plugin.name, exc)
            await self._presence.leave()  # last: every outcome is written
        log.info("worker %s stopped (%s): %s", self.id, status.name.lower(), dict(self.counts))
        return status

    def _services(
        self, backend: Backend, scheduler: Scheduler | None
    ) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        """What runs beside the producer until the worker closes: its own maintenance,
        each plugin's service, the scheduler."""
        config, closing = self.config, self._closing
        services: list[tuple[str, Coroutine[Any, Any, None]]] = [
            ("heartbeat", every(config.heartbeat_every, self.jobs.heartbeat, closing)),
            ("announce", self._presence.keep_announced()),
            ("rescue", every(config.rescue_interval, self._rescue, closing, first=0.0)),
            ("prune", every(config.prune_interval, self._prune, closing)),
            ("stats", every(config.stats_interval, self._write_stats, closing)),
        ]
        if self._presence.liveness is not None:
            services.append(("liveness", self._presence.watch()))
        for plugin in self.plugins:
            service = plugin.service(backend, self.app.clock, closing)
            if service is not None:
                services.append((plugin.name, service))
        if scheduler is not None and scheduler.schedules:
            services.append(("scheduler", scheduler.run(self._stop_claiming)))
        return services

    async def _drain(self) -> ExitStatus:
        status = ExitStatus.DRAINED
        running = self.jobs.running
        if running:
            finished: asyncio.Future[object] = asyncio.ensure_future(
                asyncio.gather(*(r.task for r in running.values()), return_exceptions=True)
            )
            cold: asyncio.Future[object] = asyncio.ensure_future(self._cold.wait())
            await asyncio.wait(
                [finished, cold],
                timeout=self.config.grace_period,
                return_when=asyncio.FIRST_COMPLETED,
            )
            cold.cancel()
            if running:
                status = ExitStatus.COLD
                self._cold.set()
                await self.jobs.return_running()
        assert self.jobs.completer is not None
        await self.jobs.completer.flushed()
        return status

    # --- maintenance services ---------------------------------------------------------
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
            "in_flight": len(self.jobs),
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
        swept = await self.app.claim_check.sweep_orphans(self._backend, now)
        if swept:
            log.info("deleted %d blobs whose job is gone", swept)
