"""The admin filter (`JobFilter`): which jobs a bulk cancel or a redrive acts on, how an
error type is folded, and the filter as a Python predicate for the backends that filter
in Python: Redis (over the few fields it reads per job) and memory. The SQL backends
express the same predicate in their `job_filter` query fragment."""

from __future__ import annotations

from dataclasses import replace

from conveyor.backends.params import JobFilter
from conveyor.model.job import JobState

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
WAITING_STATES = (JobState.SCHEDULED, JobState.AVAILABLE, JobState.RETRYABLE)


def ascii_lower(text: str) -> str:
    """Lower-case ASCII letters only, as SQLite's lower() does: every backend folds
    the error type the same way, whatever the database's locale."""
    return text.translate(_ASCII_LOWER)


def waiting_scope(where: JobFilter) -> JobFilter | None:
    """The filter `cancel_jobs` acts on: its waiting states (every waiting state by
    default), or None when it names none (nothing to cancel)."""
    states = tuple(s for s in (where.states or WAITING_STATES) if s in WAITING_STATES)
    return replace(where, states=states) if states else None


def redrive_scope(where: JobFilter) -> JobFilter:
    """The filter a redrive acts on: dead jobs by default; only dead or cancelled ones
    may be redriven. Every backend calls this, so they refuse the same inputs."""
    states = where.states or (JobState.DEAD,)
    if not set(states) <= {JobState.DEAD, JobState.CANCELLED}:
        raise ValueError("only dead or cancelled jobs can be redriven")
    return replace(where, states=states)


def job_matches(
    where: JobFilter,
    *,
    job_id: str,
    state: str | None,
    queue: str | None,
    task: str | None,
    last_error_type: str | None,
    payload: str | None,
) -> bool:
    """True if the job with these stored values matches `where`.

    `state` None means the job is gone (deleted since its id was read); the caller
    may pass `last_error_type` and `payload` as None when `where` does not test them
    (no error type, no args text asked for)."""
    if state is None:
        return False
    if where.states and state not in where.states:  # JobState is a str enum
        return False
    if where.queues and queue not in where.queues:
        return False
    if where.tasks and task not in where.tasks:
        return False
    if where.ids and job_id not in where.ids:
        return False
    if where.error_type is not None and (
        last_error_type is None or ascii_lower(last_error_type) != ascii_lower(where.error_type)
    ):
        return False
    if where.args_contains is not None and where.args_contains not in (payload or ""):
        return False
    return True
