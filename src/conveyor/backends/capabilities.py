"""Optional capabilities beyond the contract (`conveyor.backends.contract`), each a
protocol the core asks for with `isinstance(backend, Protocol)`, saying clearly when a
backend lacks it; and the conformance suite's test hook. docs/architecture.md, "The
backend seam", says what each one promises."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, Protocol, runtime_checkable

from conveyor.backends.params import (
    EnqueueIn,
    FinishWait,
    ForcedState,
    RecordSwapIn,
    TransactionalCompletion,
)
from conveyor.model.job import Job, NewJob


@runtime_checkable
class TransactionalEnqueue(Protocol):
    """Enqueue inside the caller's own transaction (PostgreSQL)."""

    async def enqueue_jobs_in(self, enqueue_in: EnqueueIn) -> list[Job]: ...


@runtime_checkable
class CompleteInTransaction(Protocol):
    """A transaction that also completes the job, committing only while its lease holds."""

    def complete_in_transaction(
        self, transactional_completion: TransactionalCompletion
    ) -> AbstractAsyncContextManager[Any]: ...

    def complete_in_transaction_sync(
        self, transactional_completion: TransactionalCompletion
    ) -> AbstractContextManager[Any]: ...


@runtime_checkable
class RecordsInTransaction(Protocol):
    """`compare_and_set_record` inside the caller's own transaction (PostgreSQL)."""

    async def compare_and_set_record_in(self, record_swap_in: RecordSwapIn) -> bool: ...
    def compare_and_set_record_in_sync(self, record_swap_in: RecordSwapIn) -> bool: ...


@runtime_checkable
class BlockingEnqueue(Protocol):
    """Enqueue from the caller's own thread without an event loop."""

    def enqueue_jobs_blocking(self, jobs: Sequence[NewJob]) -> list[Job]: ...


@runtime_checkable
class LivenessHold(Protocol):
    """One worker's liveness signal, kept for the worker's life, taken again after a loss."""

    @property
    def token(self) -> str | None:
        """What names the signal while it is held; None while it is lost."""

    async def changed(self, since: str | None) -> str | None:
        """Return the token as soon as it differs from `since`."""

    async def release(self) -> None:
        """Drop the signal on a clean stop, after the worker settled its jobs."""

    async def abandon(self) -> None:
        """Test hook: end the signal as a killed process does."""


@runtime_checkable
class WorkerLiveness(Protocol):
    """A signal the kernel ends the moment a worker process dies."""

    liveness_signal: str  # what the signal is, for messages: "advisory lock"

    async def hold_liveness(self, worker_id: str) -> LivenessHold:
        """Take the signal for `worker_id` (one try; the hold keeps trying)."""

    async def dead_workers(self, candidates: Mapping[str, str]) -> set[str]:
        """The ids among `candidates` (worker id -> token) whose signal is gone."""


@runtime_checkable
class FinishWakeups(Protocol):
    """Wake-ups for `job.result()` from the step that ends a job, instead of polling."""

    async def wait_for_finish(self, finish_wait: FinishWait) -> None:
        """Return once the job has ended or may have (a hint), or after the timeout."""


@runtime_checkable
class StateForcing(Protocol):
    """Test hook for the conformance suite: a raw state write through the storage guard."""

    async def force_state(self, forced_state: ForcedState) -> None: ...
