"""Workflows on SQLite (conveyor.rules.dependencies): linking a new dependant to its
parents and releasing dependants when a parent ends, inside the caller's write
transaction (SQLite serialises writers, so the count of a dependant whose last two
parents end at once is decremented by one transaction after the other)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from conveyor.backends.sqlite.connection import Q
from conveyor.model.job import JobState
from conveyor.rules.dependencies import DependantRows, Start, dependency_error


def states_of(db: sqlite3.Connection, ids: Sequence[str]) -> dict[str, str]:
    return dict(db.execute(Q["states_of_jobs"], {"ids": json.dumps(list(ids))}).fetchall())


def link(
    db: sqlite3.Connection,
    job_id: str,
    start: Start,
    allow_failure: bool,
    now: float,
    parents: Sequence[str],
) -> None:
    """Record a new dependant's waiting: its count, and its id in each parent it waits on."""
    error = None if start.failed_parent is None else dependency_error(*start.failed_parent, now)
    db.execute(
        Q["link_dependant"],
        {
            "id": job_id,
            "pending_parents": len(start.pending),
            "allow_failure": int(allow_failure),
            "error": error,
            "now": now,
            "parents": json.dumps(list(parents)),
        },
    )
    for parent in start.pending:
        db.execute(Q["add_dependant"], {"id": parent, "child": job_id})


class SqliteDependants(DependantRows):
    def __init__(self, db: sqlite3.Connection, now: float) -> None:
        self.db, self.now = db, now

    def dependants(self, job_id: str) -> list[str]:
        row = self.db.execute(Q["dependants_of"], {"id": job_id}).fetchone()
        return _ids(None if row is None else row[0])

    def parents(self, job_id: str) -> list[str]:
        row = self.db.execute(Q["parents_of"], {"id": job_id}).fetchone()
        return _ids(None if row is None else row[0])

    def blocked(self, job_id: str) -> tuple[bool, int] | None:
        row = self.db.execute(Q["blocked_job"], {"id": job_id}).fetchone()
        if row is None:
            return None
        pending = row[1] if isinstance(row[1], int) else 0
        return bool(row[0]), pending

    def count_down(self, job_id: str, pending_parents: int) -> None:
        self.db.execute(Q["count_down_parents"], {"id": job_id, "pending_parents": pending_parents})

    def unblock(self, job_id: str) -> None:
        self.db.execute(Q["unblock_job"], {"id": job_id, "now": self.now})

    def cancel(self, job_id: str, error_json: str) -> None:
        self.db.execute(
            Q["cancel_blocked_job"], {"id": job_id, "now": self.now, "error": error_json}
        )

    def cancelled_by_parent(self, job_id: str) -> tuple[bool, list[str]] | None:
        row = self.db.execute(Q["cancelled_by_parent"], {"id": job_id}).fetchone()
        return None if row is None else (bool(row[0]), _ids(row[1]))

    def state(self, job_id: str) -> JobState | None:
        row = self.db.execute(Q["state_of_job"], {"id": job_id}).fetchone()
        return None if row is None or row[0] not in _STATES else JobState(row[0])

    def reblock(self, job_id: str, pending_parents: int) -> None:
        self.db.execute(Q["reblock_job"], {"id": job_id, "pending_parents": pending_parents})


_STATES = {s.value for s in JobState}


def _ids(text: str | None) -> list[str]:
    """A stored JSON list of ids; a damaged one reads as none (never fails a settle)."""
    try:
        ids = json.loads(text) if text is not None else []
    except ValueError:
        return []
    return [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else []
