"""Writes attempt outcomes in batches: whatever piled up while the last write
ran goes in the next one, so a busy worker writes few, large batches and an idle
one writes at once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from conveyor.backends.contract import Backend
from conveyor.backends.params import Settlement

log = logging.getLogger("conveyor.worker")


class Completer:
    def __init__(
        self,
        backend: Backend,
        on_settled: Callable[[list[Settlement], list[str]], None],
        max_batch: int = 500,
    ) -> None:
        self.backend = backend
        self.on_settled = on_settled
        self.max_batch = max_batch
        self._pending: list[Settlement] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._closing = False

    def add(self, settlement: Settlement) -> None:
        self._pending.append(settlement)
        self._idle.clear()
        self._wake.set()

    async def flushed(self) -> None:
        """Wait until everything added so far is written."""
        await self._idle.wait()

    def close(self) -> None:
        self._closing = True
        self._wake.set()

    async def run(self) -> None:
        failures = 0
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                batch = self._pending[: self.max_batch]
                try:
                    stale = await self.backend.settle_jobs(batch)
                except Exception as exc:
                    failures += 1
                    delay = min(0.05 * 2**failures, 5.0)
                    log.warning(
                        "writing %d job outcomes failed (%s); retrying in %.2fs",
                        len(batch),
                        exc,
                        delay,
                    )
                    await asyncio.sleep(delay)
                    continue
                failures = 0
                del self._pending[: len(batch)]
                self.on_settled(batch, stale)
            self._idle.set()
            if self._closing:
                return
