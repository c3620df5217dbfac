"""The downstream guards as worker plug-ins (conveyor.plugins): circuit breakers,
adaptive concurrency limits and retry budgets. Each wraps the state kept beside it
(breaker_client, adaptive_controller, retry_ledger) and plugs it into the worker's hooks;
`conveyor.worker.plugins` registers them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any

from conveyor.backends.contract import Backend
from conveyor.backends.params import Settlement
from conveyor.downstreams.adaptive_controller import AdaptiveController
from conveyor.downstreams.breaker_client import REFRESH_INTERVAL, BreakerClient
from conveyor.downstreams.retry_ledger import SYNC_INTERVAL, RetryLedger
from conveyor.model.clock import Clock
from conveyor.model.job import Job
from conveyor.plugins import WorkerPlugin
from conveyor.rules.adaptive import Adaptive
from conveyor.rules.breakers import BreakerRegistry, counts_as_failure
from conveyor.rules.rate_limits import RateLimit
from conveyor.rules.retry import RetryPolicy
from conveyor.rules.retry_budget import RetryBudget

log = logging.getLogger("conveyor.worker")


class BreakerPlugin(WorkerPlugin):
    """Circuit breakers: the claim spends each breaker's gated bucket, the view of
    their states is refreshed every REFRESH_INTERVAL (and before the first claim), and
    each attempt of a job behind a breaker reports how it ended."""

    name = "breakers"

    def __init__(
        self, breakers: BreakerRegistry, get_backend: Callable[[], Awaitable[Backend]], clock: Clock
    ) -> None:
        self.breakers = breakers
        self.view = BreakerClient(breakers)
        self._backend = get_backend
        self._clock = clock
        # Jobs behind a breaker whose handler ended -> whether it counts as a failure.
        self._failed: dict[str, bool] = {}

    async def on_start(self, backend: Backend, now: float) -> None:
        if not len(self.breakers):
            return
        try:  # the first claim already knows which breakers are open
            await self.view.refresh(backend, now)
        except Exception as exc:
            log.warning("reading the circuit breakers failed (%s); retrying in 1s", exc)

    def tick_interval(self) -> float | None:
        return REFRESH_INTERVAL if len(self.breakers) else None

    async def tick(self, backend: Backend, now: float) -> None:
        await self.view.refresh(backend, now)

    def on_claim(self) -> Iterable[RateLimit]:
        self.view.changed.clear()  # a change from now on makes the idle wait short
        return self.view.claim_limits()

    def claim_wakeup(self) -> asyncio.Event | None:
        # A breaker turning half-open or closed has work for the next claim.
        return self.view.changed

    def handler_ended(self, job: Job, error: BaseException | None, policy: RetryPolicy) -> None:
        if self.view.breaker_of(job.rate_key) is not None:
            self._failed[job.id] = error is not None and counts_as_failure(error, policy)

    def after_attempt(self, job: Job, settlement: Settlement | None) -> Awaitable[None] | None:
        failed = self._failed.pop(job.id, None)
        if failed is None or settlement is None:  # behind a breaker: a coroutine only then
            return None
        return self._report(job, failed)

    async def _report(self, job: Job, failed: bool) -> None:
        breaker = self.view.breaker_of(job.rate_key)
        if breaker is None:
            return
        try:
            await self.view.report(await self._backend(), breaker, failed, self._clock())
        except Exception as exc:
            log.warning(
                "breaker %s: could not count the outcome of job %s (%s)", breaker.name, job.id, exc
            )


class AdaptivePlugin(WorkerPlugin):
    """Adaptive concurrency limits (conveyor.rules.adaptive): each attempt of an
    adaptive key is counted, a signal keeps its slot until the cut is written, and the
    controller syncs with the fleet beside the worker."""

    name = "adaptive-limits"

    def __init__(
        self,
        rule_of: Callable[[str], Adaptive | None],
        rules: Callable[[], list[Adaptive]],
        clock: Clock,
    ) -> None:
        self.controller = AdaptiveController(rule_of)
        self._rules = rules
        self._clock = clock

    def service(
        self, backend: Backend, clock: Clock, closing: asyncio.Event
    ) -> Coroutine[Any, Any, None] | None:
        rules = self._rules()
        if not rules:
            return None
        interval = self.controller.sync_interval(rules)
        return self.controller.run(backend, clock, interval, closing)

    def before_attempt(self, job: Job, now: float) -> None:
        self.controller.started(job, now)

    def attempt_failed(self, job: Job, error: BaseException) -> None:
        self.controller.failed(job, error)

    def after_attempt(self, job: Job, settlement: Settlement | None) -> Awaitable[None] | None:
        if self.controller.ended(job, settlement, self._clock()):
            # Its slot is kept until the cut is written (signal_written).
            return self.controller.signal_written()
        return None


class RetryBudgetPlugin(WorkerPlugin):
    """Retry budgets (conveyor.rules.retry_budget): a retry past the task's budget is
    moved later, and the ledger syncs the fleet's counts every SYNC_INTERVAL."""

    name = "retry-budgets"

    def __init__(
        self, budget_of: Callable[[str], RetryBudget | None], any_budget: Callable[[], bool]
    ) -> None:
        self.ledger = RetryLedger(budget_of)
        self._any_budget = any_budget

    def tick_interval(self) -> float | None:
        return SYNC_INTERVAL if self._any_budget() else None

    async def tick(self, backend: Backend, now: float) -> None:
        await self.ledger.sync(backend, now)

    def before_attempt(self, job: Job, now: float) -> None:
        self.ledger.started(job, now)

    def retry_at(self, job: Job, wanted: float, now: float) -> tuple[float, bool]:
        return self.ledger.retry_at(job, wanted, now)
