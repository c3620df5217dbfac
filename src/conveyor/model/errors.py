"""Conveyor's errors. Driver errors are translated into these at the backend boundary."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


class ConveyorError(Exception):
    """Base of every error Conveyor raises on purpose."""


class ConfigurationError(ConveyorError):
    """A malformed URL, an unknown scheme, a bad option."""


class BackendUnavailable(ConveyorError):
    """The backend could not be reached; nothing was written. Safe to retry."""


class InvalidJob(ConveyorError, ValueError):
    """An enqueue option or job field outside what every backend stores exactly
    (see `conveyor.model.validation`); nothing of the batch was stored."""

    def __init__(self, field: str, value: object, expected: str, where: str = "") -> None:
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"{where + ': ' if where else ''}{field}={shown}: expected {expected}")
        self.field, self.value, self.expected = field, value, expected


class PayloadTooLarge(InvalidJob):
    """Arguments whose JSON text is over the task's `max_payload`; nothing of the
    batch was stored. Store the data elsewhere and pass a reference to it."""

    def __init__(self, size: int, limit: int, where: str = "") -> None:
        ConveyorError.__init__(
            self,
            f"{where + ': ' if where else ''}payload is {size:,} bytes of JSON, over "
            f"max_payload ({limit:,} bytes); store the data elsewhere (a file, a "
            "bucket, a table) and pass its id",
        )
        self.field, self.value, self.expected = "payload", size, f"at most {limit} bytes"
        self.size, self.limit = size, limit


class SecretInPayload(InvalidJob):
    """An argument that looks like a secret, refused by `payload_hygiene="reject"`
    (conveyor.rules.hygiene). The message names where it is and why, never the value."""

    def __init__(self, where: str, reason: str) -> None:
        ConveyorError.__init__(
            self,
            f"{where} looks like a secret ({reason}); pass a reference to it (a "
            "secret manager's key, a vault path) instead, or see the task's "
            "payload_hygiene= (docs/payloads.md)",
        )
        self.field, self.value, self.expected = where, "(not shown)", "no secret"


class SerializationError(ConveyorError, TypeError):
    """Arguments or a result that JSON cannot carry."""


class UnknownTask(ConveyorError):
    def __init__(self, name: str, known: list[str]) -> None:
        shown = ", ".join(sorted(known)[:20]) or "(none)"
        super().__init__(f"task {name!r} is not registered; known: {shown}")
        self.name = name


class ArgumentValidationError(ConveyorError, TypeError):
    """The arguments do not fit the task's signature."""


class JobNotFound(ConveyorError):
    pass


class JobFailed(ConveyorError):
    """`JobHandle.result()` on a job that ended dead or cancelled."""

    def __init__(self, job_id: str, state: str, error: str) -> None:
        super().__init__(f"job {job_id} ended {state}: {error}")
        self.job_id, self.state, self.error = job_id, state, error


class ResultExpired(ConveyorError):
    """The job completed, but its result was kept only for its `result_ttl` and that
    time has passed (docs/workflows.md#results): the result is gone, the job may
    still be listed until retention prunes it."""

    def __init__(self, job_id: str, expired_at: float) -> None:
        super().__init__(
            f"job {job_id} completed, but its result expired at {expired_at:.3f} (result_ttl)"
        )
        self.job_id, self.expired_at = job_id, expired_at


class JobTimeout(ConveyorError):
    """The handler ran longer than one of its time limits. Transient: it retries."""


class SoftTimeLimitExceeded(JobTimeout):
    """Raised inside a handler that ran past its soft time limit, so it can clean up.

    Sync handlers see it at their next Python bytecode (a blocking C call sees it when
    it returns); async handlers are cancelled (`asyncio.CancelledError` inside, as with
    `asyncio.timeout`). Recorded in the job's history under this name.
    """


class HardTimeLimitExceeded(JobTimeout):
    """The handler was still running at its hard time limit and was stopped: a
    coroutine is cancelled and abandoned; sync code in a pool child (`-p`) is stopped
    by replacing the child process."""


class WorkerLost(ConveyorError):
    """Recorded when the process running a job died (crash, OOM kill, SIGKILL) and
    that was known at once: its pool supervisor reaped it, or its liveness signal
    was gone (conveyor.worker.liveness). The job is returned then, and the crash
    counts as an attempt so a job that kills its process every time ends dead."""


class LeaseExpired(ConveyorError):
    """Recorded when a job's worker died (or stalled) and its lease ran out."""


class CorruptJob(ConveyorError):
    """A stored job could not be read in full: a field that is not valid JSON, not
    text, not a number, or an unknown state (`Job.corrupt` names the field). The
    worker never runs such a job: it ends dead at once, whatever the retry policy,
    and the other jobs of its batch run as usual."""


class CorruptPayload(CorruptJob):
    """The stored payload (the arguments) could not be decoded: not JSON, nested too
    deeply, or not of the shape {"args": [...], "kwargs": {...}}. Dead at once."""


@dataclass(frozen=True, slots=True)
class RefusedJob:
    """A job a bounded queue refused: its id, its queue, and the queue's waiting jobs
    then (`depth`) against its bound."""

    id: str
    queue: str
    depth: int
    max_waiting: int


class QueueFull(ConveyorError):
    """An enqueue found a bounded queue full (`app.queue(name, max_waiting=...)`).

    `refused` lists the jobs not stored; `jobs` has one entry per job of the batch,
    in order: what was stored (a JobHandle from the app, a Job from a backend), or
    None where refused. Nothing stored is undone: the jobs that fitted are queued.
    `queue`, `depth` and `max_waiting` are those of the first refused job."""

    def __init__(self, refused: Sequence[RefusedJob], jobs: Sequence[Any]) -> None:
        self.refused = tuple(refused)
        self.jobs = list(jobs)
        first = self.refused[0]
        self.queue, self.depth, self.max_waiting = first.queue, first.depth, first.max_waiting
        more = (
            f"; {len(self.refused)} of {len(self.jobs)} jobs refused" if len(self.jobs) > 1 else ""
        )
        super().__init__(
            f"queue {first.queue!r} is full: {first.depth} jobs waiting "
            f"(max_waiting {first.max_waiting}){more}"
        )


class StaleLease(ConveyorError):
    """A write carried a fencing token that is no longer the job's: a newer attempt owns it."""


class OnceWindowTooShort(ConfigurationError, ValueError):
    """`current_job().once(key, ttl=...)` with a `ttl` shorter than the job can still
    run again (its worst-case retry window plus the dead-letter retention, during
    which a redrive runs it anew): once the record expired, that later run would
    repeat the effect. Raised before anything is claimed; dead at once (a ValueError:
    the same call fails the same way every time)."""
