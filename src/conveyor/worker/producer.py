"""The producer: the worker's claim loop. It claims jobs into the free slots of the
jobs in flight (conveyor.worker.in_flight), as the queue plan shares them out by weight,
spending the buckets the plugins add to each claim (conveyor.plugins: the breakers'),
waits while idle for a wake-up, a poll, a plugin's change or a key's freed slot, and
stops claiming at a job budget, a retirement reason or the end of a burst."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Literal

from conveyor.backends.claiming import QueuePlan
from conveyor.backends.params import ClaimedJobs, JobWait
from conveyor.model.clock import Clock
from conveyor.plugins import WorkerPlugin, overriding
from conveyor.rules.rate_limits import RateLimit
from conveyor.worker.config import WorkerConfig
from conveyor.worker.in_flight import InFlightJobs

log = logging.getLogger("conveyor.worker")
TOKEN_WAIT_MIN = 0.005  # seconds: the shortest wait for a rate limit's next token


class Producer:
    """Claims jobs into `held` from `start()` until `stop_claiming` is set (by the
    worker, or by itself: max_jobs, `retire_when`, a burst over); `stop()` waits for
    the loop to end.

    `claims_allowed` gates each claim (the worker's presence clears it while its
    liveness signal is lost)."""

    def __init__(
        self,
        worker_id: str,
        config: WorkerConfig,
        held: InFlightJobs,
        plugins: Sequence[WorkerPlugin],
        clock: Clock,
        stop_claiming: asyncio.Event,
        claims_allowed: asyncio.Event,
        retire_when: Callable[[], str | None] | None = None,
    ) -> None:
        self.id = worker_id
        self.config = config
        self.held = held
        self.clock = clock
        self.stop_claiming = stop_claiming
        self.claims_allowed = claims_allowed
        # Asked before every claim; a reason (say, memory over a limit) makes the worker
        # stop claiming and drain, as a pool child does to be replaced.
        self.retire_when = retire_when
        self.retired_because: str | None = None
        self.claimed = 0
        self.queue_plan = QueuePlan(config.queues, config.queue_weights, slots=config.concurrency)
        self._on_claim = overriding(plugins, "on_claim")
        self._wakeups = [e for p in plugins if (e := p.claim_wakeup()) is not None]
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="producer")

    async def stop(self) -> None:
        """Wait for the loop to end (the worker set `stop_claiming`); cancel it if the
        waiting is cancelled."""
        if self._task is None:
            return
        try:
            await self._task
        finally:
            if not self._task.done():
                self._task.cancel()

    def cancel(self) -> asyncio.Task[None] | None:
        if self._task is not None:
            self._task.cancel()
        return self._task

    def _stop(self, reason: str) -> None:
        self.retired_because = reason
        self.stop_claiming.set()

    def _claim_limits(self) -> tuple[RateLimit, ...]:
        if len(self._on_claim) == 1:
            return tuple(self._on_claim[0].on_claim())
        return tuple(limit for p in self._on_claim for limit in p.on_claim())

    async def run(self) -> None:
        held, config = self.held, self.config
        assert held.backend is not None
        backend = held.backend
        failures = 0
        idle_checked = False  # burst: the last claim followed a flush with nothing running
        stop = asyncio.create_task(self.stop_claiming.wait())
        try:
            while not self.stop_claiming.is_set():
                if not self.claims_allowed.is_set():
                    allowed = asyncio.create_task(self.claims_allowed.wait())
                    await asyncio.wait([stop, allowed], return_when=asyncio.FIRST_COMPLETED)
                    allowed.cancel()
                    continue
                free = config.concurrency - len(held)
                if free <= 0:
                    held.slot_freed.clear()
                    await _until(stop, held.slot_freed.wait())
                    continue
                # Never before the first job: a limit below a fresh process's own size
                # would otherwise replace children that never ran anything, forever.
                reason = (
                    self.retire_when() if self.retire_when is not None and self.claimed else None
                )
                if reason is not None:
                    log.info("%s: draining", reason)
                    self._stop(reason)
                    break
                want = min(free, config.fetch_batch)
                if config.max_jobs is not None:
                    want = min(want, config.max_jobs - self.claimed)
                # (on_claim clears each plugin's change: one from now on makes the
                # idle wait short)
                limits = self._claim_limits()
                held.key_slot_freed.clear()  # a keyed settle during the claim is kept
                try:
                    jobs = await backend.fetch_jobs(
                        self.queue_plan.request(
                            want, self.id, config.lease, held.running_by_queue(), limits
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
                    held.start(job)
                self.claimed += len(jobs)
                if config.max_jobs is not None and self.claimed >= config.max_jobs:
                    log.info("claimed %d jobs (max_jobs): draining", self.claimed)
                    self._stop("max tasks")
                    break
                if len(jobs) < want and config.burst:
                    # Nothing more is due now. Running jobs may make more due (a retry
                    # at once, a follow-up they enqueue), and so may outcomes not yet
                    # written: the burst is over when a claim made after every outcome
                    # was written, with nothing running, finds nothing.
                    if jobs or held.running:
                        idle_checked = False
                        if held.running:
                            held.slot_freed.clear()
                            await _until(stop, held.slot_freed.wait())
                        continue
                    if idle_checked:
                        log.info("burst: nothing more is due; stopping")
                        self._stop("burst over")
                        break
                    assert held.completer is not None
                    await _until(stop, held.completer.flushed())
                    idle_checked = True
                    continue
                if len(jobs) < want:
                    waiter = asyncio.create_task(
                        backend.wait_for_jobs(
                            JobWait(queues=config.queues, timeout=self._idle_wait(jobs))
                        )
                    )
                    # A plugin's change (a breaker turning half-open or closed) has work
                    # for this claim, and so has a key's slot passed on by a settle.
                    waits = [asyncio.create_task(e.wait()) for e in self._wakeups]
                    freed = asyncio.create_task(held.key_slot_freed.wait())
                    await asyncio.wait(
                        [stop, waiter, *waits, freed], return_when=asyncio.FIRST_COMPLETED
                    )
                    for pending in (waiter, *waits, freed):
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
        return min(self.config.poll_interval, max(TOKEN_WAIT_MIN, due - self.clock()))


async def _until(stop: asyncio.Task[Literal[True]], waiting: Coroutine[Any, Any, Any]) -> None:
    """Wait for `waiting` or for the stop, whichever comes first."""
    waiter = asyncio.ensure_future(waiting)
    await asyncio.wait([stop, waiter], return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
