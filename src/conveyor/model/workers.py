"""The `workers` record namespace: one shared record per live worker, written by
the worker itself (conveyor.worker.presence), read by operators (`conveyor
workers`, the dashboard, `app.admin.workers()`, as WorkerInfo) and by rescuers
(conveyor.worker.liveness). Here, below all three, so none imports another."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

WORKERS_NAMESPACE = "workers"  # a record per live worker (conveyor workers, dashboard)


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A live worker, as it last announced itself."""

    id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    in_flight: int
    started_at: float
    last_heartbeat: float
    version: str
    stopping: bool
    # One weight per queue (`-q critical=6,default=3`); None: the queues in strict order.
    queue_weights: tuple[float, ...] | None = None

    @classmethod
    def from_json(cls, key: str, text: str) -> WorkerInfo:
        data: dict[str, Any] = json.loads(text)
        queues, weights = data.get("queues", []), data.get("queue_weights")
        return cls(
            id=str(data.get("id", key)),
            host=str(data.get("host", "")),
            pid=int(data.get("pid", 0)),
            queues=tuple(str(q) for q in queues),
            concurrency=int(data.get("concurrency", 0)),
            in_flight=int(data.get("in_flight", 0)),
            started_at=float(data.get("started_at", 0.0)),
            last_heartbeat=float(data.get("last_heartbeat", 0.0)),
            version=str(data.get("version", "")),
            stopping=bool(data.get("stopping", False)),
            queue_weights=tuple(float(w) for w in weights)
            if isinstance(weights, list) and len(weights) == len(queues)
            else None,
        )
