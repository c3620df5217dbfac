"""What producers and workers do to jobs (JobLifecycle) on a memory store: enqueue,
claim, settle, heartbeat, checkpoint, the waits, and the maintenance verbs (held leases,
pruning, result expiry). Each verb is one step under the store's lock, atomic as one
SQL transaction or one Lua script is; the rules are the shared ones (conveyor.rules,
conveyor.backends.claiming), called where every backend calls them.

The verbs here are plain functions, not coroutines: a memory step never waits, so the
backend's async verb is the one await (and `enqueue_jobs_blocking` calls the same one).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from conveyor.backends.claiming import ClaimBuckets, claim_in_passes
from conveyor.backends.memory import dependants
from conveyor.backends.memory.rate_lanes import first_in_lanes, next_token_at
from conveyor.backends.memory.registry import StoreAccess
from conveyor.backends.memory.store import MemoryStore, decode
from conveyor.backends.memory.stored_rows import is_live, past_retention
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
from conveyor.model.errors import RefusedJob
from conveyor.model.job import AttemptError, Job, JobState, NewJob
from conveyor.model.lifecycle import Transition, check, initial_state
from conveyor.rules.backpressure import raise_if_refused, shed_error
from conveyor.rules.dependencies import check_parents, start_of
from conveyor.rules.fairness import VtimeAssigner, claimed_vtime

S = JobState
# The bounds of a claim's counters, the SQL backends' ones (see their claim_jobs).
_ATTEMPT_TOP = 999_999_999
_TOKEN_TOP = 4_611_686_018_427_387_903


class MemoryLifecycle:
    def __init__(self, access: StoreAccess) -> None:
        self.access = access
        self._wakeups_seen: int | None = None  # this backend's, see Wakeups.wait

    # --- producer --------------------------------------------------------------------
    def enqueue_jobs(self, jobs: Sequence[NewJob]) -> list[Job]:
        store, now = self.access.store, self.access.clock()
        out: list[Job | None] = []
        refused: dict[int, RefusedJob] = {}
        with store.lock:
            vtimes = VtimeAssigner(
                lambda q, k: store.fair_last.get((q, k), 0), lambda q: store.fair_queue.get(q, 0)
            )
            check_parents(jobs, store.rows.__contains__)
            for pos, new in enumerate(jobs):
                existing = _duplicate_of(store, new, now)
                if existing is not None:
                    out.append(existing)
                    continue
                if new.bound is not None and not new.depends_on:  # conveyor.rules.backpressure
                    depth = len(store.waiting_in.get(new.queue, {}))
                    if depth >= new.bound.max_waiting and not new.bound.shed_oldest:
                        refused[pos] = RefusedJob(new.id, new.queue, depth, new.bound.max_waiting)
                        out.append(None)
                        continue
                    if depth >= new.bound.max_waiting:
                        _shed_oldest(
                            store,
                            new.queue,
                            depth - new.bound.max_waiting + 1,
                            new.bound.max_waiting,
                            now,
                        )
                if new.id in store.rows:  # finished, its dedup window over: replaced
                    store.delete(new.id)
                run_at = now if new.run_at is None else float(new.run_at)
                state = initial_state(run_at, now)
                if new.depends_on:
                    start = start_of(
                        new.id,
                        new.depends_on,
                        dependants.states_of(store, new.depends_on),
                        new.allow_failure,
                        state,
                    )
                    state = start.state
                store.insert(
                    new.id,
                    {
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
                    },
                )
                if new.depends_on:
                    dependants.link(store, new.id, start, new.allow_failure, now, new.depends_on)
                out.append(store.place(new.id))
            store.fair_last.update(vtimes.last)
        store.wakeups.notify()
        return raise_if_refused(jobs, out, refused)

    # --- worker ----------------------------------------------------------------------
    def fetch_jobs(self, request: ClaimRequest) -> ClaimedJobs:
        if request.limit <= 0:
            return ClaimedJobs()
        store, now = self.access.store, self.access.clock()
        with store.lock:
            for job_id in store.waiting.up_to(now):
                state = store.placed[job_id][0]
                store.move(job_id, state, S.AVAILABLE, Transition.STAGE)
            buckets = ClaimBuckets(request.rate_limits, store.buckets, now)

            def take(queue: str, n: int) -> list[Job]:
                if store.paused.get(queue, False):
                    return []
                chosen = first_in_lanes(store.available, queue, n, buckets)
                reached = claimed_vtime([store.rows[job_id].get("fair_vtime") for job_id in chosen])
                if reached is not None:
                    store.fair_queue[queue] = max(store.fair_queue.get(queue, 0), reached)
                return [_claim(store, job_id, request, now) for job_id in chosen]

            jobs = claim_in_passes(request, take)
            store.buckets.update(buckets.stored())
            return ClaimedJobs.of(
                jobs, next_token_at(store.available, store.paused, request, buckets)
            )

    def settle_jobs(self, settlements: Sequence[Settlement]) -> list[str]:
        store, now = self.access.store, self.access.clock()
        stale: list[str] = []
        unblocked = 0
        with store.lock:
            for s in settlements:  # all or nothing: refuse an illegal outcome up front
                check(S.RUNNING, s.state)
            for s in settlements:
                job = _held(store, s.job_id, s.token)
                if job is None:
                    stale.append(s.job_id)
                    continue
                run_at = job.run_at if s.run_at is None else float(s.run_at)
                if s.state is S.COMPLETED:
                    expires = (
                        None if s.result is None or s.result_ttl is None else now + s.result_ttl
                    )
                    store.move(
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
                        store.result_expiries.add(s.job_id, expires)
                    unblocked += dependants.release(store, s.job_id, now)
                elif s.refund_attempt:
                    store.move(
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
                    store.move(
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
                        unblocked += dependants.release(store, s.job_id, now)
        if unblocked or any(s.state in (S.AVAILABLE, S.SCHEDULED) for s in settlements):
            store.wakeups.notify()
        if any(s.state in (S.COMPLETED, S.DEAD, S.CANCELLED) for s in settlements):
            store.finished.notify()
        return stale

    def heartbeat_jobs(self, heartbeat: Heartbeat) -> HeartbeatReply:
        store, now = self.access.store, self.access.clock()
        lost, cancel = set(), set()
        with store.lock:
            for lease in heartbeat.leases:
                job = _held(store, lease.job_id, lease.token)
                if job is None:
                    lost.add(lease.job_id)
                    continue
                store.rows[lease.job_id]["lease_expires_at"] = now + heartbeat.lease_seconds
                if job.cancel_requested:
                    cancel.add(lease.job_id)
        return HeartbeatReply(lost=frozenset(lost), cancel_requested=frozenset(cancel))

    def checkpoint_job(self, checkpoint_write: CheckpointWrite) -> bool:
        store, lease = self.access.store, checkpoint_write.lease
        with store.lock:
            if _held(store, lease.job_id, lease.token) is None:
                return False
            row = store.rows[lease.job_id]
            if checkpoint_write.checkpoint is not None:
                row["checkpoint"] = checkpoint_write.checkpoint
            if checkpoint_write.progress is not None:
                row["progress"] = checkpoint_write.progress
            return True

    async def wait_for_jobs(self, job_wait: JobWait) -> None:
        wakeups = self.access.store.wakeups
        self._wakeups_seen = await wakeups.wait(job_wait.timeout, self._wakeups_seen)

    async def wait_for_finish(self, finish_wait: FinishWait) -> None:
        store = self.access.store
        seen = store.finished.generation  # before looking: an end after it wakes us
        job = store.job(finish_wait.job_id)
        if job is not None and not job.is_finished:
            await store.finished.wait(finish_wait.timeout, seen)

    # --- maintenance -------------------------------------------------------------------
    def find_leases(self, query: LeaseQuery) -> list[HeldLease]:
        store = self.access.store
        dead = set(query.worker_ids)
        found: list[HeldLease] = []
        with store.lock:
            for job_id in store.running:
                if len(found) >= query.limit:
                    break
                job = decode(job_id, store.rows[job_id])
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

    def prune_jobs(self, retention: Retention) -> int:
        store, now = self.access.store, self.access.clock()
        completed_before, dead_before = retention.completed_before, retention.dead_before
        with store.lock:
            gone = [
                job_id
                for job_id, row in store.rows.items()
                if past_retention(row, completed_before, dead_before, now)
            ]
            for job_id in gone:
                store.delete(job_id)
        return len(gone)

    def expire_results(self, result_sweep: ResultSweep) -> list[str]:
        store = self.access.store
        with store.lock:
            return store.result_expiries.expire(
                store.rows,
                result_sweep.now,
                result_sweep.limit,
                lambda job_id: store.rows[job_id].update(result=None),
            )

    def get_job(self, job_id: str) -> Job | None:
        store = self.access.store
        with store.lock:
            return store.job(job_id)

    def force_state(self, forced_state: ForcedState) -> None:
        """Test hook (StateForcing): a raw state write, refused unless the transition is in
        the table."""
        store, job_id, state = self.access.store, forced_state.job_id, forced_state.state
        with store.lock:
            placed = store.placed.get(job_id)
            if placed is None or placed[0] is state:
                return
            store.move(job_id, placed[0], state, None)


def _duplicate_of(store: MemoryStore, new: NewJob, now: float) -> Job | None:
    row = store.rows.get(new.id)
    if row is not None and is_live(row, now):
        return decode(new.id, row)
    if new.unique_key is not None:
        live = [i for i in store.by_unique.get(new.unique_key, {}) if is_live(store.rows[i], now)]
        if live:  # the latest one, as the SQL backends' dedup query picks
            holder = max(live, key=store.seq.__getitem__)
            return decode(holder, store.rows[holder])
    return None


def _shed_oldest(store: MemoryStore, queue: str, n: int, max_waiting: int, now: float) -> None:
    """Cancel the queue's `n` oldest waiting jobs (by seq), recording why."""
    why = AttemptError.from_dict(json.loads(shed_error(queue, max_waiting, now)))
    for job_id in store.waiting_in[queue].first(n):
        job = decode(job_id, store.rows[job_id])
        store.move(
            job_id,
            job.state,
            S.CANCELLED,
            Transition.CANCEL,
            finished_at=now,
            errors=(*job.errors, why),
        )
        dependants.release(store, job_id, now)  # a workflow member's dependants follow
        store.shed[queue] = store.shed.get(queue, 0) + 1


def _claim(store: MemoryStore, job_id: str, request: ClaimRequest, now: float) -> Job:
    job = decode(job_id, store.rows[job_id])
    return store.move(
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


def _held(store: MemoryStore, job_id: str, token: int) -> Job | None:
    """The job, if `token` is its current lease (a stored token that does not read
    as a number reads as 0, which no claim hands out: only a rescuer matches it)."""
    row = store.rows.get(job_id)
    if row is None:
        return None
    job = decode(job_id, row)
    return job if job.state is S.RUNNING and job.lease_token == token else None
