"""The memory blob store: a dict kept by the `MemoryStore` of the URL, so blobs
live and are dropped with its jobs; the clock is the backend's (the app's)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from conveyor.backends.blobs import StoredBlob, is_of
from conveyor.model.clock import Clock


@dataclass
class BlobTable:
    """The blobs of one store: key -> (job id, written at, bytes)."""

    rows: dict[str, tuple[str, float, bytes]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class MemoryBlobStore:
    def __init__(self, table: BlobTable, clock: Clock) -> None:
        self.table = table
        self.clock = clock

    async def put_blob(self, key: str, job_id: str, data: bytes) -> None:
        with self.table.lock:
            self.table.rows.setdefault(key, (job_id, self.clock(), bytes(data)))

    async def get_blob(self, key: str) -> bytes | None:
        with self.table.lock:
            row = self.table.rows.get(key)
        return None if row is None else row[2]

    async def delete_job_blobs(self, job_ids: Sequence[str], kind: str | None = None) -> int:
        gone = set(job_ids)
        with self.table.lock:
            keys = [
                k
                for k, (job_id, _, _) in self.table.rows.items()
                if job_id in gone and is_of(k, kind)
            ]
            for key in keys:
                del self.table.rows[key]
        return len(keys)

    async def list_blobs(self, created_before: float, limit: int = 1000) -> list[StoredBlob]:
        with self.table.lock:
            found = [
                StoredBlob(k, job_id, at)
                for k, (job_id, at, _) in self.table.rows.items()
                if at < created_before
            ]
        found.sort(key=lambda b: b.created_at)
        return found[:limit]

    async def close(self) -> None:
        pass
