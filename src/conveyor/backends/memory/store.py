"""The jobs of one memory store: plain Python structures behind one lock.

A job is a row of stored fields (the codec's `COLUMNS`, as typed values) under
its id; every verb decides on the row as the job codec reads it
(conveyor.backends.codec), so a field written behind the store's back (the
conformance suite's raw writer) reads as it does on the other backends: named in
`Job.corrupt`, a default in its place, and never failing another job.

Indexes (which jobs are available in which queue, which wait for a time, which
run, which hold a unique key) are kept in step by `_place`, the one function that
files a job under its current state; every state change goes through `_move`,
which checks it against `conveyor.model.lifecycle.TRANSITIONS` first.
"""

from __future__ import annotations

import json
import os
import threading
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from conveyor.backends.claiming import ClaimBuckets, claim_in_passes, claim_rank
from conveyor.backends.codec import COLUMNS, job_from_row
from conveyor.backends.memory.blobs import BlobTable
from conveyor.backends.memory.dependants import MemoryDependants, link, states_of
from conveyor.backends.memory.expiries import ResultExpiries
from conveyor.backends.memory.ordered import Lanes, OrderedIds
from conveyor.backends.memory.rate_lanes import first_in_lanes, next_token_at
from conveyor.backends.memory.slots import KeySlots
from conveyor.backends.memory.stored_rows import is_live, past_retention
from conveyor.backends.memory.wakeup import Wakeups
from conveyor.backends.params import (
    ClaimedJobs,
    ClaimRequest,
    HeartbeatReply,
    HeldLease,
    Lease,
    LeaseQuery,
    Settlement,
)
from conveyor.model.errors import RefusedJob
from conveyor.model.job import AttemptError, Job, JobState, NewJob
from conveyor.model.lifecycle import Transition, check, initial_state
from conveyor.rules.backpressure import raise_if_refused, shed_error
from conveyor.rules.dependencies import check_parents, release_dependants, start_of
from conveyor.rules.fairness import VtimeAssigner, claimed_vtime

S = JobState
Row = dict[str, Any]
# The bounds of a claim's counters, the SQL backends' ones (see their claim_jobs).
_ATTEMPT_TOP = 999_999_999
_TOKEN_TOP = 4_611_686_018_427_387_903


