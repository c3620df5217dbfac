"""The worker's side of retry budgets (conveyor.rules.retry_budget): counts of first attempts
and of scheduled retries per task and window, shared by every worker.

Counting in the shared store on every attempt would add a round trip per job. So
each worker counts in memory and, once a second (`sync`), adds what it counted to
the shared counters (`incr_record`, one per counter that changed or is in use)
and reads the fleet's totals back from the same calls. A decision uses the last
totals plus this worker's own counts since: it can miss up to one sync interval of
the other workers' retries, so a fleet of W workers may overspend a window by what
W - 1 of them schedule in one second. Tasks without a budget cost a dict lookup.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

from conveyor.backends.contract import SharedRecords
from conveyor.backends.params import RecordIncrement
from conveyor.model.job import Job
from conveyor.rules.retry_budget import RetryBudget

log = logging.getLogger("conveyor.worker")
NAMESPACE = "retry-budget"
SYNC_INTERVAL = 1.0
# A retry is stretched over at most this many windows past its own; beyond that the
# budget is spent so far ahead that waiting longer only hides the outage.
MAX_STRETCH = 10


@dataclass(slots=True)
class _Count:
    fleet: int = 0  # the fleet's total at the last sync, this worker's part included
    pending: int = 0  # counted here since

    @property
    def now(self) -> int:
        return self.fleet + self.pending


@dataclass(slots=True)
class _Window:
    first: _Count
    retries: _Count


class RetryLedger:
    """Per (task, window): first attempts started, retries scheduled to run in it."""

    def __init__(
        self, budget_of: Callable[[str], RetryBudget | None], rng: random.Random | None = None
    ) -> None:
        self._budget_of = budget_of
        self._rng = rng or random.Random()
        self._windows: dict[tuple[str, int], _Window] = {}
        self._spent_logged: set[tuple[str, int]] = set()

    def _window(self, task: str, index: int) -> _Window:
        window = self._windows.get((task, index))
        if window is None:
            window = self._windows[(task, index)] = _Window(_Count(), _Count())
        return window

    def _seen(self, task: str, index: int, kind: str) -> int:
        """A window's count as known here (0 for a window not counted here yet)."""
        window = self._windows.get((task, index))
        if window is None:
            return 0
        return (window.first if kind == "first" else window.retries).now

    def started(self, job: Job, now: float) -> None:
        """An attempt of `job` starts: a first attempt counts towards its budget. Any
        attempt of a budgeted task keeps this window's fleet counts in sync here, so
        the first retry decided in it already knows the other workers' retries."""
        budget = self._budget_of(job.task)
        if budget is not None:
            window = self._window(job.task, budget.window_of(now))
            if job.attempt == 1:
                window.first.pending += 1

    def retry_at(self, job: Job, wanted: float, now: float) -> tuple[float, bool]:
        """When `job`'s retry, wanted at `wanted`, is to run, and whether the budget
        moved it. The retry is counted in the window it lands in."""
        budget = self._budget_of(job.task)
        if budget is None:
            return wanted, False
        current = budget.window_of(now)
        first = max(
            self._seen(job.task, current, "first"), self._seen(job.task, current - 1, "first")
        )
        allowed = budget.allowed(first)
        own = budget.window_of(wanted)
        target = own
        while self._seen(job.task, target, "retries") >= allowed and target < own + MAX_STRETCH:
            target += 1
        self._window(job.task, target).retries.pending += 1
        if target == own:
            return wanted, False
        if (job.task, current) not in self._spent_logged:
            self._spent_logged.add((job.task, current))
            log.warning(
                "retry budget of task %s spent (%d retries allowed per %.0f s "
                "window): its retries are spread over later windows",
                job.task,
                allowed,
                budget.window,
            )
        start = target * budget.window
        return start + self._rng.uniform(0.0, budget.window), True

    async def sync(self, records: SharedRecords, now: float) -> None:
        """Add this worker's counts to the fleet's and read the totals back; forget
        windows that are over."""
        for (task, index), window in list(self._windows.items()):
            budget = self._budget_of(task)
            if budget is None or index < budget.window_of(now) - 1:
                del self._windows[(task, index)]
                self._spent_logged.discard((task, index))
                continue
            # Kept past the window's end, long enough for a late sync to find it.
            ttl = budget.window * (index - budget.window_of(now) + 3)
            for kind, count in (("first", window.first), ("retries", window.retries)):
                amount = count.pending
                count.pending = 0
                try:
                    count.fleet = await records.incr_record(
                        RecordIncrement(
                            namespace=NAMESPACE,
                            key=f"{task}:{index}:{kind}",
                            amount=amount,
                            ttl=ttl,
                        )
                    )
                except BaseException:
                    count.pending += amount  # counted again at the next sync
                    raise
