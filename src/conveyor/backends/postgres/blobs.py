"""The PostgreSQL blob store: a table in the backend's own schema (migration 3),
over the backend's connection pool; its SQL is in blobs.sql."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conveyor.backends.blobs import StoredBlob
from conveyor.backends.postgres.state import AsyncConn, PostgresState
from conveyor.backends.sqlfiles import load_queries


class PostgresBlobStore:
    def __init__(self, state: PostgresState) -> None:
        self._run = state.run
        self.clock = state.clock
        self.q = {
            name: text.replace("{schema}", f'"{state.schema}"')  # validated, see config.py
            for name, text in load_queries(
                __package__ or "conveyor.backends.postgres", "blobs.sql"
            ).items()
        }

    async def _rows(self, query: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        async def op(conn: AsyncConn) -> list[tuple[Any, ...]]:
            cur = await conn.execute(self.q[query], params)
            return await cur.fetchall() if cur.description is not None else []

        rows: list[tuple[Any, ...]] = await self._run(op)
        return rows

    async def put_blob(self, key: str, job_id: str, data: bytes) -> None:
        await self._rows(
            "put_blob", {"key": key, "job_id": job_id, "now": self.clock(), "data": data}
        )

    async def get_blob(self, key: str) -> bytes | None:
        rows = await self._rows("get_blob", {"key": key})
        return None if not rows else bytes(rows[0][0])

    async def delete_job_blobs(self, job_ids: Sequence[str], kind: str | None = None) -> int:
        async def op(conn: AsyncConn) -> int:
            cur = await conn.execute(
                self.q["delete_job_blobs"], {"job_ids": list(job_ids), "kind": kind}
            )
            return cur.rowcount

        deleted: int = await self._run(op)
        return deleted

    async def list_blobs(self, created_before: float, limit: int = 1000) -> list[StoredBlob]:
        rows = await self._rows("list_blobs", {"before": created_before, "limit": limit})
        return [StoredBlob(str(key), str(job_id), float(at)) for key, job_id, at in rows]

    async def close(self) -> None:
        pass  # the backend owns the pool
