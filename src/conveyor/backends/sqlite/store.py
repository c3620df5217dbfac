"""Synchronous SQLite access, confined to one thread per connection.

The async `SqliteBackend` runs these methods on its own single thread, so the
event loop never waits on disk or on another process's write lock. Every write
happens in a `BEGIN IMMEDIATE` transaction: SQLite serialises writers, which is
what makes claims atomic across processes and dedup race-free.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from conveyor.backends.claiming import ClaimBuckets, claim_in_passes, claim_rank
from conveyor.backends.codec import COLUMNS, is_clean, job_from_row
from conveyor.backends.params import (
    ClaimedJobs,
    ClaimRequest,
    HeartbeatReply,
    HeldLease,
    Lease,
    LeaseQuery,
    Settlement,
)
from conveyor.backends.sqlite.connection import Q
from conveyor.backends.sqlite.dependants import SqliteDependants
from conveyor.backends.sqlite.enqueue import enqueue_jobs
from conveyor.backends.sqlite.inspector import SqliteInspector
from conveyor.model.escaping import readable_text
from conveyor.model.job import Job, JobState, NewJob
from conveyor.rules.dependencies import release_dependants
from conveyor.rules.fairness import as_vtime, claimed_vtime

ENDED = (JobState.COMPLETED, JobState.DEAD, JobState.CANCELLED)


class SqliteStore(SqliteInspector):
    """Every Backend verb, synchronous: the job lifecycle here, the operators' verbs in
    inspector.py, the connection, its transactions and the migrations in connection.py."""

    # --- producer (enqueue.py) -------------------------------------------------------
    def enqueue_jobs(self, jobs: Sequence[NewJob]) -> list[Job]:
        return enqueue_jobs(self, jobs)

    # --- worker -------------------------------------------------------------------
    def fetch_jobs(self, request: ClaimRequest) -> ClaimedJobs:
        now = self.clock()
        params = {
            "now": now,
            "lease_expires_at": now + request.lease_seconds,
            "worker_id": request.worker_id,
        }
        with self.write() as db:
            db.execute(Q["stage_due_jobs"], {"now": now})
            paused = {row[0] for row in db.execute(Q["paused_queues"])}
            reached: dict[str, int] = {}  # the largest vtime claimed, by queue
            buckets = _buckets(db, request, now)
            takes = 0

            def take(queue: str, n: int) -> list[tuple[int, Any, str]]:
                """The queue's claimed rows, raw, each with its take and its id."""
                nonlocal takes
                if queue in paused:
                    return []
                rows: Iterable[Any]
                if buckets is None:
                    rows = db.execute(
                        Q["claim_jobs"], {**params, "queue": queue, "limit": n}
                    ).fetchall()
                else:
                    rows = _claim_rated(db, buckets, {**params, "queue": queue, "limit": n})
                takes += 1
                batch = [
                    (
                        takes,
                        r,
                        r[1]
                        if _readable(r[1])
                        else self._give_readable_id(db, r[0], job_from_row(r[1:-1]).id),
                    )
                    for r in rows
                ]
                top = claimed_vtime([as_vtime(r[-1]) for _, r, _ in batch])
                if top:
                    reached[queue] = max(top, reached.get(queue, 0))
                return batch

            claimed = claim_in_passes(request, take)
            if reached:  # one statement per claim, only for claims of keyed jobs
                db.executemany(
                    Q["advance_fair_queue"], [{"queue": q, "vtime": v} for q, v in reached.items()]
                )
            next_token_at = None
            if buckets is not None:
                db.executemany(
                    Q["store_rate_bucket"],
                    [
                        {
                            "name": key,
                            "tokens": tokens,
                            "now": as_of,
                            "rate": buckets.limits[key].rate,
                            "burst": buckets.limits[key].burst,
                        }
                        for key, (tokens, as_of) in buckets.stored().items()
                    ],
                )
                queues = json.dumps([q.name for q in request.queues if q.name not in paused])
                held_back = [
                    key
                    for key in buckets.limits
                    if buckets.allowed(key) < 1
                    and db.execute(
                        Q["rate_held_back"], {"rate_key": key, "queues": queues}
                    ).fetchone()
                ]
                next_token_at = buckets.next_token_at(held_back)
        # Decoded after the commit: the write lock, which every other claimer and
        # settler of the file waits for, is not held while Python reads the rows.
        # RETURNING has no order: each take's jobs are sorted into claim order, on
        # decoded values (a corrupt priority reads as 0 instead of failing).
        jobs = sorted(
            ((t, _decoded(r, job_id)) for t, r, job_id in claimed),
            key=lambda tj: (tj[0], *_claim_key(tj[1][0], tj[1][1], tj[1][2])),
        )
        return ClaimedJobs.of([job for _, (job, _, _) in jobs], next_token_at)

    def settle_jobs(self, settlements: Sequence[Settlement]) -> tuple[list[str], int]:
        """The stale ids, and how many dependants became available."""
        now = self.clock()
        stale, unblocked = [], 0
        with self.write() as db:
            completed, others = _batchable(settlements)
            parents = []  # (job id, its state) of settled jobs that have dependants
            if completed:
                applied = dict(
                    db.execute(
                        Q["complete_jobs"],
                        {
                            "now": now,
                            "batch": json.dumps(
                                [[s.job_id, s.token, s.result, s.result_ttl] for s in completed]
                            ),
                        },
                    ).fetchall()
                )
                for s in completed:
                    if s.job_id not in applied:
                        stale.append(s.job_id)
                    elif applied[s.job_id]:
                        parents.append((s.job_id, s.state))
            for s in others:
                params: dict[str, Any] = {"id": s.job_id, "token": s.token, "now": now}
                if s.state is JobState.COMPLETED:
                    cursor = db.execute(
                        Q["complete_job"],
                        {**params, "result": s.result, "result_ttl": s.result_ttl},
                    )
                elif s.refund_attempt:
                    cursor = db.execute(
                        Q["return_job"], {**params, "state": s.state.value, "run_at": s.run_at}
                    )
                else:
                    error = None if s.error is None else s.error.to_json()
                    cursor = db.execute(
                        Q["fail_job"],
                        {**params, "state": s.state.value, "run_at": s.run_at, "error": error},
                    )
                row = cursor.fetchone()
                if row is None:
                    stale.append(s.job_id)
                elif row[0] and s.state in ENDED:
                    parents.append((s.job_id, s.state))
            for job_id, state in parents:  # they have dependants: release them
                unblocked += release_dependants(SqliteDependants(db, now), job_id, state, now)
        if completed:  # in the batch's order (its ids are distinct)
            stale_ids = set(stale)
            stale = [s.job_id for s in settlements if s.job_id in stale_ids]
        return stale, unblocked

    def heartbeat_jobs(self, leases: Sequence[Lease], lease_seconds: float) -> HeartbeatReply:
        now = self.clock()
        lost, cancel = set(), set()
        with self.write() as db:
            for lease in leases:
                row = db.execute(
                    Q["heartbeat_job"],
                    {
                        "id": lease.job_id,
                        "token": lease.token,
                        "lease_expires_at": now + lease_seconds,
                    },
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
                {
                    "id": lease.job_id,
                    "token": lease.token,
                    "checkpoint": checkpoint,
                    "progress": progress,
                },
            )
            return cursor.rowcount == 1

    # --- maintenance ----------------------------------------------------------------
    def find_leases(self, query: LeaseQuery) -> list[HeldLease]:
        rows = self.conn.execute(
            Q["find_leases"],
            {
                "expired_before": query.expired_before,
                "limit": query.limit,
                "worker_ids": json.dumps(list(query.worker_ids)),
            },
        ).fetchall()
        held = []
        for seq, job_id, *rest in rows:
            readable = readable_text(job_id)
            if readable != job_id:  # written over while it ran
                with self.write() as db:
                    readable = self._give_readable_id(db, seq, readable)
            held.append(HeldLease(readable, *rest))
        return held

    def prune_jobs(self, completed_before: float, dead_before: float) -> int:
        total = 0
        while True:  # in slices, so a big prune never holds the write lock for long
            with self.write() as db:
                n = db.execute(
                    Q["prune_jobs"],
                    {
                        "completed_before": completed_before,
                        "dead_before": dead_before,
                        "now": self.clock(),
                        "limit": 1000,
                    },
                ).rowcount
            total += n
            if n < 1000:
                return total

    def expire_results(self, now: float, limit: int) -> list[str]:
        with self.write() as db:
            return [
                str(row[0]) for row in db.execute(Q["expire_results"], {"now": now, "limit": limit})
            ]

    def get_job(self, job_id: str) -> Job | None:
        return self._get(self.conn, job_id)

    def force_state(self, job_id: str, state: JobState) -> None:
        with self.write() as db:
            db.execute(Q["force_state"], {"id": job_id, "state": state.value})


