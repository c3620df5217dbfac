"""The JobLifecycle verbs on SQLite: enqueue, claim, settle, heartbeat, checkpoint,
wait for jobs, find leases, prune, expire results, get a job; and the capabilities
about jobs (blocking enqueue, finish wake-ups, state forcing).

`SqliteLifecycle`'s async verbs hop to the store thread (state.py) with the sync
function of the same name below, which takes the connection. Every write happens in a
`BEGIN IMMEDIATE` transaction: SQLite serialises writers, which is what makes claims
atomic across processes and dedup race-free. After a commit that may interest them,
a verb wakes idle workers or those waiting for a job's end (wakeup.py).
"""

from __future__ import annotations

import functools
import json
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from conveyor.backends.claiming import ClaimBuckets, claim_in_passes, claim_rank
from conveyor.backends.codec import COLUMNS, is_clean, job_from_row
from conveyor.backends.params import (
    CheckpointWrite,
    ClaimedJobs,
    ClaimRequest,
    FinishWait,
    ForcedState,
    Heartbeat,
    HeartbeatReply,
    HeldLease,
    JobWait,
    LeaseQuery,
    ResultSweep,
    Retention,
    Settlement,
)
from conveyor.backends.sqlite.connection import Q, SqliteConnection
from conveyor.backends.sqlite.dependants import SqliteDependants
from conveyor.backends.sqlite.enqueue import enqueue_jobs
from conveyor.backends.sqlite.rows import read_job
from conveyor.backends.sqlite.state import SqliteState
from conveyor.backends.sqlite.wakeup import WakeupListener
from conveyor.model.escaping import readable_text
from conveyor.model.job import Job, JobState, NewJob
from conveyor.rules.dependencies import release_dependants
from conveyor.rules.fairness import as_vtime, claimed_vtime

ENDED = (JobState.COMPLETED, JobState.DEAD, JobState.CANCELLED)


class SqliteLifecycle:
    """What producers and workers do to jobs, on one backend's state."""

    def __init__(self, state: SqliteState) -> None:
        self.state = state
        self._work_listener: WakeupListener | None = None
        self._finish_listener: WakeupListener | None = None
        self._thread_connections = threading.local()  # enqueue_jobs_blocking's

    def stop_listening(self) -> None:
        """Close the wake-up sockets this backend waited on (at the backend's close)."""
        for listener in (self._work_listener, self._finish_listener):
            if listener is not None:
                listener.close()
        self._work_listener = self._finish_listener = None

    async def migrate(self) -> list[int]:
        return await self.state.run(SqliteConnection.migrate)

    # --- producer (enqueue.py) -------------------------------------------------------
    async def enqueue_jobs(self, jobs: Sequence[NewJob]) -> list[Job]:
        result = await self.state.run(lambda c: enqueue_jobs(c, jobs))
        if (sender := self.state.wake_workers) is not None:
            sender.notify()
        return result

    def enqueue_jobs_blocking(self, jobs: Sequence[NewJob]) -> list[Job]:
        """Enqueue from the caller's own thread, on a connection of that thread.

        The sync facade uses this to skip two thread hops: an enqueue is then one
        commit, which is what bounds it with synchronous=FULL (measured in
        benchmarks/throughput.py)."""
        connection: SqliteConnection | None = getattr(self._thread_connections, "connection", None)
        if connection is None:
            state = self.state
            connection = SqliteConnection(state.path, state.clock, state.synchronous)
            self._thread_connections.connection = connection
        result = enqueue_jobs(connection, jobs)
        if (sender := self.state.wake_workers) is not None:
            sender.notify()
        return result

    # --- worker -----------------------------------------------------------------------
    async def fetch_jobs(self, request: ClaimRequest) -> ClaimedJobs:
        return await self.state.run(lambda c: fetch_jobs(c, request))

    async def settle_jobs(self, settlements: Sequence[Settlement]) -> list[str]:
        stale, unblocked = await self.state.run(lambda c: settle_jobs(c, settlements))
        state = self.state
        if state.wake_result_waiters is not None and any(s.state in ENDED for s in settlements):
            state.wake_result_waiters.notify()  # lists an empty folder unless someone waits
        if state.wake_workers is not None and (
            unblocked
            or any(s.state in (JobState.AVAILABLE, JobState.SCHEDULED) for s in settlements)
        ):
            state.wake_workers.notify()
        return stale

    async def heartbeat_jobs(self, heartbeat: Heartbeat) -> HeartbeatReply:
        return await self.state.run(lambda c: heartbeat_jobs(c, heartbeat))

    async def checkpoint_job(self, checkpoint_write: CheckpointWrite) -> bool:
        return await self.state.run(lambda c: checkpoint_job(c, checkpoint_write))

    async def wait_for_jobs(self, job_wait: JobWait) -> None:
        if self._work_listener is None:
            self._work_listener = WakeupListener(self.state.path)
        await self._work_listener.wait(job_wait.timeout)

    async def wait_for_finish(self, finish_wait: FinishWait) -> None:
        if self._finish_listener is None:  # listening before looking: no end is missed
            self._finish_listener = WakeupListener(self.state.path, "done")
        job = await self.get_job(finish_wait.job_id)
        if job is not None and not job.is_finished:
            await self._finish_listener.wait(finish_wait.timeout)

    # --- maintenance ----------------------------------------------------------------
    async def find_leases(self, query: LeaseQuery) -> list[HeldLease]:
        return await self.state.run(lambda c: find_leases(c, query))

    async def prune_jobs(self, retention: Retention) -> int:
        return await self.state.run(lambda c: prune_jobs(c, retention))

    async def expire_results(self, result_sweep: ResultSweep) -> list[str]:
        return await self.state.run(lambda c: expire_results(c, result_sweep))

    async def get_job(self, job_id: str) -> Job | None:
        return await self.state.run(lambda c: get_job(c, job_id))

    async def force_state(self, forced_state: ForcedState) -> None:
        await self.state.run(lambda c: force_state(c, forced_state))


