"""Per-queue flow-control settings, declared on the app (`app.queue("bulk", aging=...)`)
and applied to each job as it is enqueued (docs/flow-control.md).

A setting a backend needs after the enqueue (aging orders the job at every later
return to `available`: a retry, a snooze, a rescue, a redrive) is stored with the job,
so the producer's declaration is what counts for that job, whichever worker claims it
and whatever a later deploy declares.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Literal, get_args

from conveyor.model import validation as valid
from conveyor.model.clock import Duration
from conveyor.model.errors import ConfigurationError, InvalidJob
from conveyor.model.job import NewJob, QueueBound
from conveyor.rules.rate_limits import Limit, RateLimit, RateLimitRegistry, queue_key

OnFull = Literal["reject", "block", "shed_oldest"]


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """What an app declared for one queue.

    `aging`: seconds of waiting worth one priority level (None: no aging). A job of
    priority p that has waited w seconds ranks as priority p + w / aging.

    `max_waiting`: most jobs waiting (scheduled, available, retryable; None: no
    bound). When an enqueue finds the queue full, `on_full` says what happens:
    "reject" raises QueueFull at once, "block" offers the job again until there is
    room or `block_timeout` seconds passed (then QueueFull), "shed_oldest" stores it
    and cancels the queue's oldest waiting job, recording why.

    `rate_limit`: the queue's bucket (conveyor.rules.rate_limits), spent by each of its jobs
    that names no bucket of its own (a task's `rate_limit` or `rate_key` wins).
    """

    name: str
    aging: float | None = None
    max_waiting: int | None = None
    on_full: OnFull = "reject"
    block_timeout: float = 30.0
    rate_limit: RateLimit | None = None

    @property
    def bound(self) -> QueueBound | None:
        if self.max_waiting is None:
            return None
        return QueueBound(self.max_waiting, shed_oldest=self.on_full == "shed_oldest")


class QueueSettingsRegistry:
    """The app's declared queues, by name."""

    def __init__(self, rate_limits: RateLimitRegistry | None = None) -> None:
        self._settings: dict[str, QueueSettings] = {}
        self._rate_limits = rate_limits or RateLimitRegistry()
        # What jobs carry (aging, bound, rate key), by queue: looked up per enqueued job.
        self._carried: dict[str, tuple[float | None, QueueBound | None, str | None]] = {}

    def declare(
        self,
        name: str,
        *,
        aging: Duration | None = None,
        max_waiting: int | None = None,
        on_full: OnFull = "reject",
        block_timeout: Duration = 30.0,
        rate_limit: str | Limit | None = None,
    ) -> QueueSettings:
        try:
            if max_waiting is not None and not (
                type(max_waiting) is int and 1 <= max_waiting <= valid.MAX_ATTEMPTS_MAX
            ):
                raise InvalidJob(
                    "max_waiting", max_waiting, f"a whole number from 1 to {valid.MAX_ATTEMPTS_MAX}"
                )
            if on_full not in get_args(OnFull):
                raise InvalidJob("on_full", on_full, " or ".join(map(repr, get_args(OnFull))))
            settings = QueueSettings(
                name=valid.name("queue", name),
                aging=None if aging is None else valid.seconds("aging", aging, positive=True),
                max_waiting=max_waiting,
                on_full=on_full,
                block_timeout=valid.seconds("block_timeout", block_timeout),
            )
        except InvalidJob as exc:
            raise ConfigurationError(f"queue {name!r}: {exc}") from None
        if rate_limit is not None:
            settings = replace(
                settings, rate_limit=self._rate_limits.declare(queue_key(settings.name), rate_limit)
            )
        self._settings[settings.name] = settings
        carried = (
            settings.aging,
            settings.bound,
            None if settings.rate_limit is None else settings.rate_limit.key,
        )
        if carried == (None, None, None):
            self._carried.pop(settings.name, None)
        else:
            self._carried[settings.name] = carried
        return settings

    def get(self, name: str) -> QueueSettings:
        return self._settings.get(name) or QueueSettings(name)

    def __iter__(self) -> Iterator[QueueSettings]:
        return iter(self._settings.values())

    def apply(self, jobs: Iterable[NewJob]) -> list[NewJob]:
        """The jobs with their queue's settings; a job's own `aging`, `bound` or
        `rate_key` wins."""
        if not self._carried:
            return list(jobs)
        out = []
        for job in jobs:
            carried = self._carried.get(job.queue)
            if carried is not None:
                aging, bound, rate_key = carried
                job = replace(
                    job,
                    aging=job.aging if job.aging is not None else aging,
                    bound=job.bound if job.bound is not None else bound,
                    rate_key=job.rate_key if job.rate_key is not None else rate_key,
                )
            out.append(job)
        return out

    def blocks(self, jobs: Iterable[NewJob]) -> bool:
        """Does any job go to a queue whose producers wait for room?"""
        return any(
            self.get(job.queue).on_full == "block" for job in jobs if job.queue in self._settings
        )
