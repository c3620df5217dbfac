"""The shared-record verbs (SharedRecords) on a memory store: each one step under the
store's lock, with the rules every backend shares (conveyor.backends.records). Expiry
follows the backend's clock, as everywhere."""

from __future__ import annotations

from conveyor.backends.memory.registry import StoreAccess
from conveyor.backends.memory.store import MemoryStore
from conveyor.backends.params import RecordIncrement, RecordKey, RecordSwap, RecordWrite
from conveyor.backends.records import expiry, incremented


class MemoryRecords:
    def __init__(self, access: StoreAccess) -> None:
        self.access = access

    def get_record(self, record_key: RecordKey) -> str | None:
        store, now = self.access.store, self.access.clock()
        with store.lock:
            held = _live(store, record_key.namespace, record_key.key, now)
            return None if held is None else held[0]

    def list_records(self, namespace: str) -> dict[str, str]:
        store, now = self.access.store, self.access.clock()
        with store.lock:
            keys = sorted(k for ns, k in store.records if ns == namespace)
            live = ((k, _live(store, namespace, k, now)) for k in keys)
            return {k: held[0] for k, held in live if held is not None}

    def put_record(self, record_write: RecordWrite) -> None:
        store, now = self.access.store, self.access.clock()
        expires_at = expiry(now, record_write.ttl)
        with store.lock:
            store.records[(record_write.namespace, record_write.key)] = (
                record_write.value,
                expires_at,
            )

    def put_record_if_absent(self, record_write: RecordWrite) -> bool:
        namespace, key, value, ttl = (
            record_write.namespace,
            record_write.key,
            record_write.value,
            record_write.ttl,
        )
        return self._compare_and_set(namespace, key, None, value, ttl)

    def compare_and_set_record(self, record_swap: RecordSwap) -> bool:
        namespace, key, expected, value, ttl = (
            record_swap.namespace,
            record_swap.key,
            record_swap.expected,
            record_swap.value,
            record_swap.ttl,
        )
        return self._compare_and_set(namespace, key, expected, value, ttl)

    def _compare_and_set(
        self, namespace: str, key: str, expected: str | None, value: str, ttl: float | None
    ) -> bool:
        store, now = self.access.store, self.access.clock()
        expires_at = expiry(now, ttl)
        with store.lock:
            held = _live(store, namespace, key, now)
            if (None if held is None else held[0]) != expected:
                return False
            store.records[(namespace, key)] = (value, expires_at)
            return True

    def incr_record(self, record_increment: RecordIncrement) -> int:
        namespace, key = record_increment.namespace, record_increment.key
        store, now = self.access.store, self.access.clock()
        with store.lock:
            held = _live(store, namespace, key, now)
            value = incremented(
                namespace, key, None if held is None else held[0], record_increment.amount
            )
            expires_at = expiry(now, record_increment.ttl) if held is None else held[1]
            store.records[(namespace, key)] = (str(value), expires_at)
            return value

    def delete_record(self, record_key: RecordKey) -> bool:
        namespace, key = record_key.namespace, record_key.key
        store, now = self.access.store, self.access.clock()
        with store.lock:
            held = _live(store, namespace, key, now)
            store.records.pop((namespace, key), None)
            return held is not None


def _live(
    store: MemoryStore, namespace: str, key: str, now: float
) -> tuple[str, float | None] | None:
    """The record, unless absent or expired (an expired one is deleted on the way)."""
    held = store.records.get((namespace, key))
    if held is None:
        return None
    if held[1] is not None and held[1] <= now:
        del store.records[(namespace, key)]
        return None
    return held
