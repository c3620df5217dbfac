"""A worker's liveness on a memory store: a signal held in the store itself.

Every worker of the process takes a token the store lists as held (`held_signals`)
for the worker's whole life; dropping it (a stop, or `abandon()` standing in for a
crash) takes it off the list, and a rescuer that finds an announced token missing
knows the holder is gone. Like the other backends' signals it ends with what holds
it: here the process, which takes the store along.

Token: `memory:<store nonce>:<n>`. The nonce is the store's own, so a token of
another store (or of an earlier run) is not judged: its worker falls back to its lease.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping

from conveyor.backends.liveness import SignalHolder
from conveyor.backends.memory.registry import StoreAccess
from conveyor.backends.memory.store import MemoryStore

SIGNAL = "in-process signal"
_PREFIX = "memory"
_numbers = itertools.count(1)


class InProcessHolder(SignalHolder):
    def __init__(self, store: MemoryStore, worker_id: str) -> None:
        super().__init__(SIGNAL, worker_id)
        self.store = store
        self._held: str | None = None

    async def _take(self) -> str:
        token = f"{_PREFIX}:{self.store.liveness_nonce}:{next(_numbers)}"
        with self.store.lock:
            self.store.held_signals[token] = self.worker_id
        self._held = token
        return token

    async def _watch(self) -> None:
        await asyncio.Event().wait()  # nothing can take it while the process lives

    async def _close(self) -> None:
        token, self._held = self._held, None
        if token is not None:
            with self.store.lock:
                self.store.held_signals.pop(token, None)


class MemoryLiveness:
    """WorkerLiveness on a memory store: each worker's token listed in the store."""

    def __init__(self, access: StoreAccess) -> None:
        self.access = access

    async def hold_liveness(self, worker_id: str) -> InProcessHolder:
        holder = InProcessHolder(self.access.store, worker_id)
        await holder.start(timeout=10.0)
        return holder

    def dead_workers(self, candidates: Mapping[str, str]) -> set[str]:
        store = self.access.store
        mine = f"{_PREFIX}:{store.liveness_nonce}:"
        with store.lock:
            return {
                worker_id
                for worker_id, token in candidates.items()
                if token.startswith(mine) and store.held_signals.get(token) != worker_id
            }
