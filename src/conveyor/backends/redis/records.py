"""The shared-record verbs on Redis: each one script (scripts/*_record*.lua), so
atomic under any number of concurrent writers; and a concurrency key's set limit
(FlowState.set_key_limit, conveyor.rules.adaptive), small shared state of the same
kind: a string beside the key's slots, read by the rebalance in every script that moves
a keyed job (_lib.lua), written by scripts/set_key_limit.lua together with a rebalance.

TTLs follow the injected clock, not Redis EXPIRE (which runs on the server's
clock): each namespace is a hash of values plus a zset of expiry times.
"""

from __future__ import annotations

from typing import Any

from redis.exceptions import ResponseError

from conveyor.backends.params import (
    BucketHold,
    KeyLimit,
    RecordIncrement,
    RecordKey,
    RecordSwap,
    RecordWrite,
)
from conveyor.backends.records import expiry
from conveyor.backends.redis.codec import float_arg, optional_arg
from conveyor.backends.redis.errors import translated
from conveyor.backends.redis.keys import Keys
from conveyor.backends.redis.script_calls import Scripts
from conveyor.model.clock import Clock

NOT_AN_INTEGER = "CONVEYOR_NOT_AN_INTEGER"


class RedisRecords:
    """Mixed into RedisBackend, whose client and scripts it uses."""

    url: str
    clock: Clock
    keys: Keys

    @property
    def client(self) -> Any:
        raise NotImplementedError

    @property
    def scripts(self) -> Scripts:
        raise NotImplementedError

    def _record_keys(self, namespace: str) -> list[str]:
        return [self.keys.meta(namespace), self.keys.meta_expiry(namespace)]

    def _expires_at(self, ttl: float | None) -> str:
        expires_at = expiry(self.clock(), ttl)
        return "" if expires_at is None else float_arg(expires_at)

    @translated
    async def get_record(self, record_key: RecordKey) -> str | None:
        namespace, key = record_key.namespace, record_key.key
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.hget(self.keys.meta(namespace), key)
            pipe.zscore(self.keys.meta_expiry(namespace), key)
            value, expires_at = await pipe.execute()
        if value is None or (expires_at is not None and expires_at <= self.clock()):
            return None
        return str(value)

    @translated
    async def list_records(self, namespace: str) -> dict[str, str]:
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.hgetall(self.keys.meta(namespace))
            pipe.zrangebyscore(self.keys.meta_expiry(namespace), "-inf", float_arg(self.clock()))
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
        await self.scripts.call(
            "put_record",
            self._record_keys(namespace),
            [float_arg(self.clock()), key, value, self._expires_at(ttl)],
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
        stored = await self.scripts.call(
            "set_record_if",
            self._record_keys(namespace),
            [float_arg(self.clock()), key, optional_arg(expected), value, self._expires_at(ttl)],
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
            value = await self.scripts.call(
                "incr_record",
                self._record_keys(namespace),
                [float_arg(self.clock()), key, int(amount), self._expires_at(ttl)],
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
        deleted = await self.scripts.call(
            "delete_record", self._record_keys(namespace), [float_arg(self.clock()), key]
        )
        return bool(deleted)

    @translated
    async def hold_rate_bucket(self, bucket_hold: BucketHold) -> None:
        key, tokens, until = bucket_hold.key, bucket_hold.tokens, bucket_hold.until
        # One HSET: atomic against claim.lua, which reads and writes the same fields.
        await self.client.hset(
            self.keys.bucket(key),
            mapping={"tokens": float_arg(tokens), "updated_at": float_arg(until)},
        )

    async def set_key_limit(self, key_limit: KeyLimit) -> None:
        concurrency_key, limit = key_limit.concurrency_key, key_limit.limit
        await self.scripts.call(
            "set_key_limit",
            [self.keys.key_limit(concurrency_key)],
            [concurrency_key, "" if limit is None else str(limit)],
        )

    @translated
    async def key_limit(self, concurrency_key: str) -> int | None:
        value = await self.client.get(self.keys.key_limit(concurrency_key))
        return None if value is None else int(value)
