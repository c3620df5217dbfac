"""Rescuing a dead worker's jobs by its liveness signal, long before its lease ends
(the rules; presence.py runs them in each worker).

A worker on a backend with `WorkerLiveness` takes its signal before its first
claim and announces the signal's token in its `workers` record. Every other
worker looks often (`WorkerConfig.liveness_interval`): records with a token,
then the backend's verdict on those tokens. A worker whose signal is gone on two
looks `liveness_grace` apart, with its record unchanged, is dead: the first
rescuer to swap its record for one without a token (compare-and-set, so one
rescuer wins and a worker that announced meanwhile is left alone) releases its
jobs as a `WorkerLost` attempt, fenced by each lease token like every rescue.

Why the grace: a live worker whose liveness connection blipped has its signal
back within milliseconds, and says at once that it has none meanwhile (it
announces without a token and claims nothing until that is written), so it is
never judged by a signal it lost. Why only announced tokens: a worker of an
older version, or on a backend without the capability, has none, and falls back
to its lease; so does every worker whose record expired.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from conveyor.backends.capabilities import WorkerLiveness
from conveyor.backends.contract import Backend
from conveyor.backends.params import RecordSwap
from conveyor.model.workers import WORKERS_NAMESPACE
from conveyor.worker.rescue import release_worker_jobs

LIVENESS_FIELD = "liveness"  # in a worker's record: the token of its liveness signal
_TOMBSTONE_TTL = 1.0  # seconds a dead worker's record stays, without its token


def announced_token(record: str) -> str | None:
    try:
        token = json.loads(record).get(LIVENESS_FIELD)
    except (ValueError, AttributeError):
        return None  # a record from an incompatible version: not judged
    return token if isinstance(token, str) and token else None


def without_token(record: str) -> str:
    """The record as a rescuer leaves it: still a valid record, judged by nobody."""
    fields = json.loads(record)
    fields.pop(LIVENESS_FIELD, None)
    return json.dumps(fields)


@dataclass(frozen=True, slots=True)
class _Suspect:
    record: str
    since: float


class DeathWatch:
    """Confirms deaths: a worker is dead once its signal was seen gone for
    `grace` seconds with the same record (a worker that announced meanwhile is
    alive, whatever its old token says)."""

    def __init__(self, grace: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.grace = grace
        self.clock = clock
        self._suspects: dict[str, _Suspect] = {}
        # Won (their record swapped) but not yet released: a backend error between the
        # two. Retried on the next look, since nobody else judges them any more.
        self.unreleased: set[str] = set()

    def observe(self, gone: Mapping[str, str]) -> list[tuple[str, str]]:
        """`gone`: worker id -> its record, for every worker whose signal is gone
        now. Returns the (id, record) pairs confirmed dead."""
        now = self.clock()
        confirmed = []
        for worker_id, record in gone.items():
            suspect = self._suspects.get(worker_id)
            if suspect is None or suspect.record != record:
                self._suspects[worker_id] = suspect = _Suspect(record, now)
            if now - suspect.since >= self.grace:
                confirmed.append((worker_id, record))
        self._suspects = {
            worker_id: s
            for worker_id, s in self._suspects.items()
            if worker_id in gone and (worker_id, s.record) not in confirmed
        }
        return confirmed

    def next_look(self) -> float | None:
        """When the earliest suspect can be confirmed, if any."""
        return min((s.since + self.grace for s in self._suspects.values()), default=None)


async def rescue_dead_workers(
    backend: Backend, liveness: WorkerLiveness, own_id: str, watch: DeathWatch, now: float
) -> dict[str, list[str]]:
    """One look: release the jobs of every worker confirmed dead (`now` dates their
    errors). Returns the jobs released, by worker id (only workers this rescuer won)."""
    records = await backend.list_records(WORKERS_NAMESPACE)
    candidates = {
        worker_id: token
        for worker_id, record in records.items()
        if worker_id != own_id and (token := announced_token(record)) is not None
    }
    dead = await liveness.dead_workers(candidates) if candidates else set()
    for worker_id, record in watch.observe({w: records[w] for w in dead}):
        # The record changes first: from then on nobody judges that token again.
        if await backend.compare_and_set_record(
            RecordSwap(
                namespace=WORKERS_NAMESPACE,
                key=worker_id,
                expected=record,
                value=without_token(record),
                ttl=_TOMBSTONE_TTL,
            )
        ):
            watch.unreleased.add(worker_id)
        # else another rescuer won, or the worker announced meanwhile: alive after all
    released: dict[str, list[str]] = {}
    for worker_id in sorted(watch.unreleased):
        released[worker_id] = await release_worker_jobs(
            backend,
            worker_id,
            now,
            charge=True,
            message=f"worker {worker_id} died (its {liveness.liveness_signal} is gone)",
        )
        watch.unreleased.discard(worker_id)
    return released
