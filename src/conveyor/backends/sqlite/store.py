"""Synchronous SQLite access, confined to one thread per connection.

The async `SqliteBackend` runs these methods on its own single thread, so the
event loop never waits on disk or on another process's write lock. Every write
happens in a `BEGIN IMMEDIATE` transaction: SQLite serialises writers, which is
what makes claims atomic across processes and dedup race-free.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from ...errors import BackendUnavailable, ConfigurationError, JobNotFound
from ...escaping import readable_text
from ...job import TERMINAL_STATES, Job, JobState, NewJob
from ...lifecycle import initial_state
from ...claiming import claim_in_passes
from ..base import (ClaimRequest, HeartbeatReply, HeldLease, JobFilter, Lease, LeaseQuery,
                    QueueStats, Settlement, ascii_lower, queue_stats_from_rows, redrive_scope,
                    waiting_scope)
from ..codec import job_from_row
from ..sqlfiles import load_migrations, load_queries

Q = load_queries(__package__ or "conveyor.backends.sqlite")
_SYNCHRONOUS = {"full": "FULL", "normal": "NORMAL", "extra": "EXTRA", "off": "OFF"}


def _filter_params(where: JobFilter) -> dict[str, Any]:
    def as_json(values: Sequence[str]) -> str | None:
        return json.dumps([str(v) for v in values]) if values else None

    return {
        "states": as_json(where.states),
        "queues": as_json(where.queues),
        "tasks": as_json(where.tasks),
        "ids": as_json(where.ids),
        "error_type": None if where.error_type is None else ascii_lower(where.error_type),
        "args_contains": where.args_contains,
    }


class SqliteStore:
    """One connection to one database file, used from one thread."""

    def __init__(self, path: str, clock: Callable[[], float], synchronous: str = "full") -> None:
        if synchronous.lower() not in _SYNCHRONOUS:
            raise ConfigurationError(
                f"synchronous={synchronous!r}: expected one of {sorted(_SYNCHRONOUS)}"
            )
        self.path = path
        self.clock = clock
        try:
            self.conn = sqlite3.connect(path, isolation_level=None, timeout=30.0)
            self.conn.text_factory = _text_or_stand_ins
            self.conn.execute("PRAGMA busy_timeout=30000")
            _use_wal(self.conn)
            self.conn.execute(f"PRAGMA synchronous={_SYNCHRONOUS[synchronous.lower()]}")
        except sqlite3.Error as exc:
            raise BackendUnavailable(f"cannot open SQLite database {path!r}: {exc}") from exc

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            # Some errors (SQLITE_FULL, an I/O error) end the transaction themselves; a
            # ROLLBACK then would hide the error that tells the user what happened.
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    # --- schema -----------------------------------------------------------------
    def migrate(self) -> list[int]:
        """Apply the migrations this file lacks. Looking costs one read: the write
        lock is taken only when one is due, so opening a migrated file (every
        process's first call, admin reads included) never waits behind a writer."""
        done = self._applied_versions()
        pending = [m for m in load_migrations(__package__ or "conveyor.backends.sqlite")
                   if m.version not in done]
        if not pending:
            return []
        applied = []
        with self.write() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS conveyor_migrations "
                "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
            )
        for migration in pending:
            # Each migration in its own transaction; executescript would commit early.
            with self.write() as db:
                if db.execute(
                    "SELECT 1 FROM conveyor_migrations WHERE version = ?", (migration.version,)
                ).fetchone():
                    continue  # another process got there first
                for statement in _split_statements(migration.sql):
                    db.execute(statement)
                db.execute(
                    "INSERT INTO conveyor_migrations VALUES (?, ?, ?)",
                    (migration.version, migration.name, self.clock()),
                )
            applied.append(migration.version)
        return applied

    def _applied_versions(self) -> set[int]:
        try:
            rows = self.conn.execute("SELECT version FROM conveyor_migrations").fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
            return set()  # a new file
        return {row[0] for row in rows}

    # --- producer -----------------------------------------------------------------
    def enqueue_jobs(self, jobs: Sequence[NewJob]) -> list[Job]:
        now = self.clock()
        out: list[Job] = []
        with self.write() as db:
            for new in jobs:
                existing = self._find_duplicate(db, new, now)
                if existing is not None:
                    out.append(existing)
                    continue
                run_at = now if new.run_at is None else new.run_at
                state = initial_state(run_at, now)
                row = {
                    "id": new.id,
                    "queue": new.queue,
                    "task": new.task,
                    "payload": new.payload,
                    "state": state.value,
                    "priority": new.priority,
                    "max_attempts": new.max_attempts,
                    "run_at": run_at,
                    "created_at": now,
                    "unique_key": new.unique_key,
                    "unique_for": new.unique_for,
                    "timeout": new.timeout,
                    "meta": json.dumps(new.meta),
                }
                if db.execute(Q["insert_job"], row).rowcount == 0:
                    # The id names a finished job whose dedup window is over: replace it.
                    db.execute(Q["delete_finished_job"], {"id": new.id})
                    db.execute(Q["insert_job"], row)
                out.append(
                    Job(
                        id=new.id, task=new.task, queue=new.queue, payload=new.payload,
                        state=state, priority=new.priority, max_attempts=new.max_attempts,
                        run_at=run_at, created_at=now, unique_key=new.unique_key,
                        unique_for=new.unique_for, timeout=new.timeout, meta=new.meta,
                    )
                )
        return out

    def _find_duplicate(self, db: sqlite3.Connection, new: NewJob, now: float) -> Job | None:
        hit = db.execute(Q["find_duplicate_by_id"], {"id": new.id, "now": now}).fetchone()
        if hit is None and new.unique_key is not None:
            hit = db.execute(
                Q["find_duplicate_by_unique_key"], {"unique_key": new.unique_key, "now": now}
            ).fetchone()
        return None if hit is None else job_from_row(hit)

    # --- worker -------------------------------------------------------------------
    def fetch_jobs(self, request: ClaimRequest) -> list[Job]:
        now = self.clock()
        params = {"now": now, "lease_expires_at": now + request.lease_seconds,
                  "worker_id": request.worker_id}
        with self.write() as db:
            db.execute(Q["stage_due_jobs"], {"now": now})
            paused = {row[0] for row in db.execute(Q["paused_queues"])}

            def take(queue: str, n: int) -> list[Job]:
                if queue in paused:
                    return []
                rows = db.execute(Q["claim_jobs"], {**params, "queue": queue, "limit": n})
                # RETURNING has no order: sort by claim order, on decoded values (a
                # corrupt priority reads as 0 instead of failing the comparison).
                batch = sorted(((job_from_row(r[1:]), r[0], r[1]) for r in rows),
                               key=lambda row: (-row[0].priority, row[0].run_at, row[1]))
                return [job if job.id == raw_id else
                        replace(job, id=self._give_readable_id(db, seq, job.id))
                        for job, seq, raw_id in batch]

            return claim_in_passes(request, take)

    def settle_jobs(self, settlements: Sequence[Settlement]) -> list[str]:
        now = self.clock()
        stale = []
        with self.write() as db:
            for s in settlements:
                params: dict[str, Any] = {"id": s.job_id, "token": s.token, "now": now}
                if s.state is JobState.COMPLETED:
                    cursor = db.execute(Q["complete_job"], {**params, "result": s.result})
                elif s.refund_attempt:
                    cursor = db.execute(
                        Q["return_job"], {**params, "state": s.state.value, "run_at": s.run_at}
                    )
                else:
                    error = None if s.error is None else json.dumps(s.error.to_dict())
                    cursor = db.execute(
                        Q["fail_job"],
                        {**params, "state": s.state.value, "run_at": s.run_at, "error": error},
                    )
                if cursor.rowcount == 0:
                    stale.append(s.job_id)
        return stale

    def heartbeat_jobs(self, leases: Sequence[Lease], lease_seconds: float) -> HeartbeatReply:
        now = self.clock()
        lost, cancel = set(), set()
        with self.write() as db:
            for lease in leases:
                row = db.execute(
                    Q["heartbeat_job"],
                    {"id": lease.job_id, "token": lease.token,
                     "lease_expires_at": now + lease_seconds},
                ).fetchone()
                if row is None:
                    lost.add(lease.job_id)
                elif row[0]:
                    cancel.add(lease.job_id)
        return HeartbeatReply(lost=frozenset(lost), cancel_requested=frozenset(cancel))

    def checkpoint_job(self, lease: Lease, checkpoint: str | None, progress: str | None) -> bool:
        with self.write() as db:
            cursor = db.execute(
                Q["checkpoint_job"],
                {"id": lease.job_id, "token": lease.token, "checkpoint": checkpoint,
                 "progress": progress},
            )
            return cursor.rowcount == 1

    # --- maintenance ----------------------------------------------------------------
    def find_leases(self, query: LeaseQuery) -> list[HeldLease]:
        rows = self.conn.execute(Q["find_leases"], {
            "expired_before": query.expired_before, "limit": query.limit,
            "worker_ids": json.dumps(list(query.worker_ids))}).fetchall()
        held = []
        for seq, job_id, *rest in rows:
            readable = readable_text(job_id)
            if readable != job_id:  # written over while it ran
                with self.write() as db:
                    readable = self._give_readable_id(db, seq, readable)
            held.append(HeldLease(readable, *rest))
        return held

    @staticmethod
    def _give_readable_id(db: sqlite3.Connection, seq: int, wanted: str) -> str:
        """Rename the job at `seq` to `wanted` (or, if another job has that id,
        `wanted#seq`) and return the new id. See give_readable_id in queries.sql."""
        try:
            db.execute(Q["give_readable_id"], {"id": wanted, "seq": seq})
        except sqlite3.IntegrityError:
            wanted = f"{wanted}#{seq}"
            db.execute(Q["give_readable_id"], {"id": wanted, "seq": seq})
        return wanted

    def prune_jobs(self, completed_before: float, dead_before: float) -> int:
        total = 0
        while True:  # in slices, so a big prune never holds the write lock for long
            with self.write() as db:
                n = db.execute(
                    Q["prune_jobs"],
                    {"completed_before": completed_before, "dead_before": dead_before,
                     "now": self.clock(), "limit": 1000},
                ).rowcount
            total += n
            if n < 1000:
                return total

    # --- admin ---------------------------------------------------------------------
    def _get(self, db: sqlite3.Connection, job_id: str) -> Job | None:
        row = db.execute(Q["get_job"], {"id": job_id}).fetchone()
        return None if row is None else job_from_row(row)

    def get_job(self, job_id: str) -> Job | None:
        return self._get(self.conn, job_id)

    def list_jobs(
        self, where: JobFilter, limit: int = 50, offset: int = 0, oldest_finished_first: bool = False,
        after: str | None = None,
    ) -> list[Job]:
        before_seq = None
        if after is not None:
            row = self.conn.execute(Q["seq_of_job"], {"id": after}).fetchone()
            if row is None:
                raise JobNotFound(f"job {after} (the page cursor) no longer exists; "
                                  "start again from the first page")
            before_seq = row[0]
        params = {**_filter_params(where), "limit": limit, "offset": offset,
                  "oldest_finished_first": oldest_finished_first, "before_seq": before_seq}
        query = Q["filter_jobs"] if oldest_finished_first else Q["list_jobs_newest_first"]
        return [job_from_row(r) for r in self.conn.execute(query, params)]

    def count_jobs(self, where: JobFilter) -> int:
        return int(self.conn.execute(Q["count_filtered_jobs"], _filter_params(where)).fetchone()[0])

    def cancel_job(self, job_id: str) -> Job | None:
        with self.write() as db:
            params = {"id": job_id, "now": self.clock()}
            if db.execute(Q["cancel_waiting_job"], params).rowcount == 0:
                db.execute(Q["request_cancel_running_job"], params)
            return self._get(db, job_id)

    def redrive_jobs(self, where: JobFilter, limit: int, dry_run: bool) -> list[Job]:
        scoped = redrive_scope(where)
        with self.write() as db:
            params = {**_filter_params(scoped), "limit": limit, "offset": 0,
                      "oldest_finished_first": True}
            chosen = [job_from_row(r) for r in db.execute(Q["filter_jobs"], params)]
            if dry_run:
                return chosen
            now = self.clock()
            for job in chosen:
                db.execute(Q["redrive_job"], {"id": job.id, "now": now})
            return [j for j in (self._get(db, job.id) for job in chosen) if j is not None]

    def delete_jobs(self, where: JobFilter, limit: int, dry_run: bool) -> list[str]:
        finished = [s for s in where.states or TERMINAL_STATES if s in TERMINAL_STATES]
        if not finished:
            return []  # active jobs are never deleted
        scoped = replace(where, states=tuple(sorted(finished)))
        with self.write() as db:
            params = {**_filter_params(scoped), "limit": limit, "offset": 0,
                      "oldest_finished_first": True}
            ids = [job.id for job in map(job_from_row, db.execute(Q["filter_jobs"], params))]
            if not dry_run:
                for job_id in ids:
                    db.execute(Q["delete_job"], {"id": job_id})
            return ids

    def cancel_jobs(self, where: JobFilter, limit: int, dry_run: bool) -> list[str]:
        scoped = waiting_scope(where)
        if scoped is None:
            return []
        with self.write() as db:
            params = {**_filter_params(scoped), "limit": limit, "offset": 0,
                      "oldest_finished_first": False}
            ids = [job.id for job in map(job_from_row, db.execute(Q["filter_jobs"], params))]
            if dry_run:
                return ids
            now = self.clock()
            return [job_id for job_id in ids
                    if db.execute(Q["cancel_waiting_job"], {"id": job_id, "now": now}).rowcount]

    def task_names(self, where: JobFilter) -> list[str]:
        rows = self.conn.execute(Q["task_names"], _filter_params(where))
        return [readable_text(r[0]) for r in rows]

    def queue_stats(self) -> list[QueueStats]:
        return queue_stats_from_rows(
            self.clock(),
            self.conn.execute(Q["count_by_queue_and_state"]).fetchall(),
            self.conn.execute(Q["oldest_available_by_queue"]).fetchall(),
            self.conn.execute(Q["all_queue_flags"]).fetchall(),
        )

    def pause_queue(self, queue: str, paused: bool) -> None:
        with self.write() as db:
            db.execute(Q["set_queue_paused"], {"queue": queue, "paused": int(paused)})

    def force_state(self, job_id: str, state: JobState) -> None:
        with self.write() as db:
            db.execute(Q["force_state"], {"id": job_id, "state": state.value})


