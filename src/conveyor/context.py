"""What a running handler can see and do: `conveyor.current_job()`."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar, cast

from conveyor.backends.capabilities import CompleteInTransaction, RecordsInTransaction
from conveyor.backends.contract import Backend
from conveyor.backends.params import CheckpointWrite, Lease, RecordSwapIn, TransactionalCompletion
from conveyor.model.clock import Duration, to_seconds
from conveyor.model.errors import ConfigurationError, StaleLease
from conveyor.model.job import Job
from conveyor.model.outcomes import Retry
from conveyor.once import (
    DEFAULT_CLAIM_LEASE,
    ONCE_NAMESPACE,
    AlreadyDone,
    Claimed,
    OnceStore,
    checked_ttl,
    once_key,
)
from conveyor.rules.idempotency_key import key_of
from conveyor.rules.results import result_ttl_of
from conveyor.rules.retry import RetryPolicy

T = TypeVar("T")
# How long a dead job may wait for a redrive when the worker does not say (tests,
# conveyor.testing); WorkerConfig's default too.
DEFAULT_DEAD_RETENTION = 14 * 24 * 3600.0

_CURRENT: ContextVar[JobContext] = ContextVar("conveyor_job")
_DEFAULT_RETRY = RetryPolicy()  # frozen: one for every context that is given none


def current_job() -> JobContext:
    """The context of the job this handler runs for.

    >>> ctx = current_job(); ctx.checkpoint({"epoch": 3})
    """
    try:
        return _CURRENT.get()
    except LookupError:
        raise RuntimeError("current_job() called outside a Conveyor job handler") from None


class JobContext:
    def __init__(
        self,
        job: Job,
        backend: Backend,
        loop: asyncio.AbstractEventLoop,
        worker_id: str,
        *,
        retention: float = DEFAULT_DEAD_RETENTION,
    ) -> None:
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
        # What `once` needs to know how long the job may still run again: the task's
        # policy (set by the executor, which knows the task) and how long a dead job
        # is kept for a redrive (the worker's dead_retention).
        self.retry_policy = _DEFAULT_RETRY
        self.retention = retention
        self._open_transaction: Any = None  # the connection inside transaction()
        self._open_transaction_sync: Any = None  # ... inside transaction_sync()
        # Done-marks written inside the open transaction, freed if it rolls back.
        self._marked_in_transaction: list[tuple[Claimed, float]] = []

    @property
    def id(self) -> str:
        return self.job.id

    @property
    def attempt(self) -> int:
        return self.job.attempt

    @property
    def fence(self) -> int:
        """The fencing token of this attempt: the job's lease token, which grows by one
        on every claim of the job (each retry, rescue and redrive), so a later attempt
        always holds a larger one. Make writes to your own store conditional on it and
        a stalled attempt's late write changes nothing:

        >>> conn.execute("UPDATE orders SET status = ?, last_fence = ? "
        ...              "WHERE id = ? AND last_fence < ?", ("paid", ctx.fence, 42, ctx.fence))

        It orders the attempts of one job only; see docs/resilience.md.
        """
        return self.job.lease_token

    @property
    def idempotency_key(self) -> str:
        """The key to pass to providers (Stripe's `idempotency_key`, a SendGrid
        message id): the task's `idempotency_key=` template rendered at enqueue, else
        the job id. The same on every attempt and after a redrive.

        >>> stripe.PaymentIntent.create(amount=500, idempotency_key=ctx.idempotency_key)
        """
        return key_of(self.job.id, self.job.meta)

    async def checkpoint_async(
        self, state: Any, *, progress: float | None = None, message: str | None = None
    ) -> None:
        """Store JSON progress durably, fenced by this attempt's lease."""
        encoded = json.dumps(state, allow_nan=False)
        prog = None if progress is None else json.dumps({"fraction": progress, "message": message})
        if not await self.backend.checkpoint_job(
            CheckpointWrite(lease=self.lease, checkpoint=encoded, progress=prog)
        ):
            self.lease_lost = True
            raise StaleLease(f"job {self.id}: lease lost, checkpoint rejected")
        self.last_checkpoint = state

    def checkpoint(
        self, state: Any, *, progress: float | None = None, message: str | None = None
    ) -> None:
        """Sync form, for handlers running in the worker's thread pool."""
        self._from_thread(self.checkpoint_async(state, progress=progress, message=message))

    async def progress_async(self, fraction: float, message: str | None = None) -> None:
        prog = json.dumps({"fraction": fraction, "message": message})
        if not await self.backend.checkpoint_job(
            CheckpointWrite(lease=self.lease, checkpoint=None, progress=prog)
        ):
            self.lease_lost = True
            raise StaleLease(f"job {self.id}: lease lost, progress rejected")

    def progress(self, fraction: float, message: str | None = None) -> None:
        self._from_thread(self.progress_async(fraction, message))

    def _from_thread(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            coro.close()
            raise RuntimeError(
                "in an async handler, await the async form instead (ctx.checkpoint_async, ctx.once)"
            )
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    # --- once ------------------------------------------------------------------------
    async def once(
        self,
        key: str,
        effect: Callable[[], Awaitable[T]],
        *,
        ttl: Duration | None = None,
        lease: Duration = DEFAULT_CLAIM_LEASE,
    ) -> T:
        """Run `effect` unless it already ran to completion under `key`; return what
        it returned (then, or from the stored record when skipped).

        >>> charge = await ctx.once(f"charge:{order_id}", lambda: create_charge(order_id))

        The key is claimed for `lease` seconds before the effect runs; another attempt
        finding a live claim snoozes until it ends. The key is marked done only after
        the effect returns, and remembered for `ttl` (default and minimum: the job's
        worst-case retry window plus the dead-letter retention, see
        OnceWindowTooShort). An effect that raises frees the key; a crash inside it
        leaves the claim to expire after `lease`, so the effect runs at least once
        and again only after a crash. Inside `transaction()` on PostgreSQL the
        done-mark commits with the transaction. Return JSON data (an id): a skipped
        call returns the stored value as JSON gives it back. See docs/resilience.md.
        """
        key, ttl_s, lease_s = self._once_args(key, ttl, lease)
        store = self._once_store()
        claim = await store.claim(key, lease_s)
        if isinstance(claim, AlreadyDone):
            return cast(T, claim.result)
        try:
            result = await effect()
        except Exception:
            await store.release(claim, lease_s)
            raise
        done = store.done_text(claim, result)
        conn = self._open_transaction
        if conn is None:
            await store.mark_done(claim, done, ttl_s)
        else:
            records = self._records_in_transaction()
            if not await records.compare_and_set_record_in(
                RecordSwapIn(
                    connection=conn,
                    namespace=ONCE_NAMESPACE,
                    key=key,
                    expected=claim.text,
                    value=done,
                    ttl=ttl_s,
                )
            ):
                raise Retry(reason=_claim_lost(key))
            self._marked_in_transaction.append((claim, lease_s))
        return result

    def once_sync(
        self,
        key: str,
        effect: Callable[[], T],
        *,
        ttl: Duration | None = None,
        lease: Duration = DEFAULT_CLAIM_LEASE,
    ) -> T:
        """Sync form of `once`, for handlers running in the worker's thread pool.

        >>> receipt = current_job().once_sync(f"receipt:{order_id}", lambda: send(order_id))
        """
        key, ttl_s, lease_s = self._once_args(key, ttl, lease)
        store = self._once_store()
        claim = self._from_thread(store.claim(key, lease_s))
        if isinstance(claim, AlreadyDone):
            return cast(T, claim.result)
        try:
            result = effect()
        except Exception:
            self._from_thread(store.release(claim, lease_s))
            raise
        done = store.done_text(claim, result)
        conn = self._open_transaction_sync
        if conn is None:
            self._from_thread(store.mark_done(claim, done, ttl_s))
        else:
            records = self._records_in_transaction()
            if not records.compare_and_set_record_in_sync(
                RecordSwapIn(
                    connection=conn,
                    namespace=ONCE_NAMESPACE,
                    key=key,
                    expected=claim.text,
                    value=done,
                    ttl=ttl_s,
                )
            ):
                raise Retry(reason=_claim_lost(key))
            self._marked_in_transaction.append((claim, lease_s))
        return result

    def _once_args(
        self, key: str, ttl: Duration | None, lease: Duration
    ) -> tuple[str, float, float]:
        key = once_key(key)
        lease_s = to_seconds(lease)
        if not 0 < lease_s < math.inf:
            raise ValueError(f"once({key!r}): lease must be a positive duration, got {lease!r}")
        ttl_s = checked_ttl(
            key,
            None if ttl is None else to_seconds(ttl),
            self.retry_policy,
            self.job.max_attempts,
            self.retention,
        )
        return key, ttl_s, lease_s

    def _once_store(self) -> OnceStore:
        return OnceStore(self.backend, self.backend.clock, self.job.id, self.fence)

    def _records_in_transaction(self) -> RecordsInTransaction:
        backend = self.backend
        if not isinstance(backend, RecordsInTransaction):  # transaction() refused already
            raise ConfigurationError(
                f"{type(backend).__name__} cannot write records inside a transaction"
            )
        return backend

    async def _release_marked_in_transaction(self) -> None:
        """The transaction rolled back, and with it the done-marks written in it: free
        their keys (the effects' database writes are gone too)."""
        marked, self._marked_in_transaction = self._marked_in_transaction, []
        store = self._once_store()
        for claim, lease in marked:
            await store.release(claim, lease)

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
            async with self._transactional().complete_in_transaction(
                TransactionalCompletion(
                    lease=self.lease,
                    result=json.dumps(result, allow_nan=False),
                    result_ttl=result_ttl_of(self.job),
                )
            ) as conn:
                self._open_transaction = conn
                try:
                    yield conn
                finally:
                    self._open_transaction = None
                self._completing()
        except BaseException as exc:
            self.completed_in_transaction = False
            if isinstance(exc, Exception):
                self.lease_lost = self.lease_lost or isinstance(exc, StaleLease)
                await self._release_marked_in_transaction()
            raise
        self._marked_in_transaction.clear()

    @contextmanager
    def transaction_sync(self, result: Any = None) -> Iterator[Any]:
        """Sync form of `transaction`, for handlers running in the worker's thread pool.

        >>> with current_job().transaction_sync() as conn:
        ...     conn.execute("INSERT INTO receipts (order_id) VALUES (%s)", (7,))
        """
        try:
            with self._transactional().complete_in_transaction_sync(
                TransactionalCompletion(
                    lease=self.lease,
                    result=json.dumps(result, allow_nan=False),
                    result_ttl=result_ttl_of(self.job),
                )
            ) as conn:
                self._open_transaction_sync = conn
                try:
                    yield conn
                finally:
                    self._open_transaction_sync = None
                self._completing()
        except BaseException as exc:
            self.completed_in_transaction = False
            if isinstance(exc, Exception):
                self.lease_lost = self.lease_lost or isinstance(exc, StaleLease)
                self._from_thread(self._release_marked_in_transaction())
            raise
        self._marked_in_transaction.clear()

    def _completing(self) -> None:
        # The block succeeded: leaving it writes the completion and commits. A heartbeat
        # that crosses that commit finds the lease gone; flagged before the commit (not
        # after the connection went back to its pool), the worker knows the job is not
        # lost and lets the handler return. A failed commit clears the flag again.
        self.completed_in_transaction = True

    def _transactional(self) -> CompleteInTransaction:
        backend = self.backend
        if not isinstance(backend, CompleteInTransaction):
            raise ConfigurationError(
                f"{type(self.backend).__name__} cannot complete a job inside a transaction "
                "(PostgreSQL can)"
            )
        return backend


def _claim_lost(key: str) -> str:
    return (
        f"once({key!r}): the claim expired before the effect returned and the key was "
        "taken again; rolled back so that the next attempt decides (give once() a lease "
        "longer than the effect can take)"
    )