def _batchable(settlements: Sequence[Settlement]) -> tuple[list[Settlement], list[Settlement]]:
    """The completions that one statement can write (complete_jobs), and the rest.

    A busy worker's batch is mostly completions: one UPDATE for all of them spends
    less time holding the write lock than one per job, and that lock is what two
    worker processes on one file queue for. A batch that names a job twice (the
    seam says it does not) is written one settlement at a time, in order. So is a
    job whose id the batch's JSON would not carry back unchanged: SQLite's JSON
    functions end a text at a NUL, and a lone surrogate has no UTF-8 (such an id
    was reported stale, and the job's outcome lost, until it went this way)."""
    if len({s.job_id for s in settlements}) < len(settlements):
        return [], list(settlements)
    completed = [
        s
        for s in settlements
        if s.state is JobState.COMPLETED and "\x00" not in s.job_id and is_clean(s.job_id)
    ]
    if len(completed) < 2:
        return [], list(settlements)
    batched = {id(s) for s in completed}
    return completed, [s for s in settlements if id(s) not in batched]


def _buckets(db: sqlite3.Connection, request: ClaimRequest, now: float) -> ClaimBuckets | None:
    """The claim's buckets as stored (inside its write transaction: no other claimer
    spends them meanwhile), or None when the worker declares no limit."""
    if not request.rate_limits:
        return None
    names = json.dumps([limit.key for limit in request.rate_limits])
    stored = {
        name: (float(tokens), float(at))
        for name, tokens, at in db.execute(Q["rate_buckets"], {"names": names})
    }
    return ClaimBuckets(request.rate_limits, stored, now)


