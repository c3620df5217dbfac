"""One queue as operators see it (docs/flow-control.md, Operations): how the live
workers claim it, what the loaded app declares for it, and its counts. `conveyor
queues` and the dashboard's queue pages show this; both read it here.

The weights come from the workers' own records (each announces its queues and
weights, conveyor.worker.presence), so they are what runs now, whatever the app
loaded here says. The limits are the loaded app's declarations: what its
producers and workers apply, when they import the same module.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from conveyor.backends.filtering import WAITING_STATES
from conveyor.backends.params import FlowLoads, FlowQuery, QueueStats
from conveyor.model.job import JobState
from conveyor.rules.queues import QueueSettings
from conveyor.rules.rate_limits import describe

if TYPE_CHECKING:
    from conveyor.app import Conveyor
    from conveyor.model.workers import WorkerInfo


@dataclass(frozen=True, slots=True)
class ClaimedBy:
    """Live workers that claim a queue the same way: `how` is its weight ("6"), or
    its place in a strict order ("strict #1": claimed first)."""

    how: str
    workers: int

    def __str__(self) -> str:
        return f"{self.how} ({self.workers} worker{'' if self.workers == 1 else 's'})"


@dataclass(frozen=True, slots=True)
class QueueOverview:
    name: str
    stats: QueueStats
    claimed_by: tuple[ClaimedBy, ...] = ()
    settings: QueueSettings | None = None  # None: the loaded app declares nothing for it

    @property
    def waiting(self) -> int:
        return sum(self.stats.counts.get(s, 0) for s in WAITING_STATES)

    @property
    def available(self) -> int:
        return self.stats.counts.get(JobState.AVAILABLE, 0)

    @property
    def limits(self) -> list[str]:
        """The declared limits, each as a short phrase ("rate limit 10/m, burst 10")."""
        s = self.settings
        if s is None:
            return []
        out = [] if s.rate_limit is None else [f"rate limit {describe(s.rate_limit)}"]
        if s.max_waiting is not None:
            out.append(
                f"max_waiting {s.max_waiting:,} ({s.on_full}"
                + (f", up to {s.block_timeout:g}s)" if s.on_full == "block" else ")")
            )
        if s.aging is not None:
            out.append(f"aging: a priority level per {s.aging:g}s waited")
        return out

    def as_json(self) -> dict[str, object]:
        return {
            "queue": self.name,
            "paused": self.stats.paused,
            "claimed_by": [{"how": c.how, "workers": c.workers} for c in self.claimed_by],
            "limits": self.limits,
            "waiting": self.waiting,
            "available": self.available,
            "throttled": self.stats.throttled,
            "held_by_key": self.stats.held_by_key,
            "running": self.stats.in_flight,
            "shed": self.stats.shed,
        }


def claims_by_queue(workers: Iterable[WorkerInfo]) -> dict[str, tuple[ClaimedBy, ...]]:
    """How the live workers (not those draining) claim each queue, most workers first."""
    counted: dict[str, dict[str, int]] = {}
    for worker in workers:
        if worker.stopping:
            continue
        for place, queue in enumerate(worker.queues):
            how = (
                f"strict #{place + 1}"
                if worker.queue_weights is None
                else f"{worker.queue_weights[place]:g}"
            )
            ways = counted.setdefault(queue, {})
            ways[how] = ways.get(how, 0) + 1
    return {
        queue: tuple(
            ClaimedBy(how, n)
            for how, n in sorted(ways.items(), key=lambda item: (-item[1], item[0]))
        )
        for queue, ways in counted.items()
    }


def overviews(
    stats: Sequence[QueueStats], workers: Sequence[WorkerInfo], declared: Iterable[QueueSettings]
) -> list[QueueOverview]:
    """Every queue that has jobs or a pause flag, is declared, or is worked, by name."""
    by_name = {s.queue: s for s in stats}
    settings = {s.name: s for s in declared}
    claims = claims_by_queue(workers)
    return [
        QueueOverview(
            name, by_name.get(name) or QueueStats(name), claims.get(name, ()), settings.get(name)
        )
        for name in sorted(set(by_name) | set(settings) | set(claims))
    ]


async def queue_overviews(app: Conveyor) -> list[QueueOverview]:
    return overviews(await app.admin.stats(), await app.admin.workers(), app.queues)


async def queue_overview(
    app: Conveyor, name: str, top: int = 10
) -> tuple[QueueOverview, FlowLoads] | None:
    """One queue and its flow loads (the top `top` keys), or None if no job, pause,
    declaration or live worker names it."""
    found = [q for q in await queue_overviews(app) if q.name == name]
    if not found:
        return None
    return found[0], await (await app.backend()).flow_loads(FlowQuery(queue=name, top=top))
