"""The shared-record verbs on a memory store: each one step under the store's lock,
with the rules every backend shares (conveyor.backends.records). Expiry follows the
backend's clock, as everywhere."""

from __future__ import annotations

from conveyor.backends.memory.store import MemoryStore
from conveyor.backends.records import expiry, incremented


def _live(
    store: MemoryStore, namespace: str, key: str, now: float
) -> tuple[str, float | None] | None:
    held = store.records.get((namespace, key))
    if held is None:
        return None
    if held[1] is not None and held[1] <= now:
        del store.records[(namespace, key)]
        return None
    return held


def get(store: MemoryStore, namespace: str, key: str, now: float) -> str | None:
    with store.lock:
        held = _live(store, namespace, key, now)
        return None if held is None else held[0]


def list_all(store: MemoryStore, namespace: str, now: float) -> dict[str, str]:
    with store.lock:
        keys = sorted(k for ns, k in store.records if ns == namespace)
        live = ((k, _live(store, namespace, k, now)) for k in keys)
        return {k: held[0] for k, held in live if held is not None}


def put(
    store: MemoryStore, namespace: str, key: str, value: str, ttl: float | None, now: float
) -> None:
    expires_at = expiry(now, ttl)
    with store.lock:
        store.records[(namespace, key)] = (value, expires_at)


def compare_and_set(
    store: MemoryStore,
    namespace: str,
    key: str,
    expected: str | None,
    value: str,
    ttl: float | None,
    now: float,
) -> bool:
    expires_at = expiry(now, ttl)
    with store.lock:
        held = _live(store, namespace, key, now)
        if (None if held is None else held[0]) != expected:
            return False
        store.records[(namespace, key)] = (value, expires_at)
        return True


def incr(
    store: MemoryStore, namespace: str, key: str, amount: int, ttl: float | None, now: float
) -> int:
    with store.lock:
        held = _live(store, namespace, key, now)
        value = incremented(namespace, key, None if held is None else held[0], amount)
        expires_at = expiry(now, ttl) if held is None else held[1]
        store.records[(namespace, key)] = (str(value), expires_at)
        return value


def delete(store: MemoryStore, namespace: str, key: str, now: float) -> bool:
    with store.lock:
        held = _live(store, namespace, key, now)
        store.records.pop((namespace, key), None)
        return held is not None
