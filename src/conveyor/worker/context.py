"""What a running handler can see and do: `conveyor.current_job()`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from typing import Any

from ..backends.base import Backend, CompleteInTransaction, Lease
from ..errors import ConfigurationError, StaleLease
from ..job import Job

_CURRENT: ContextVar[JobContext] = ContextVar("conveyor_job")


def current_job() -> JobContext:
    """The context of the job this handler runs for.

    >>> ctx = current_job(); ctx.checkpoint({"epoch": 3})
    """
    try:
        return _CURRENT.get()
    except LookupError:
        raise RuntimeError("current_job() called outside a Conveyor job handler") from None


class JobContext:
    def __init__(self, job: Job, backend: Backend, loop: asyncio.AbstractEventLoop, worker_id: str) -> None:
        self.job = job
        self.backend = backend
        self.loop = loop
        self.worker_id = worker_id
        self.lease = Lease(job.id, job.lease_token)
        self.cancel_requested = job.cancel_requested  # set by heartbeats: stop when you can
        self.lease_lost = False  # set by heartbeats: another attempt owns the job now
        self.last_checkpoint: Any = job.checkpoint_value
        # Set when the job was marked completed inside the handler's own transaction:
        # the worker then writes no outcome for this attempt.
        self.completed_in_transaction = False

    @property
    def id(self) -> str:
        return self.job.id

    @property
    def attempt(self) -> int:
        return self.job.attempt

    async def checkpoint_async(self, state: Any, *, progress: float | None = None,
                               message: str | None = None) -> None:
        """Store JSON progress durably, fenced by this attempt's lease."""
        encoded = json.dumps(state, allow_nan=False)
        prog = None if progress is None else json.dumps({"fraction": progress, "message": message})
        if not await self.backend.checkpoint_job(self.lease, encoded, prog):
            self.lease_lost = True
            raise StaleLease(f"job {self.id}: lease lost, checkpoint rejected")
        self.last_checkpoint = state

    def checkpoint(self, state: Any, *, progress: float | None = None,
                   message: str | None = None) -> None:
        """Sync form, for handlers running in the worker's thread pool."""
        self._from_thread(self.checkpoint_async(state, progress=progress, message=message))

    async def progress_async(self, fraction: float, message: str | None = None) -> None:
        prog = json.dumps({"fraction": fraction, "message": message})
        if not await self.backend.checkpoint_job(self.lease, None, prog):
            self.lease_lost = True
            raise StaleLease(f"job {self.id}: lease lost, progress rejected")

    def progress(self, fraction: float, message: str | None = None) -> None:
        self._from_thread(self.progress_async(fraction, message))

    def _from_thread(self, coro: Any) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            coro.close()
            raise RuntimeError("in an async handler, await ctx.checkpoint_async(...) instead")
        asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    # --- complete in transaction ---------------------------------------------------
    @asynccontextmanager
    async def transaction(self, result: Any = None) -> AsyncIterator[Any]:
        """A database transaction that also marks this job completed, fenced by its
        lease: both commit together, or (lease lost, error) neither does.

        >>> async with current_job().transaction() as conn:
        ...     await conn.execute("UPDATE accounts SET paid = true WHERE id = %s", (7,))

        `result` is stored as the job's result (what the handler returns afterwards
        is not). Backends that cannot do this raise ConfigurationError.
        """
        try:
            async with self._transactional().complete_in_transaction(self.lease, json.dumps(result, allow_nan=False)) as conn:
                yield conn
        except StaleLease:
            self.lease_lost = True
            raise
        self.completed_in_transaction = True

    @contextmanager
    def transaction_sync(self, result: Any = None) -> Iterator[Any]:
        """Sync form of `transaction`, for handlers running in the worker's thread pool.

        >>> with current_job().transaction_sync() as conn:
        ...     conn.execute("INSERT INTO receipts (order_id) VALUES (%s)", (7,))
        """
        try:
            with self._transactional().complete_in_transaction_sync(self.lease, json.dumps(result, allow_nan=False)) as conn:
                yield conn
        except StaleLease:
            self.lease_lost = True
            raise
        self.completed_in_transaction = True

    def _transactional(self) -> CompleteInTransaction:
        backend = self.backend
        if not isinstance(backend, CompleteInTransaction):
            raise ConfigurationError(
                f"{type(self.backend).__name__} cannot complete a job inside a transaction "
                "(PostgreSQL can)"
            )
        return backend
