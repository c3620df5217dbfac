"""The Redis blob store: under the backend's own prefix, one hash per job
(`{prefix}:blob:<job digest>`: the job id, when its first blob was written, and
each blob as `k:<key>`), plus a sorted set of those hashes by time for the orphan
sweep. Each hash has a TTL longer than a job is kept (`DEFAULT_TTL`), so a blob
outlives its job only if the prune loop never runs; the sweep deletes it sooner."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conveyor.backends.blobs import StoredBlob, digest_of_key, is_of, job_digest
from conveyor.backends.redis.connection import RedisConnection
from conveyor.backends.redis.errors import translated

# Thirty days: longer than the default retention of dead jobs (fourteen days),
# so a job never outlives its blob.
DEFAULT_TTL = 30 * 24 * 3600
_FIELD = "k:"


class RedisBlobStore:
    def __init__(self, connection: RedisConnection, ttl: int = DEFAULT_TTL) -> None:
        self.connection = connection  # the backend's: its client exists only while open
        self.keys = connection.keys
        self.ttl = ttl

    @translated
    async def put_blob(self, key: str, job_id: str, data: bytes) -> None:
        digest = job_digest(job_id)
        hash_key = self.keys.blob(digest)
        now = self.connection.clock()
        async with self.connection.client.pipeline(transaction=True) as tx:
            tx.hset(hash_key, _FIELD + key, data)
            tx.hsetnx(hash_key, "job", job_id)
            tx.hsetnx(hash_key, "at", repr(now))
            tx.expire(hash_key, self.ttl)
            tx.zadd(self.keys.blobs, {digest: now}, nx=True)
            await tx.execute()

    @translated
    async def get_blob(self, key: str) -> bytes | None:
        try:
            data = await self.connection.client.hget(
                self.keys.blob(digest_of_key(key)), _FIELD + key
            )
        except UnicodeDecodeError:
            # The client decodes replies as UTF-8 and blobs are UTF-8 JSON: bytes that
            # are not were changed in the store, and fail the hash check as such.
            return b"\xff(not UTF-8)"
        return None if data is None else str(data).encode("utf-8")

    @translated
    async def delete_job_blobs(self, job_ids: Sequence[str], kind: str | None = None) -> int:
        digests = list({job_digest(i) for i in job_ids})
        if not digests:
            return 0
        client = self.connection.client
        # One round trip reads every hash's fields, whatever the number of jobs: a
        # round trip each made deleting many jobs over a slow link take minutes.
        fields_of = await self._fields(client, digests)
        if kind is not None:  # some of a job's blobs: its hash stays, with the rest
            return await self._delete_fields(client, digests, fields_of, kind)
        deleted = sum(1 for fields in fields_of for f in fields if str(f).startswith(_FIELD))
        async with client.pipeline(transaction=True) as tx:
            tx.unlink(*(self.keys.blob(d) for d in digests))
            tx.zrem(self.keys.blobs, *digests)
            await tx.execute()
        return deleted

    async def _fields(self, client: Any, digests: Sequence[str]) -> list[list[Any]]:
        async with client.pipeline(transaction=False) as pipe:
            for digest in digests:
                pipe.hkeys(self.keys.blob(digest))
            return list(await pipe.execute())

    async def _delete_fields(
        self, client: Any, digests: Sequence[str], fields_of: Sequence[Sequence[Any]], kind: str
    ) -> int:
        async with client.pipeline(transaction=False) as pipe:
            for digest, fields in zip(digests, fields_of, strict=True):
                doomed = [
                    f
                    for f in fields
                    if str(f).startswith(_FIELD) and is_of(str(f)[len(_FIELD) :], kind)
                ]
                if doomed:
                    pipe.hdel(self.keys.blob(digest), *doomed)
            return sum(await pipe.execute())

    @translated
    async def list_blobs(self, created_before: float, limit: int = 1000) -> list[StoredBlob]:
        client = self.connection.client
        found: list[StoredBlob] = []
        digests = await client.zrangebyscore(
            self.keys.blobs, "-inf", f"({created_before!r}", start=0, num=limit
        )
        for digest in digests:
            hash_key = self.keys.blob(str(digest))
            job_id, at = await client.hmget(hash_key, "job", "at")
            if job_id is None:  # expired by its TTL: forget it
                await client.zrem(self.keys.blobs, digest)
                continue
            fields = await client.hkeys(hash_key)
            found += [
                StoredBlob(str(f)[len(_FIELD) :], str(job_id), float(at or 0.0))
                for f in fields
                if str(f).startswith(_FIELD)
            ]
        return found[:limit]

    async def close(self) -> None:
        pass  # the backend owns the client
