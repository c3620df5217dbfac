"""Conveyor's errors. Driver errors are translated into these at the backend boundary."""

from __future__ import annotations


class ConveyorError(Exception):
    """Base of every error Conveyor raises on purpose."""


class ConfigurationError(ConveyorError):
    """A malformed URL, an unknown scheme, a bad option."""


class BackendUnavailable(ConveyorError):
    """The backend could not be reached; nothing was written. Safe to retry."""


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


class JobTimeout(ConveyorError):
    """The handler ran longer than the task's timeout. Transient: it retries."""


class LeaseExpired(ConveyorError):
    """Recorded when a job's worker died (or stalled) and its lease ran out."""


class CorruptPayload(ConveyorError):
    """The stored payload could not be decoded."""


class StaleLease(ConveyorError):
    """A write carried a fencing token that is no longer the job's: a newer attempt owns it."""