def _text_or_stand_ins(raw: bytes) -> str:
    """TEXT values as str; bytes that are not UTF-8 (a file written by something else)
    become lone surrogates instead of failing the whole query, and the job codec
    reports the field as not valid UTF-8."""
    return raw.decode("utf-8", "surrogateescape")


def _use_wal(conn: sqlite3.Connection, patience: float = 30.0) -> None:
    """Put the file in WAL mode (a persistent setting of the file).

    Switching a new file to WAL takes a lock that SQLite does not wait for with its
    busy handler: processes opening a fresh database at the same moment get "database
    is locked" at once (seen with two producers racing on a new file). Once the file
    is in WAL mode nothing needs switching, so retry briefly until one of them has."""
    deadline = time.monotonic() + patience
    delay = 0.001
    while True:
        try:
            if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(delay)  # back off while the other opener finishes the switch
            delay = min(delay * 2, 0.05)


def _split_statements(script: str) -> list[str]:
    """Split a migration into statements, keeping trigger bodies whole."""
    statements, current = [], []
    for line in script.splitlines():
        current.append(line)
        candidate = "\n".join(current).strip()
        if candidate and sqlite3.complete_statement(candidate):
            statements.append(candidate)
            current = []
    rest = "\n".join(current).strip()
    if rest and not all(l.strip().startswith("--") or not l.strip() for l in rest.splitlines()):
        raise ConfigurationError(f"incomplete SQL statement at the end of a migration: {rest[:80]}")
    return statements
