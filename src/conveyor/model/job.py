"""The job record and its states.

A `Job` is an immutable snapshot of one row (or hash) in a backend. Workers and
the admin API read jobs; only backends write them, and only along the
transitions in `conveyor.model.lifecycle`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from conveyor.model.errors import ResultExpired


class JobState(StrEnum):
    BLOCKED = "blocked"  # a workflow member waiting for its parents to end (never claimed)
    SCHEDULED = "scheduled"  # waiting for run_at (delayed or snoozed)
    AVAILABLE = "available"  # ready to be claimed
    RUNNING = "running"  # leased by a worker
    RETRYABLE = "retryable"  # failed, waiting for its retry at run_at
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    DEAD = "dead"  # the dead-letter queue


ACTIVE_STATES = frozenset(
    {JobState.BLOCKED, JobState.SCHEDULED, JobState.AVAILABLE, JobState.RUNNING, JobState.RETRYABLE}
)
TERMINAL_STATES = frozenset({JobState.COMPLETED, JobState.CANCELLED, JobState.DEAD})


def to_datetime(epoch: float | None) -> datetime | None:
    """Backends store times as UTC epoch seconds; the public API shows aware datetimes."""
    return None if epoch is None else datetime.fromtimestamp(epoch, tz=UTC)


@dataclass(frozen=True, slots=True)
class AttemptError:
    """One failed attempt, as kept in the job's history and in the dead-letter queue.

    `version` is Conveyor's; `app_version` the application's own, as the worker that
    ran the attempt was given it (`Conveyor(version=...)` or `$CONVEYOR_APP_VERSION`):
    which deploy failed. Records written before it existed read as "".
    """

    attempt: int
    at: float  # epoch seconds, UTC
    type: str
    message: str
    traceback: str = ""
    worker_id: str = ""
    host: str = ""
    version: str = ""
    app_version: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "at": self.at,
            "type": self.type,
            "message": self.message,
            "traceback": self.traceback,
            "worker_id": self.worker_id,
            "host": self.host,
            "version": self.version,
            "app_version": self.app_version,
        }

    def to_json(self) -> str:
        """The error record as stored with the job: the one place its JSON is built."""
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AttemptError:
        return cls(
            attempt=int(data.get("attempt", 0)),
            at=float(data.get("at", 0.0)),
            type=str(data.get("type", "")),
            message=str(data.get("message", "")),
            traceback=str(data.get("traceback", "")),
            worker_id=str(data.get("worker_id", "")),
            host=str(data.get("host", "")),
            version=str(data.get("version", "")),
            app_version=str(data.get("app_version", "")),
        )


@dataclass(frozen=True, slots=True)
class Job:
    """A snapshot of one job.

    `payload` is the JSON text the producer wrote; it is decoded by the worker
    (a payload that does not decode kills that one job, never the worker).
    `lease_token` is the fencing token: it changes on every claim, and every
    write a worker makes about a running job must carry it.
    `corrupt` says why the stored record could not be read in full ("meta: not
    valid JSON (...)"), or is None: such a job holds what could be read and
    defaults for the rest (see conveyor.backends.codec); a worker never runs it.
    """

    id: str
    task: str
    queue: str
    payload: str
    state: JobState
    priority: int = 0
    attempt: int = 0
    max_attempts: int = 20
    run_at: float = 0.0
    created_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    lease_token: int = 0
    lease_expires_at: float | None = None
    worker_id: str | None = None
    unique_key: str | None = None
    unique_for: float | None = None
    result: str | None = None  # JSON text
    errors: tuple[AttemptError, ...] = ()
    checkpoint: str | None = None  # JSON text
    progress: str | None = None  # JSON text: {"fraction": .., "message": ..}
    cancel_requested: bool = False
    timeout: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    # Priority aging (docs/flow-control.md): seconds of waiting worth one priority
    # level, from the queue's setting when the job was enqueued; None: no aging.
    aging: float | None = None
    # Per-key concurrency (docs/flow-control.md): at most `concurrency_limit` jobs of
    # `concurrency_key` run at once; the rest wait without using attempts.
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    # Global rate limits (docs/flow-control.md): the token bucket the job's claim
    # spends from, named when it was enqueued; None: no limit.
    rate_key: str | None = None
    # Results kept for a while (result_ttl, docs/workflows.md#results): when the result
    # of a completed job expires; the prune loop then removes it. None: kept with the job.
    result_expires_at: float | None = None
    corrupt: str | None = None

    @property
    def args(self) -> list[Any]:
        return list(json.loads(self.payload).get("args", []))

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(json.loads(self.payload).get("kwargs", {}))

    @property
    def result_value(self) -> Any:
        """The stored result; ResultExpired once the prune loop removed it (read through
        `JobHandle.result()` it is refused from its expiry on, by the app's clock)."""
        if self.result_expired(None):
            raise ResultExpired(self.id, self.result_expires_at or 0.0)
        return None if self.result is None else json.loads(self.result)

    def result_expired(self, now: float | None) -> bool:
        """Whether the result is gone: removed by the prune loop, or (given `now`)
        past its expiry. A result with an expiry is never None until then: the worker
        gives one only to a result it stored."""
        return self.result_expires_at is not None and (
            self.result is None or (now is not None and now >= self.result_expires_at)
        )

    @property
    def checkpoint_value(self) -> Any:
        return None if self.checkpoint is None else json.loads(self.checkpoint)

    @property
    def is_finished(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def first_failure_at(self) -> datetime | None:
        return to_datetime(self.errors[0].at) if self.errors else None

    @property
    def last_failure_at(self) -> datetime | None:
        return to_datetime(self.errors[-1].at) if self.errors else None


@dataclass(frozen=True, slots=True)
class QueueBound:
    """A bound on a queue, checked by the backend as it stores a job (never stored
    itself): at most `max_waiting` jobs waiting (scheduled, available, retryable).
    A job that would pass it is refused, or with `shed_oldest` stored while the
    queue's oldest waiting job is cancelled (docs/flow-control.md)."""

    max_waiting: int
    shed_oldest: bool = False


@dataclass(frozen=True, slots=True)
class NewJob:
    """What a producer asks a backend to store.

    `unique_for` (seconds) keeps the dedup window open after the job completes.
    """

    id: str
    task: str
    queue: str
    payload: str
    priority: int = 0
    max_attempts: int = 20
    run_at: float | None = None  # None: now
    unique_key: str | None = None
    unique_for: float | None = None
    timeout: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    aging: float | None = None  # seconds of waiting per priority level (flow control)
    concurrency_key: str | None = None  # at most concurrency_limit running per key
    concurrency_limit: int | None = None
    rate_key: str | None = None  # the rate limit bucket its claim spends from (flow control)
    bound: QueueBound | None = None  # its queue's bound, from the app (conveyor.rules.queues)
    # Tenant fairness (conveyor.rules.fairness): claims rotate across the keys of a queue;
    # a weight w gives the key w turns to a weight-1 key's one. Used at enqueue only.
    fairness_key: str | None = None
    fairness_weight: float | None = None
    # Workflows (docs/workflows.md): the jobs that must end first. The job is stored
    # `blocked` until they have; a parent that ends dead or cancelled cancels it,
    # unless `allow_failure`, which lets it run with the failure as its input.
    depends_on: tuple[str, ...] = ()
    allow_failure: bool = False

    @property
    def only_id_dedups(self) -> bool:
        """No unique_key, queue bound, fairness key or parents: only an existing job of
        the same id can change how it is stored. Such a job can be written by one
        plain insert that skips on a taken id (the backends' fast path); a skip sends
        it down the full path, which decides the duplicate."""
        return (
            self.unique_key is None
            and self.bound is None
            and self.fairness_key is None
            and not self.depends_on
        )
