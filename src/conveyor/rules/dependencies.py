"""The rule of jobs that wait on others (workflows, docs/workflows.md), once for every
backend: where a new dependant starts, and what ending a parent does to it.

A job enqueued with `depends_on` is stored `blocked` with a count of its parents
that have not ended (`pending_parents`); each such parent lists it among its
`dependants`. The statement, script or transaction that ends a parent (settle,
cancel) also applies `release` to each of its dependants still blocked, so two
parents ending at the same instant on two workers decrement one count under one
lock: exactly one of them sees it reach zero and makes the dependant available.
A job with no dependants pays one null check for all this.

The SQL and Lua forms of `release` are in the backends' own files
(postgres/migrations, redis/scripts/_lib.lua); memory and SQLite call the Python
one here. tests/conformance/test_workflows.py holds all four to the same answers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from conveyor.model.errors import InvalidJob
from conveyor.model.job import AttemptError, JobState, NewJob
from conveyor.model.version import __version__

S = JobState
DEPENDENCY_FAILED = "DependencyFailed"
_FAILED = (S.DEAD, S.CANCELLED)


def dependency_error(parent_id: str, parent_state: str, now: float) -> str:
    """The error record (AttemptError's JSON) a dependant cancelled by its parent keeps."""
    return AttemptError(
        attempt=0,
        at=now,
        type=DEPENDENCY_FAILED,
        message=f"parent job {parent_id} ended {parent_state}",
        version=__version__,
    ).to_json()


def parents_of(depends_on: Sequence[str]) -> tuple[str, ...]:
    """The parents in the order given, each once."""
    return tuple(dict.fromkeys(depends_on))


def check_parents(jobs: Sequence[NewJob], stored: Callable[[str], bool]) -> None:
    """Refuse a batch (before anything is stored) naming a parent that is neither
    stored (`stored(id)`) nor earlier in the batch."""
    earlier: set[str] = set()
    for new in jobs:
        for parent in new.depends_on:
            if parent == new.id:
                raise InvalidJob("depends_on", parent, "another job's id", where=new.id)
            if parent not in earlier and not stored(parent):
                raise InvalidJob("depends_on", parent, "the id of a stored job", where=new.id)
        earlier.add(new.id)


@dataclass(frozen=True, slots=True)
class Start:
    """Where a new dependant starts: `state` (blocked, available, or cancelled by a
    parent that already failed: `failed_parent`), and the parents it waits for."""

    state: JobState
    pending: tuple[str, ...]
    failed_parent: tuple[str, str] | None = None  # (id, state)


def start_of(
    new_id: str,
    depends_on: Sequence[str],
    states: Mapping[str, JobState | None],
    allow_failure: bool,
    ready: JobState,
) -> Start:
    """Where a dependant starts, given its parents' states as stored now (None: no
    such job, which refuses the batch). `ready` is where it goes with nothing to
    wait for (available, or scheduled for a later run_at)."""
    pending: list[str] = []
    failed: tuple[str, str] | None = None
    for parent in parents_of(depends_on):
        state = states.get(parent)
        if state is None:
            raise InvalidJob("depends_on", parent, "the id of a stored job", where=new_id)
        if parent == new_id:
            raise InvalidJob("depends_on", parent, "another job's id", where=new_id)
        if state in _FAILED and not allow_failure and failed is None:
            failed = (parent, state.value)
        elif state not in (S.COMPLETED, *_FAILED):
            pending.append(parent)
    if failed is not None:
        return Start(S.CANCELLED, (), failed)
    return Start(S.BLOCKED if pending else ready, tuple(pending))


def release(
    parent_state: JobState, allow_failure: bool, pending_parents: int
) -> tuple[JobState, int]:
    """What ending one parent in `parent_state` does to a blocked dependant: its new
    state and count of parents not ended. A failed parent cancels it (unless
    `allow_failure`); the last parent to end makes it available."""
    if parent_state in _FAILED and not allow_failure:
        return S.CANCELLED, pending_parents
    left = pending_parents - 1
    return (S.AVAILABLE if left <= 0 else S.BLOCKED), left


class DependantRows(Protocol):
    """The reads and writes `release_dependants` makes, inside the caller's atomic
    step (the memory store's lock, SQLite's write transaction)."""

    def dependants(self, job_id: str) -> Sequence[str]: ...

    def blocked(self, job_id: str) -> tuple[bool, int] | None:
        """(allow_failure, pending_parents) of a blocked job; None if not blocked."""
        ...

    def count_down(self, job_id: str, pending_parents: int) -> None: ...
    def unblock(self, job_id: str) -> None: ...
    def cancel(self, job_id: str, error_json: str) -> None: ...

    # for resume_dependants
    def cancelled_by_parent(self, job_id: str) -> tuple[bool, Sequence[str]] | None:
        """(allow_failure, parents) of a job a parent cancelled before it ever ran
        (cancelled, attempt 0, its last error a DependencyFailed); None otherwise."""
        ...

    def state(self, job_id: str) -> JobState | None: ...
    def reblock(self, job_id: str, pending_parents: int) -> None: ...


def release_dependants(
    rows: DependantRows, parent_id: str, parent_state: JobState, now: float
) -> int:
    """A parent ended in `parent_state`: apply `release` to each of its blocked
    dependants, and onwards to the dependants of those it cancels. Returns how many
    became available (the caller wakes idle workers)."""
    ended, unblocked = [(parent_id, parent_state)], 0
    while ended:
        parent, state = ended.pop()
        for child in rows.dependants(parent):
            found = rows.blocked(child)
            if found is None:
                continue
            new, left = release(state, found[0], found[1])
            if new is S.CANCELLED:
                rows.cancel(child, dependency_error(parent, state.value, now))
                ended.append((child, S.CANCELLED))
            elif new is S.AVAILABLE:
                rows.unblock(child)
                unblocked += 1
            else:
                rows.count_down(child, left)
    return unblocked


def resume_dependants(rows: DependantRows, parent_id: str) -> int:
    """A parent was redriven (back to available): the dependants it had cancelled wait
    for their parents again (cancelled -> blocked, counting the parents not ended),
    and onwards the dependants those had cancelled. One that another parent still
    fails (dead or cancelled, without allow_failure) stays cancelled. Returns how many
    were resumed."""
    walk, resumed = [parent_id], 0
    while walk:
        for child in rows.dependants(walk.pop()):
            found = rows.cancelled_by_parent(child)
            if found is None:
                continue
            allow_failure, parents = found
            states = [rows.state(p) for p in parents_of(parents)]
            if not allow_failure and any(s in _FAILED for s in states):
                continue
            rows.reblock(
                child, sum(1 for s in states if s is not None and s not in (S.COMPLETED, *_FAILED))
            )
            resumed += 1
            walk.append(child)
    return resumed
