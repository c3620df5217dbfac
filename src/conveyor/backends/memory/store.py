"""The jobs of one memory store: plain Python structures behind one lock, the state
every role object of a `MemoryBackend` reads and writes (through `StoreAccess`).

A job is a row of stored fields (the codec's `COLUMNS`, as typed values) under
its id; every verb decides on the row as the job codec reads it
(conveyor.backends.codec), so a field written behind the store's back (the
conformance suite's raw writer) reads as it does on the other backends: named in
`Job.corrupt`, a default in its place, and never failing another job.

Indexes (which jobs are available in which queue, which wait for a time, which
run, which hold a unique key) are kept in step by `place`, the one method that
files a job under its current state; every state change goes through `move`,
which checks it against `conveyor.model.lifecycle.TRANSITIONS` first.
"""

from __future__ import annotations

import os
import threading
from collections import defaultdict
from typing import Any

from conveyor.backends.claiming import claim_rank
from conveyor.backends.codec import COLUMNS, job_from_row
from conveyor.backends.memory.blobs import BlobTable
from conveyor.backends.memory.key_slots import KeySlots
from conveyor.backends.memory.ordered_ids import Lanes, OrderedIds
from conveyor.backends.memory.result_expiries import ResultExpiries
from conveyor.backends.memory.stored_rows import Row
from conveyor.backends.memory.wakeups import Wakeups
from conveyor.model.job import Job, JobState
from conveyor.model.lifecycle import Transition, check

S = JobState


class MemoryStore:
    """Every job, queue flag, shared record and liveness signal of one `memory://` URL.

    Used from any thread and any event loop of the process that made it (the sync
    facade runs on its own loop); each verb of the role objects (lifecycle.py,
    inspector.py, flow.py, records.py, liveness.py) holds `lock` for its whole step, so
    it is atomic as one SQL transaction or one Lua script is."""

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
        self.placed: dict[str, tuple[JobState, str, str | None, str | None, str | None]] = {}
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
        self.by_unique: dict[str, dict[str, None]] = {}  # unique key -> ids holding it
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

    def place(self, job_id: str) -> Job:
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
            self.by_unique.setdefault(job.unique_key, {})[job_id] = None
        self.placed[job_id] = (job.state, job.queue, job.unique_key, key, job.rate_key)
        self.slots.filed(job_id, job, order)
        return job

    def _unplace(self, job_id: str) -> None:
        placed = self.placed.pop(job_id, None)
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
            holders = self.by_unique.get(unique_key, {})
            holders.pop(job_id, None)
            if not holders:
                self.by_unique.pop(unique_key, None)

    def rewritten(self, job_id: str) -> bool:
        """File a job again after a field of its row was written directly (the test
        suite's raw writer, standing in for a damaged store); False if unknown."""
        with self.lock:
            if job_id not in self.rows:
                return False
            self.place(job_id)
            return True

    def move(
        self, job_id: str, old: JobState, new: JobState, why: Transition | None, **fields: Any
    ) -> Job:
        check(old, new, why)
        row = self.rows[job_id]
        row.update(fields)
        row["state"] = new.value
        return self.place(job_id)

    def insert(self, job_id: str, row: Row) -> None:
        """Store a new job's row, last in enqueue order; `place` files it."""
        self.rows[job_id] = row
        self._next_seq += 1
        self.seq[job_id] = self._next_seq

    def delete(self, job_id: str) -> None:
        self._unplace(job_id)  # a finished job: it held no slot of a key
        del self.rows[job_id]
        del self.seq[job_id]


def decode(job_id: str, row: Row) -> Job:
    """The row as a Job, by the one job codec; the id it is stored under wins over the
    stored field (as on Redis), so a job is always settled where it lives."""
    values = [row.get(name) for name in COLUMNS]
    values[0] = job_id
    return job_from_row(values)
