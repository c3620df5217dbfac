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

from . import validation as valid
from .errors import ConfigurationError, InvalidJob
from .job import NewJob
from .timeutil import Duration


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """What an app declared for one queue.

    `aging`: seconds of waiting worth one priority level (None: no aging). A job of
    priority p that has waited w seconds ranks as priority p + w / aging.
    """

    name: str
    aging: float | None = None


class QueueSettingsRegistry:
    """The app's declared queues, by name."""

    def __init__(self) -> None:
        self._settings: dict[str, QueueSettings] = {}
        self._aging: dict[str, float] = {}  # the only setting jobs carry, looked up per job

    def declare(self, name: str, *, aging: Duration | None = None) -> QueueSettings:
        try:
            settings = QueueSettings(
                name=valid.name("queue", name),
                aging=None if aging is None else valid.seconds("aging", aging, positive=True),
            )
        except InvalidJob as exc:
            raise ConfigurationError(f"queue {name!r}: {exc}") from None
        self._settings[settings.name] = settings
        if settings.aging is None:
            self._aging.pop(settings.name, None)
        else:
            self._aging[settings.name] = settings.aging
        return settings

    def get(self, name: str) -> QueueSettings:
        return self._settings.get(name) or QueueSettings(name)

    def __iter__(self) -> Iterator[QueueSettings]:
        return iter(self._settings.values())

    def apply(self, jobs: Iterable[NewJob]) -> list[NewJob]:
        """The jobs with their queue's settings; a job's own `aging` wins."""
        if not self._aging:
            return list(jobs)
        aging = self._aging
        return [replace(job, aging=aging[job.queue])
                if job.aging is None and job.queue in aging else job for job in jobs]
