"""The admin filter (`JobFilter`) as a Python predicate, for the backends that
filter in Python: Redis (over the few fields it reads per job) and memory. The SQL
backends express the same rule in their `job_filter` query fragment."""

from __future__ import annotations

from conveyor.backends.contract import JobFilter, ascii_lower


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
