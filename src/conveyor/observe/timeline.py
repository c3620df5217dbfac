"""What happened to one job, in time order: the job page and `conveyor jobs show`
both show this.

From the job's record: enqueued, due, each failed attempt (with the error), the start
of its last attempt and how it ended. A redrive or retry resets the attempt count and
keeps the errors, so an error followed by one with a lower or equal attempt number
ended in a death (dead letters) before an operator sent the job back. From the audit
trail: every operator action that touched the job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from conveyor.model.job import Job, JobState
from conveyor.observe.audit import AuditEntry


@dataclass(frozen=True, slots=True)
class Event:
    at: float
    text: str
    detail: str = ""
    tone: str = ""  # ok, bad, op (an operator's action) or ""


def timeline(job: Job, actions: Sequence[AuditEntry] = ()) -> list[Event]:
    events = [Event(job.created_at, "enqueued")]
    # run_at is when it was due at enqueue, until a retry or an operator's redrive
    # moves it: then it no longer says that.
    if job.run_at > job.created_at + 0.5 and not job.errors and not actions:
        events.append(Event(job.run_at, "due"))
    errors = job.errors
    for i, e in enumerate(errors):
        later = errors[i + 1].attempt if i + 1 < len(errors) else None
        text = f"attempt {e.attempt} failed" + (", dead" if _died(job, e.attempt, later) else "")
        events.append(Event(e.at, text, f"{e.type}: {e.message}", "bad"))
    if job.started_at is not None:
        events.append(
            Event(
                job.started_at,
                f"attempt {job.attempt} started" if job.attempt else "last attempt started",
            )
        )
    # A dead job's end is its last error, marked dead above.
    if job.finished_at is not None and not (job.state is JobState.DEAD and errors):
        events.append(
            Event(
                job.finished_at,
                job.state.value,
                "",
                "ok" if job.state is JobState.COMPLETED else "bad",
            )
        )
    for entry in actions:
        via = f" ({entry.via})" if entry.via else ""
        events.append(
            Event(entry.at, f"{entry.action} by {entry.by}{via}", entry.note or entry.target, "op")
        )
    order = {id(e): i for i, e in enumerate(events)}
    return sorted(events, key=lambda e: (e.at, order[id(e)]))


def _died(job: Job, attempt: int, next_attempt: int | None) -> bool:
    """Whether the failed `attempt` sent the job to the dead letters. Attempts count
    up within one life of a job; an operator's redrive starts them again at 0."""
    if next_attempt is not None:
        return next_attempt <= attempt
    if job.state is JobState.DEAD:
        return True
    if job.state in (JobState.RUNNING, JobState.COMPLETED):
        return job.attempt <= attempt  # a retry would run attempt + 1
    return job.attempt < attempt  # waiting: a retry keeps the count until it runs