class MemoryStore:
    """Every job, queue flag, shared record and liveness signal of one `memory://` URL.

    Used from any thread and any event loop of the process that made it (the sync
    facade runs on its own loop); each verb holds `lock` for its whole step, so it
    is atomic as one SQL transaction or one Lua script is."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.pid = os.getpid()
        self.lock = threading.RLock()
        self.wakeups = Wakeups()
        self.finished = Wakeups()  # a job ended: for job.result() (FinishWakeups)
        self.rows: dict[str, Row] = {}  # insertion order is enqueue order
        self.seq: dict[str, int] = {}
        self._next_seq = 0
        # Where each job is filed: (state, queue, unique key, concurrency key, rate key).
        self._placed: dict[str, tuple[JobState, str, str | None, str | None, str | None]] = {}
        # (queue, rate key) -> id -> claim order: (-priority, fairness vtime or 0, run_at,
        # seq). A rate-limited job has a lane of its own (rate_lanes.py).
        self.available: Lanes = defaultdict(OrderedIds)
        self.buckets: dict[str, tuple[float, float]] = {}  # rate key -> (tokens, updated_at)
        # Tenant fairness (conveyor.rules.fairness): last vtime per (queue, key), per queue
        # the vtime its claims reached.
        self.fair_last: dict[tuple[str, str], int] = {}
        self.fair_queue: dict[str, int] = {}
        self.waiting: OrderedIds[float] = OrderedIds()  # scheduled/retryable id -> run_at
        self.running: dict[str, None] = {}
        self.result_expiries = ResultExpiries()  # result_ttl (conveyor.rules.results)
        # queue -> its waiting (scheduled, available, retryable) ids: a bounded queue's depth.
        self.waiting_in: defaultdict[str, OrderedIds[float]] = defaultdict(OrderedIds)
        self._by_unique: dict[str, dict[str, None]] = {}  # unique key -> ids holding it
        self.paused: dict[str, bool] = {}
        self.shed: dict[str, int] = {}  # jobs each queue shed, ever (QueueStats.shed)
        self.records: dict[tuple[str, str], tuple[str, float | None]] = {}
        self.liveness_nonce = os.urandom(6).hex()
        self.held_signals: dict[str, str] = {}  # token -> worker id
        self.blobs = BlobTable()  # big payloads kept apart (blobs.py)
        self.slots = KeySlots(self.available)  # per-key concurrency (conveyor.rules.concurrency)

    # --- reading and filing --------------------------------------------------------
    def job(self, job_id: str) -> Job | None:
        row = self.rows.get(job_id)
        return None if row is None else decode(job_id, row)

    def _place(self, job_id: str) -> Job:
        """File the job under its stored state (as the codec reads it), out of where it
        was; return it as read."""
        self._unplace(job_id)
        job = decode(job_id, self.rows[job_id])
        if job.state in (S.SCHEDULED, S.AVAILABLE, S.RETRYABLE):
            self.waiting_in[job.queue][job_id] = self.seq[job_id]  # oldest first: shed_oldest
        key, order = job.concurrency_key, None
        if job.state is S.AVAILABLE:
            priority, at = claim_rank(job.priority, job.run_at, job.aging)
            vtime = self.rows[job_id].get("fair_vtime") or 0
            order = (-priority, vtime, at, self.seq[job_id])
            if key is None:  # else parked until its key has a slot (KeySlots.filed)
                self.available[job.queue, job.rate_key][job_id] = order
        elif job.state in (S.SCHEDULED, S.RETRYABLE):
            self.waiting[job_id] = job.run_at
        elif job.state is S.RUNNING:
            self.running[job_id] = None
        if job.unique_key is not None:
            self._by_unique.setdefault(job.unique_key, {})[job_id] = None
        self._placed[job_id] = (job.state, job.queue, job.unique_key, key, job.rate_key)
        self.slots.filed(job_id, job, order)
        return job

    def _unplace(self, job_id: str) -> None:
        placed = self._placed.pop(job_id, None)
        if placed is None:
            return
        state, queue, unique_key, key, rate_key = placed
        if (waiting := self.waiting_in.get(queue)) is not None:
            waiting.pop(job_id, None)
        if state is S.AVAILABLE:
            lane = self.available.get((queue, rate_key))
            if lane is not None:
                lane.pop(job_id, None)
        self.slots.leave(key, job_id)
        self.waiting.pop(job_id, None)
        self.running.pop(job_id, None)
        if unique_key is not None:
            holders = self._by_unique.get(unique_key, {})
            holders.pop(job_id, None)
            if not holders:
                self._by_unique.pop(unique_key, None)

    def rewritten(self, job_id: str) -> bool:
        """File a job again after a field of its row was written directly (the test
        suite's raw writer, standing in for a damaged store); False if unknown."""
        with self.lock:
            if job_id not in self.rows:
                return False
            self._place(job_id)
            return True

    def _move(
        self, job_id: str, old: JobState, new: JobState, why: Transition | None, **fields: Any
    ) -> Job:
        check(old, new, why)
        row = self.rows[job_id]
        row.update(fields)
        row["state"] = new.value
        return self._place(job_id)

    def delete(self, job_id: str) -> None:
        self._unplace(job_id)  # a finished job: it held no slot of a key
        del self.rows[job_id]
        del self.seq[job_id]

    # --- producer --------------------------------------------------------------------
    def enqueue_jobs(self, jobs: Sequence[NewJob], now: float) -> list[Job]:
        out: list[Job | None] = []
        refused: dict[int, RefusedJob] = {}
        with self.lock:
            vtimes = VtimeAssigner(
                lambda q, k: self.fair_last.get((q, k), 0), lambda q: self.fair_queue.get(q, 0)
            )
            check_parents(jobs, self.rows.__contains__)
            for pos, new in enumerate(jobs):
                existing = self._duplicate_of(new, now)
                if existing is not None:
                    out.append(existing)
                    continue
                if new.bound is not None and not new.depends_on:  # conveyor.rules.backpressure
                    depth = len(self.waiting_in.get(new.queue, {}))
                    if depth >= new.bound.max_waiting and not new.bound.shed_oldest:
                        refused[pos] = RefusedJob(new.id, new.queue, depth, new.bound.max_waiting)
                        out.append(None)
                        continue
                    if depth >= new.bound.max_waiting:
                        self._shed_oldest(
                            new.queue, depth - new.bound.max_waiting + 1, new.bound.max_waiting, now
                        )
                if new.id in self.rows:  # finished, its dedup window over: replaced
                    self.delete(new.id)
                run_at = now if new.run_at is None else float(new.run_at)
                state = initial_state(run_at, now)
                if new.depends_on:
                    start = start_of(
                        new.id,
                        new.depends_on,
                        states_of(self, new.depends_on),
                        new.allow_failure,
                        state,
                    )
                    state = start.state
                self.rows[new.id] = {
                    "id": new.id,
                    "queue": new.queue,
                    "task": new.task,
                    "payload": new.payload,
                    "state": state.value,
                    "priority": new.priority,
                    "attempt": 0,
                    "max_attempts": new.max_attempts,
                    "run_at": run_at,
                    "created_at": float(now),
                    "started_at": None,
                    "finished_at": None,
                    "lease_token": 0,
                    "lease_expires_at": None,
                    "worker_id": None,
                    "unique_key": new.unique_key,
                    "unique_for": None if new.unique_for is None else float(new.unique_for),
                    "result": None,
                    "errors": (),
                    "checkpoint": None,
                    "progress": None,
                    "cancel_requested": False,
                    "timeout": None if new.timeout is None else float(new.timeout),
                    "meta": json.dumps(new.meta),
                    "aging": None if new.aging is None else float(new.aging),
                    "fair_vtime": vtimes.assign(new),
                    "concurrency_key": new.concurrency_key,
                    "concurrency_limit": new.concurrency_limit,
                    "rate_key": new.rate_key,
                }
                self._next_seq += 1
                self.seq[new.id] = self._next_seq
                if new.depends_on:
                    link(self, new.id, start, new.allow_failure, now, new.depends_on)
                out.append(self._place(new.id))
            self.fair_last.update(vtimes.last)
        self.wakeups.notify()
        return raise_if_refused(jobs, out, refused)

    def _release_dependants(self, parent_id: str, now: float) -> int:
        if not self.rows[parent_id].get("dependants"):
            return 0  # the one check a job outside a workflow pays
        return release_dependants(
            MemoryDependants(self, now),
            parent_id,
            decode(parent_id, self.rows[parent_id]).state,
            now,
        )

    def _shed_oldest(self, queue: str, n: int, max_waiting: int, now: float) -> None:
        """Cancel the queue's `n` oldest waiting jobs (by seq), recording why."""
        why = AttemptError.from_dict(json.loads(shed_error(queue, max_waiting, now)))
        for job_id in self.waiting_in[queue].first(n):
            job = decode(job_id, self.rows[job_id])
            self._move(
                job_id,
                job.state,
                S.CANCELLED,
                Transition.CANCEL,
                finished_at=now,
                errors=(*job.errors, why),
            )
            self._release_dependants(job_id, now)  # a workflow member's dependants follow
            self.shed[queue] = self.shed.get(queue, 0) + 1

    def _duplicate_of(self, new: NewJob, now: float) -> Job | None:
        row = self.rows.get(new.id)
        if row is not None and is_live(row, now):
            return decode(new.id, row)
        if new.unique_key is not None:
            live = [
                i for i in self._by_unique.get(new.unique_key, {}) if is_live(self.rows[i], now)
            ]
            if live:  # the latest one, as the SQL backends' dedup query picks
                holder = max(live, key=self.seq.__getitem__)
                return decode(holder, self.rows[holder])
        return None

    # --- worker ----------------------------------------------------------------------
    def fetch_jobs(self, request: ClaimRequest, now: float) -> ClaimedJobs:
        with self.lock:
            for job_id in self.waiting.up_to(now):
                state = self._placed[job_id][0]
                self._move(job_id, state, S.AVAILABLE, Transition.STAGE)
            buckets = ClaimBuckets(request.rate_limits, self.buckets, now)

            def take(queue: str, n: int) -> list[Job]:
                if self.paused.get(queue, False):
                    return []
                chosen = first_in_lanes(self.available, queue, n, buckets)
                reached = claimed_vtime([self.rows[job_id].get("fair_vtime") for job_id in chosen])
                if reached is not None:
                    self.fair_queue[queue] = max(self.fair_queue.get(queue, 0), reached)
                return [self._claim(job_id, request, now) for job_id in chosen]

            jobs = claim_in_passes(request, take)
            self.buckets.update(buckets.stored())
            return ClaimedJobs.of(
                jobs, next_token_at(self.available, self.paused, request, buckets)
            )

    def _claim(self, job_id: str, request: ClaimRequest, now: float) -> Job:
        job = decode(job_id, self.rows[job_id])
        return self._move(
            job_id,
            S.AVAILABLE,
            S.RUNNING,
            Transition.CLAIM,
            attempt=job.attempt + 1 if 0 <= job.attempt <= _ATTEMPT_TOP else 1,
            lease_token=job.lease_token + 1 if 0 <= job.lease_token <= _TOKEN_TOP else 1,
            lease_expires_at=now + request.lease_seconds,
            worker_id=request.worker_id,
            started_at=now,
        )

    def _held(self, job_id: str, token: int) -> Job | None:
        """The job, if `token` is its current lease (a stored token that does not read
        as a number reads as 0, which no claim hands out: only a rescuer matches it)."""
        row = self.rows.get(job_id)
        if row is None:
            return None
        job = decode(job_id, row)
        return job if job.state is S.RUNNING and job.lease_token == token else None

    def settle_jobs(self, settlements: Sequence[Settlement], now: float) -> list[str]:
        stale: list[str] = []
        unblocked = 0
        with self.lock:
            for s in settlements:  # all or nothing: refuse an illegal outcome up front
                check(S.RUNNING, s.state)
            for s in settlements:
                job = self._held(s.job_id, s.token)
                if job is None:
                    stale.append(s.job_id)
                    continue
                run_at = job.run_at if s.run_at is None else float(s.run_at)
                if s.state is S.COMPLETED:
                    expires = (
                        None if s.result is None or s.result_ttl is None else now + s.result_ttl
                    )
                    self._move(
                        s.job_id,
                        S.RUNNING,
                        S.COMPLETED,
                        Transition.COMPLETE,
                        result=s.result,
                        finished_at=now,
                        lease_expires_at=None,
                        result_expires_at=expires,
                    )
                    if expires is not None:
                        self.result_expiries.add(s.job_id, expires)
                    unblocked += self._release_dependants(s.job_id, now)
                elif s.refund_attempt:
                    self._move(
                        s.job_id,
                        S.RUNNING,
                        s.state,
                        None,
                        run_at=run_at,
                        lease_expires_at=None,
                        attempt=max(job.attempt - 1, 0),
                    )
                else:
                    errors = job.errors if s.error is None else (*job.errors, s.error)
                    ended = s.state in (S.DEAD, S.CANCELLED)
                    self._move(
                        s.job_id,
                        S.RUNNING,
                        s.state,
                        None,
                        run_at=run_at,
                        lease_expires_at=None,
                        finished_at=now if ended else None,
                        errors=errors,
                    )
                    if ended:
                        unblocked += self._release_dependants(s.job_id, now)
        if unblocked or any(s.state in (S.AVAILABLE, S.SCHEDULED) for s in settlements):
            self.wakeups.notify()
        if any(s.state in (S.COMPLETED, S.DEAD, S.CANCELLED) for s in settlements):
            self.finished.notify()
        return stale

    def heartbeat_jobs(
        self, leases: Sequence[Lease], lease_seconds: float, now: float
    ) -> HeartbeatReply:
        lost, cancel = set(), set()
        with self.lock:
            for lease in leases:
                job = self._held(lease.job_id, lease.token)
                if job is None:
                    lost.add(lease.job_id)
                    continue
                self.rows[lease.job_id]["lease_expires_at"] = now + lease_seconds
                if job.cancel_requested:
                    cancel.add(lease.job_id)
        return HeartbeatReply(lost=frozenset(lost), cancel_requested=frozenset(cancel))

    def checkpoint_job(self, lease: Lease, checkpoint: str | None, progress: str | None) -> bool:
        with self.lock:
            if self._held(lease.job_id, lease.token) is None:
                return False
            row = self.rows[lease.job_id]
            if checkpoint is not None:
                row["checkpoint"] = checkpoint
            if progress is not None:
                row["progress"] = progress
            return True

    # --- maintenance -------------------------------------------------------------------
    def find_leases(self, query: LeaseQuery) -> list[HeldLease]:
        dead = set(query.worker_ids)
        found: list[HeldLease] = []
        with self.lock:
            for job_id in self.running:
                if len(found) >= query.limit:
                    break
                job = decode(job_id, self.rows[job_id])
                # An expiry that does not read as a number counts as expired.
                expired = query.expired_before is not None and (
                    job.lease_expires_at is None or job.lease_expires_at < query.expired_before
                )
                if expired or (job.worker_id is not None and job.worker_id in dead):
                    found.append(
                        HeldLease(
                            job_id,
                            job.lease_token,
                            job.worker_id,
                            job.attempt,
                            job.max_attempts,
                            job.lease_expires_at,
                        )
                    )
        return found

    def prune_jobs(self, completed_before: float, dead_before: float, now: float) -> int:
        with self.lock:
            gone = [
                job_id
                for job_id, row in self.rows.items()
                if past_retention(row, completed_before, dead_before, now)
            ]
            for job_id in gone:
                self.delete(job_id)
        return len(gone)

    def expire_results(self, now: float, limit: int) -> list[str]:
        with self.lock:
            return self.result_expiries.expire(
                self.rows, now, limit, lambda job_id: self.rows[job_id].update(result=None)
            )

    def force_state(self, job_id: str, state: JobState) -> None:
        with self.lock:
            placed = self._placed.get(job_id)
            if placed is None or placed[0] is state:
                return
            self._move(job_id, placed[0], state, None)


def decode(job_id: str, row: Row) -> Job:
    """The row as a Job, by the one job codec; the id it is stored under wins over the
    stored field (as on Redis), so a job is always settled where it lives."""
    values = [row.get(name) for name in COLUMNS]
    values[0] = job_id
    return job_from_row(values)
