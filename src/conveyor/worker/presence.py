"""A worker's presence: its record in `workers`, its liveness signal, and its watch
over the other workers' signals (the rules are in liveness.py).

The record is what `conveyor workers` and the dashboard list, and what names the
worker's liveness token to the others. It is kept true: when the signal is lost
the token leaves the record before anything else, and claims wait until it has.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

from conveyor.backends.capabilities import LivenessHold, WorkerLiveness
from conveyor.backends.contract import Backend
from conveyor.backends.params import RecordKey, RecordWrite
from conveyor.model.clock import Clock
from conveyor.model.workers import WORKERS_NAMESPACE
from conveyor.plugins import closed_within
from conveyor.worker.config import WorkerConfig
from conveyor.worker.liveness import LIVENESS_FIELD, DeathWatch, rescue_dead_workers

log = logging.getLogger("conveyor.worker")


class Presence:
    """One worker's presence. `record()` gives the record's other fields."""

    def __init__(
        self,
        worker_id: str,
        config: WorkerConfig,
        clock: Clock,
        closing: asyncio.Event,
        record: Callable[[], dict[str, object]],
    ) -> None:
        self.worker_id = worker_id
        self.config = config
        self.clock = clock
        self.closing = closing  # set when the worker's run ends: the loops stop
        self.record = record
        self.liveness: WorkerLiveness | None = None
        self.hold: LivenessHold | None = None
        self.announced_token: str | None = None  # the token our record names now
        # Claims wait while the record names a signal this worker no longer holds (a
        # rescuer would take those jobs), and until the worker first announced itself.
        self.claims_allowed = asyncio.Event()
        self._backend: Backend | None = None

    async def start(self, backend: Backend) -> None:
        """Take the liveness signal, if the backend has one: before the first claim,
        so every job this worker holds is covered by it."""
        self._backend = backend
        if self.config.liveness and isinstance(backend, WorkerLiveness):
            self.liveness = backend
            self.hold = await backend.hold_liveness(self.worker_id)
        else:
            self.claims_allowed.set()

    async def leave(self) -> None:
        """After the last outcome is written: the record goes, then the signal, so that
        nobody takes the signal's end for a death."""
        assert self._backend is not None
        try:
            await self._backend.delete_record(
                RecordKey(namespace=WORKERS_NAMESPACE, key=self.worker_id)
            )
        except Exception:
            pass
        if self.hold is not None:
            await self.hold.release()

    # --- the record -----------------------------------------------------------------------
    async def keep_announced(self) -> None:
        """Keep the record alive (every heartbeat interval), and announce again at once
        when the liveness token changes."""
        while not self.closing.is_set():
            token = None if self.hold is None else self.hold.token
            try:
                await self.announce(token)
                delay = self.config.heartbeat_every
            except Exception as exc:
                log.warning("announcing this worker failed: %s", exc)
                delay = min(self.config.heartbeat_every, 0.5)
            waits: list[asyncio.Task[object]] = [asyncio.create_task(self.closing.wait())]
            if self.hold is not None:
                waits.append(asyncio.create_task(self.hold.changed(token)))
            await asyncio.wait(waits, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
            for waiting in waits:
                waiting.cancel()

    async def announce(self, token: str | None) -> None:
        """Write the record, naming the liveness token `token` (None: no signal held)."""
        assert self._backend is not None
        if self.announced_token is not None and token != self.announced_token:
            self.claims_allowed.clear()  # until the record stops naming the old one
        fields = {**self.record(), LIVENESS_FIELD: token}
        await self._backend.put_record(
            RecordWrite(
                namespace=WORKERS_NAMESPACE,
                key=self.worker_id,
                value=json.dumps(fields),
                ttl=self.config.heartbeat_every * 3,
            )
        )
        self.announced_token = token
        if self.hold is None or self.hold.token == token:
            self.claims_allowed.set()

    # --- the watch over the others ----------------------------------------------------
    async def watch(self) -> None:
        """Look at the other workers' signals every `liveness_interval`, and sooner when
        a suspect is due; return the jobs of those that died."""
        assert self._backend is not None and self.liveness is not None
        deaths = DeathWatch(self.config.liveness_grace)
        failures = 0
        while True:
            due = deaths.next_look()
            delay = (
                self.config.liveness_interval
                if due is None
                else max(0.0, min(self.config.liveness_interval, due - deaths.clock()))
            )
            if await closed_within(self.closing, delay):
                return
            try:
                released = await rescue_dead_workers(
                    self._backend, self.liveness, self.worker_id, deaths, self.clock()
                )
                failures = 0
            except Exception as exc:
                failures += 1
                if failures == 1 or failures % 1000 == 0:  # four times a second: do not flood
                    log.warning(
                        "looking at other workers' liveness failed (%d times): %s", failures, exc
                    )
                continue
            for worker_id, job_ids in released.items():
                if job_ids:
                    log.warning(
                        "worker %s died (its %s is gone): returned its %d jobs: %s",
                        worker_id,
                        self.liveness.liveness_signal,
                        len(job_ids),
                        job_ids[:10],
                    )
