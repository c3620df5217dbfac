"""Per-minute throughput and latency, kept in the backend's small shared records.

Each worker counts the attempts it finishes per minute and queue (completed,
failed, retried, dead, cancelled), with wait latency (due -> started) and run
latency (started -> finished) as sums, counts and a small histogram, and writes
one record per worker per minute with `put_record("stats", ...)` and a TTL of a
bit over an hour. Readers (the dashboard, the CLI, /metrics) merge the records
of every worker. That works on every backend without a new verb, and costs one
small write per worker every few seconds.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from conveyor.backends.params import Settlement
from conveyor.model.job import Job, JobState

STATS_NAMESPACE = "stats"
RECORD_TTL = 3900.0  # an hour of charts, and a little slack
# Upper bounds (seconds) of the latency histogram buckets; the last bucket is +Inf.
BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    1800.0,
)
OUTCOMES = ("completed", "failed", "retried", "dead", "cancelled")


def minute_of(epoch: float) -> int:
    """The start (epoch seconds) of the minute `epoch` falls in."""
    return int(epoch // 60) * 60


@dataclass(slots=True)
class Latency:
    total: float = 0.0
    count: int = 0
    buckets: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))

    def observe(self, seconds: float) -> None:
        seconds = max(0.0, seconds)
        self.total += seconds
        self.count += 1
        self.buckets[bisect.bisect_left(BUCKETS, seconds)] += 1

    def merge(self, other: Latency) -> None:
        self.total += other.total
        self.count += other.count
        for i, n in enumerate(other.buckets):
            self.buckets[i] += n

    @property
    def mean(self) -> float | None:
        return None if self.count == 0 else self.total / self.count

    def quantile(self, q: float) -> float | None:
        """Upper bound of the bucket holding the q-quantile (None if nothing observed)."""
        if self.count == 0:
            return None
        rank = math.ceil(q * self.count)
        seen = 0
        for i, n in enumerate(self.buckets):
            seen += n
            if seen >= rank:
                return BUCKETS[i] if i < len(BUCKETS) else math.inf
        return math.inf

    def to_json(self) -> dict[str, Any]:
        return {"sum": self.total, "count": self.count, "buckets": self.buckets}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Latency:
        buckets = [int(n) for n in data.get("buckets", [])]
        if len(buckets) != len(BUCKETS) + 1:  # another version's buckets: keep sum and count
            buckets = [0] * (len(BUCKETS) + 1)
        return cls(float(data.get("sum", 0.0)), int(data.get("count", 0)), buckets)


@dataclass(slots=True)
class QueueMinute:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    wait: Latency = field(default_factory=Latency)
    run: Latency = field(default_factory=Latency)

    def merge(self, other: QueueMinute) -> None:
        for name, n in other.counts.items():
            self.counts[name] = self.counts.get(name, 0) + n
        self.wait.merge(other.wait)
        self.run.merge(other.run)

    def to_json(self) -> dict[str, Any]:
        return {"counts": self.counts, "wait": self.wait.to_json(), "run": self.run.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QueueMinute:
        counts = dict.fromkeys(OUTCOMES, 0)
        counts.update({str(k): int(v) for k, v in data.get("counts", {}).items()})
        return cls(
            counts, Latency.from_json(data.get("wait", {})), Latency.from_json(data.get("run", {}))
        )


@dataclass(slots=True)
class Minute:
    """Everything finished in one minute, by queue."""

    start: int
    queues: dict[str, QueueMinute] = field(default_factory=dict)

    def queue(self, name: str) -> QueueMinute:
        # Looked up first: a QueueMinute built for setdefault and thrown away cost
        # about as much as the rest of a worker's per-job bookkeeping.
        found = self.queues.get(name)
        if found is None:
            found = self.queues[name] = QueueMinute()
        return found

    def total(self, queue: str | None = None) -> QueueMinute:
        out = QueueMinute()
        for name, q in self.queues.items():
            if queue is None or name == queue:
                out.merge(q)
        return out


def outcome_names(settlement: Settlement) -> tuple[str, ...]:
    """How an attempt counts: a retry and a dead letter are both failures."""
    if settlement.state is JobState.COMPLETED:
        return ("completed",)
    if settlement.state is JobState.RETRYABLE:
        return ("failed", "retried")
    if settlement.state is JobState.DEAD:
        return ("failed", "dead")
    if settlement.state is JobState.CANCELLED:
        return ("cancelled",)
    return ()  # snoozed or released: not an outcome


class MinuteRecorder:
    """The worker side: observe outcomes in memory; `records()` gives what to write.

    Observing is a dictionary update and never does I/O, so it cannot slow a job.
    """

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self._minutes: dict[int, Minute] = {}
        self._dirty: set[int] = set()

    def observe(self, job: Job, settlement: Settlement, run_seconds: float, now: float) -> None:
        names = outcome_names(settlement)
        if not names:
            return
        start = minute_of(now)
        minute = self._minutes.get(start)
        if minute is None:
            minute = self._minutes[start] = Minute(start)
        queue = minute.queue(job.queue)
        for name in names:
            queue.counts[name] += 1
        if job.started_at is not None:
            queue.wait.observe(job.started_at - job.run_at)
        queue.run.observe(run_seconds)
        self._dirty.add(start)

    def take_dirty(self, now: float) -> list[tuple[str, str]]:
        """(key, JSON) of each minute changed since the last call; forgets old minutes."""
        out = []
        for start in sorted(self._dirty):
            minute = self._minutes.get(start)
            if minute is None:  # restored after a failed write, and since forgotten
                continue
            record = {
                "minute": start,
                "worker": self.worker_id,
                "queues": {name: q.to_json() for name, q in minute.queues.items()},
            }
            out.append((f"{start:012d}:{self.worker_id}", json.dumps(record)))
        self._dirty.clear()
        current = minute_of(now)
        for start in [s for s in self._minutes if s < current - 120]:
            del self._minutes[start]
        return out

    def restore_dirty(self, records: Iterable[tuple[str, str]]) -> None:
        """A write failed: mark those minutes for the next flush."""
        for key, _ in records:
            self._dirty.add(int(key.split(":", 1)[0]))


def merge_records(records: Iterable[str], since: int) -> dict[int, Minute]:
    """Merge every worker's records (JSON text) from minute `since` on, by minute."""
    minutes: dict[int, Minute] = {}
    for text in records:
        try:
            data = json.loads(text)
            start = int(data["minute"])
            queues = data.get("queues", {})
        except (ValueError, KeyError, TypeError):
            continue  # a foreign or corrupt record must not break the dashboard
        if start < since:
            continue
        minute = minutes.setdefault(start, Minute(start))
        for name, q in queues.items():
            minute.queue(str(name)).merge(QueueMinute.from_json(q))
    return minutes