def _claim_rated(
    db: sqlite3.Connection, buckets: ClaimBuckets, params: dict[str, Any]
) -> list[Any]:
    """claim_rated_jobs over one queue (params: the claim's, its queue and limit), its
    buckets spent for the jobs it claimed."""
    keys = list(buckets.limits)
    for i, key in enumerate(keys):
        params[f"rate_key_{i}"] = key
        params[f"allowed_{i}"] = min(params["limit"], buckets.allowed(key))
    rows = db.execute(_rated_claim_sql(len(keys)), params).fetchall()
    for row in rows:
        if row[_RATE_KEY_AT] in buckets.limits:
            buckets.spend(row[_RATE_KEY_AT])
    return rows


# Where a claimed row (seq, then the codec's COLUMNS, then the fairness vtime) holds
# its rate_key: by name, so a column added to the codec does not move it.
_RATE_KEY_AT = 1 + COLUMNS.index("rate_key")


@functools.lru_cache(maxsize=16)
def _rated_claim_sql(buckets: int) -> str:
    lanes = "\n".join(Q["rate_lane"].replace("#", str(i)) for i in range(buckets))
    return Q["claim_rated_jobs"].replace("/* rate lanes */", lanes)


def _readable(raw_id: Any) -> bool:
    """A stored id the codec takes as it is (see _give_readable_id for the others)."""
    return type(raw_id) is str and is_clean(raw_id)


def _decoded(row: Any, job_id: str) -> tuple[Job, int, int]:
    """A claimed row (seq, the codec's COLUMNS, fair_vtime) as its job, under the id it
    now has, with its vtime and seq."""
    job = job_from_row(row[1:-1])
    return (job if job.id == job_id else replace(job, id=job_id)), as_vtime(row[-1]), row[0]


def _claim_key(job: Job, fair_vtime: int, seq: int) -> tuple[int, int, float, int]:
    priority, at = claim_rank(job.priority, job.run_at, job.aging)
    return -priority, fair_vtime, at, seq
