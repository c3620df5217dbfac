"""Keeping a liveness signal: the part every backend's holder shares.

A holder takes its signal (a lock, a named connection, a locked file), then
watches what holds it. When that is lost (the server closed the connection, a
restart), the token goes to None at once, so the worker can say so before anyone
judges it, and the holder takes the signal again, at once and then with backoff.
Each backend supplies the three steps (`_take`, `_watch`, `_close`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod

log = logging.getLogger("conveyor.liveness")

_LONGEST_BACKOFF = 5.0


class SignalHolder(ABC):
    """A `LivenessHold` built from a backend's take/watch/close steps."""

    def __init__(self, what: str, worker_id: str) -> None:
        self.what = what
        self.worker_id = worker_id
        self._token: str | None = None
        self._change = asyncio.Event()  # replaced on every change: waiters see each one
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    # --- the backend's part -----------------------------------------------------------
    @abstractmethod
    async def _take(self) -> str:
        """Connect, take the signal and return its token (raise if it cannot)."""

    @abstractmethod
    async def _watch(self) -> None:
        """Return or raise once the signal is lost."""

    @abstractmethod
    async def _close(self) -> None:
        """Let go of what holds the signal (it ends as it would with the process)."""

    # --- LivenessHold -----------------------------------------------------------------
    @property
    def token(self) -> str | None:
        return self._token

    async def changed(self, since: str | None) -> str | None:
        while self._token == since:
            await self._change.wait()
        return self._token

    async def start(self, timeout: float) -> None:
        """One try now (at most `timeout` seconds); whatever its outcome, keep the
        signal in the background."""
        try:
            async with asyncio.timeout(timeout):
                token = await self._take()
            self._set(token)
        except Exception as exc:
            log.warning(
                "worker %s: could not take its %s (%s); retrying, its jobs are "
                "covered by their leases meanwhile",
                self.worker_id,
                self.what,
                exc,
            )
            await self._close_quietly()
        self._task = asyncio.create_task(self._keep(), name=f"conveyor-liveness:{self.worker_id}")

    async def release(self) -> None:
        await self._stop()

    async def abandon(self) -> None:
        # The same as a release: what a holder lets go of, a killed process loses too.
        await self._stop()

    # --- the loop ---------------------------------------------------------------------
    async def _stop(self) -> None:
        # Closing too, not only cancelling: a driver's read under a timeout can swallow
        # a cancel (redis-py), and a read whose connection closed returns for sure.
        self._stopping = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await self._close_quietly()
            await asyncio.gather(task, return_exceptions=True)
        self._set(None)
        await self._close_quietly()

    async def _close_quietly(self) -> None:
        with contextlib.suppress(Exception):  # it is going anyway
            await self._close()

    def _set(self, token: str | None) -> None:
        if token != self._token:
            self._token = token
            self._change.set()
            self._change = asyncio.Event()

    async def _keep(self) -> None:
        failures = 0
        while not self._stopping:
            if self._token is None:
                try:
                    token = await self._take()
                except Exception as exc:
                    failures += 1
                    await self._close_quietly()
                    if self._stopping:
                        break
                    if failures == 1:
                        log.warning(
                            "worker %s: could not take its %s again (%s); retrying",
                            self.worker_id,
                            self.what,
                            exc,
                        )
                    await asyncio.sleep(min(0.05 * 2**failures, _LONGEST_BACKOFF))
                    continue
                if self._stopping:
                    break
                self._set(token)
                if failures:
                    log.info("worker %s: %s taken again", self.worker_id, self.what)
                failures = 0
            try:
                await self._watch()
                reason = "closed"
            except Exception as exc:
                reason = f"{type(exc).__name__}: {exc}"
            if self._stopping:
                break
            self._set(None)
            log.warning(
                "worker %s lost its %s (%s); taking it again", self.worker_id, self.what, reason
            )
            await self._close_quietly()
        await self._close_quietly()  # a take that finished after the stop closed things
