"""The shared-record verbs on Redis (SharedRecords): each one script
(scripts/*_record*.lua), so atomic under any number of concurrent writers.

TTLs follow the injected clock, not Redis EXPIRE (which runs on the server's
clock): each namespace is a hash of values plus a zset of expiry times.
"""

from __future__ import annotations

from redis.exceptions import ResponseError

from conveyor.backends.params import RecordIncrement, RecordKey, RecordSwap, RecordWrite
from conveyor.backends.records import expiry
from conveyor.backends.redis.codec import float_arg, optional_arg
from conveyor.backends.redis.connection import RedisConnection
from conveyor.backends.redis.errors import translated

NOT_AN_INTEGER = "CONVEYOR_NOT_AN_INTEGER"


class RedisRecords:
    def __init__(self, connection: RedisConnection) -> None:
        self.connection = connection
        self.keys = connection.keys

    def _record_keys(self, namespace: str) -> list[str]:
        return [self.keys.meta(namespace), self.keys.meta_expiry(namespace)]

    def _expires_at(self, ttl: float | None) -> str:
        expires_at = expiry(self.connection.clock(), ttl)
        return "" if expires_at is None else float_arg(expires_at)

    @translated
    async def get_record(self, record_key: RecordKey) -> str | None:
        namespace, key = record_key.namespace, record_key.key
        async with self.connection.client.pipeline(transaction=True) as pipe:
            pipe.hget(self.keys.meta(namespace), key)
            pipe.zscore(self.keys.meta_expiry(namespace), key)
            value, expires_at = await pipe.execute()
        if value is None or (expires_at is not None and expires_at <= self.connection.clock()):
            return None
        return str(value)

    @translated
    async def list_records(self, namespace: str) -> dict[str, str]:
        async with self.connection.client.pipeline(transaction=True) as pipe:
            pipe.hgetall(self.keys.meta(namespace))
            pipe.zrangebyscore(
                self.keys.meta_expiry(namespace), "-inf", float_arg(self.connection.clock())
            )
            values, expired = await pipe.execute()
        gone = set(expired)
        return {k: values[k] for k in sorted(values) if k not in gone}

    @translated
    async def put_record(self, record_write: RecordWrite) -> None:
        namespace, key, value, ttl = (
            record_write.namespace,
            record_write.key,
            record_write.value,
            record_write.ttl,
        )
        await self.connection.scripts.call(
            "put_record",
            self._record_keys(namespace),
            [float_arg(self.connection.clock()), key, value, self._expires_at(ttl)],
        )

    async def put_record_if_absent(self, record_write: RecordWrite) -> bool:
        namespace, key, value, ttl = (
            record_write.namespace,
            record_write.key,
            record_write.value,
            record_write.ttl,
        )
        return await self.compare_and_set_record(
            RecordSwap(namespace=namespace, key=key, expected=None, value=value, ttl=ttl)
        )

    @translated
    async def compare_and_set_record(self, record_swap: RecordSwap) -> bool:
        namespace, key, expected, value, ttl = (
            record_swap.namespace,
            record_swap.key,
            record_swap.expected,
            record_swap.value,
            record_swap.ttl,
        )
        stored = await self.connection.scripts.call(
            "set_record_if",
            self._record_keys(namespace),
            [
                float_arg(self.connection.clock()),
                key,
                optional_arg(expected),
                value,
                self._expires_at(ttl),
            ],
        )
        return bool(stored)

    @translated
    async def incr_record(self, record_increment: RecordIncrement) -> int:
        namespace, key, amount, ttl = (
            record_increment.namespace,
            record_increment.key,
            record_increment.amount,
            record_increment.ttl,
        )
        try:
            value = await self.connection.scripts.call(
                "incr_record",
                self._record_keys(namespace),
                [float_arg(self.connection.clock()), key, int(amount), self._expires_at(ttl)],
            )
        except ResponseError as exc:
            if NOT_AN_INTEGER not in str(exc):
                raise
            held = str(exc).split(NOT_AN_INTEGER, 1)[1].strip()
            raise ValueError(
                f"record {namespace}/{key} holds {held!r}, not an integer; "
                "incr_record counts only what it created"
            ) from None
        return int(value)

    @translated
    async def delete_record(self, record_key: RecordKey) -> bool:
        namespace, key = record_key.namespace, record_key.key
        deleted = await self.connection.scripts.call(
            "delete_record", self._record_keys(namespace), [float_arg(self.connection.clock()), key]
        )
        return bool(deleted)