# --- the verbs, sync, on the connection ---------------------------------------------
def fetch_jobs(connection: SqliteConnection, request: ClaimRequest) -> ClaimedJobs:
    now = connection.clock()
    params = {
        "now": now,
        "lease_expires_at": now + request.lease_seconds,
        "worker_id": request.worker_id,
    }
    with connection.write() as db:
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
                    else give_readable_id(db, r[0], job_from_row(r[1:-1]).id),
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
                and db.execute(Q["rate_held_back"], {"rate_key": key, "queues": queues}).fetchone()
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


def settle_jobs(
    connection: SqliteConnection, settlements: Sequence[Settlement]
) -> tuple[list[str], int]:
    """The stale ids, and how many dependants became available."""
    now = connection.clock()
    stale, unblocked = [], 0
    with connection.write() as db:
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


def heartbeat_jobs(connection: SqliteConnection, heartbeat: Heartbeat) -> HeartbeatReply:
    now = connection.clock()
    lease_seconds = heartbeat.lease_seconds
    lost, cancel = set(), set()
    with connection.write() as db:
        for lease in heartbeat.leases:
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


def checkpoint_job(connection: SqliteConnection, checkpoint_write: CheckpointWrite) -> bool:
    lease = checkpoint_write.lease
    with connection.write() as db:
        cursor = db.execute(
            Q["checkpoint_job"],
            {
                "id": lease.job_id,
                "token": lease.token,
                "checkpoint": checkpoint_write.checkpoint,
                "progress": checkpoint_write.progress,
            },
        )
        return cursor.rowcount == 1


def find_leases(connection: SqliteConnection, query: LeaseQuery) -> list[HeldLease]:
    rows = connection.conn.execute(
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
            with connection.write() as db:
                readable = give_readable_id(db, seq, readable)
        held.append(HeldLease(readable, *rest))
    return held


def prune_jobs(connection: SqliteConnection, retention: Retention) -> int:
    total = 0
    while True:  # in slices, so a big prune never holds the write lock for long
        with connection.write() as db:
            n = db.execute(
                Q["prune_jobs"],
                {
                    "completed_before": retention.completed_before,
                    "dead_before": retention.dead_before,
                    "now": connection.clock(),
                    "limit": 1000,
                },
            ).rowcount
        total += n
        if n < 1000:
            return total


def expire_results(connection: SqliteConnection, result_sweep: ResultSweep) -> list[str]:
    sweep = {"now": result_sweep.now, "limit": result_sweep.limit}
    with connection.write() as db:
        return [str(row[0]) for row in db.execute(Q["expire_results"], sweep)]


def get_job(connection: SqliteConnection, job_id: str) -> Job | None:
    return read_job(connection.conn, job_id)


def force_state(connection: SqliteConnection, forced_state: ForcedState) -> None:
    """Test hook (StateForcing): a raw state write, to show storage guards transitions."""
    with connection.write() as db:
        db.execute(Q["force_state"], {"id": forced_state.job_id, "state": forced_state.state.value})


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
    """A stored id the codec takes as it is (see give_readable_id for the others)."""
    return type(raw_id) is str and is_clean(raw_id)


def _decoded(row: Any, job_id: str) -> tuple[Job, int, int]:
    """A claimed row (seq, the codec's COLUMNS, fair_vtime) as its job, under the id it
    now has, with its vtime and seq."""
    job = job_from_row(row[1:-1])
    return (job if job.id == job_id else replace(job, id=job_id)), as_vtime(row[-1]), row[0]


def _claim_key(job: Job, fair_vtime: int, seq: int) -> tuple[int, int, float, int]:
    priority, at = claim_rank(job.priority, job.run_at, job.aging)
    return -priority, fair_vtime, at, seq


def give_readable_id(db: sqlite3.Connection, seq: int, wanted: str) -> str:
    """Rename the job at `seq` to `wanted` (or, if another job has that id,
    `wanted#seq`) and return the new id. See give_readable_id in queries.sql."""
    try:
        db.execute(Q["give_readable_id"], {"id": wanted, "seq": seq})
    except sqlite3.IntegrityError:
        wanted = f"{wanted}#{seq}"
        db.execute(Q["give_readable_id"], {"id": wanted, "seq": seq})
    return wanted
