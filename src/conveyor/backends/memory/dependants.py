"""Workflows on the memory store (conveyor.rules.dependencies): a new dependant's link to
its parents, and the rows `release_dependants` reads and writes, under the store's
lock. The fields live in each row beside the codec's (`dependants`,
`pending_parents`, `allow_failure`), as the SQL backends keep them in columns."""

from __future__ import annotations

import json
from collections.abc import Sequence

from conveyor.backends.memory.store import MemoryStore, decode
from conveyor.model.job import AttemptError, JobState
from conveyor.model.lifecycle import Transition
from conveyor.rules.dependencies import (
    DEPENDENCY_FAILED,
    Start,
    dependency_error,
    release_dependants,
)

S = JobState


def states_of(store: MemoryStore, ids: Sequence[str]) -> dict[str, JobState | None]:
    jobs = {i: store.job(i) for i in ids}
    return {i: None if job is None else job.state for i, job in jobs.items()}


def link(
    store: MemoryStore,
    job_id: str,
    start: Start,
    allow_failure: bool,
    now: float,
    parents: Sequence[str],
) -> None:
    """Record a new dependant's waiting: its count, and its id in each parent it waits on."""
    row = store.rows[job_id]
    row["pending_parents"], row["allow_failure"] = len(start.pending), allow_failure
    row["parents"] = list(parents)
    for parent in start.pending:
        store.rows[parent].setdefault("dependants", []).append(job_id)
    if start.failed_parent is not None:
        row["finished_at"] = now
        row["errors"] = (
            AttemptError.from_dict(json.loads(dependency_error(*start.failed_parent, now))),
        )


def release(store: MemoryStore, parent_id: str, now: float) -> int:
    """A parent ended: release (or cancel) its dependants; how many it unblocked."""
    if not store.rows[parent_id].get("dependants"):
        return 0  # the one check a job outside a workflow pays
    return release_dependants(
        MemoryDependants(store, now),
        parent_id,
        decode(parent_id, store.rows[parent_id]).state,
        now,
    )


class MemoryDependants:
    """conveyor.rules.dependencies.DependantRows on the store's rows (under its lock)."""

    def __init__(self, store: MemoryStore, now: float) -> None:
        self.store, self.now = store, now

    def dependants(self, job_id: str) -> list[str]:
        return list(self.store.rows.get(job_id, {}).get("dependants") or ())

    def blocked(self, job_id: str) -> tuple[bool, int] | None:
        row = self.store.rows.get(job_id)
        if row is None or row.get("state") != S.BLOCKED.value:
            return None
        return bool(row.get("allow_failure")), int(row.get("pending_parents") or 0)

    def count_down(self, job_id: str, pending_parents: int) -> None:
        self.store.rows[job_id]["pending_parents"] = pending_parents

    def unblock(self, job_id: str) -> None:
        self.store.move(
            job_id, S.BLOCKED, S.AVAILABLE, Transition.UNBLOCK, run_at=self.now, pending_parents=0
        )

    def cancel(self, job_id: str, error_json: str) -> None:
        job = self.store.job(job_id)
        errors = () if job is None else job.errors
        why = AttemptError.from_dict(json.loads(error_json))
        self.store.move(
            job_id,
            S.BLOCKED,
            S.CANCELLED,
            Transition.CANCEL,
            finished_at=self.now,
            errors=(*errors, why),
        )

    def cancelled_by_parent(self, job_id: str) -> tuple[bool, list[str]] | None:
        job, row = self.store.job(job_id), self.store.rows.get(job_id, {})
        if (
            job is None
            or job.state is not S.CANCELLED
            or job.attempt != 0
            or not job.errors
            or job.errors[-1].type != DEPENDENCY_FAILED
        ):
            return None
        return bool(row.get("allow_failure")), list(row.get("parents") or ())

    def state(self, job_id: str) -> JobState | None:
        job = self.store.job(job_id)
        return None if job is None else job.state

    def reblock(self, job_id: str, pending_parents: int) -> None:
        self.store.move(
            job_id,
            S.CANCELLED,
            S.BLOCKED,
            Transition.REDRIVE,
            finished_at=None,
            pending_parents=pending_parents,
        )
