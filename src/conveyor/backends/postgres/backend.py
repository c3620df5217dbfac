"""PostgreSQL: any number of worker hosts share one database.

`Conveyor("postgresql://user@host/db?schema=conveyor")`. Built on psycopg 3 and
an async connection pool; all SQL lives in queries.sql and migrations/. See
docs/postgres.md for transactional enqueue and complete-in-transaction.

PostgresBackend implements the contract by handing each verb to the role that owns
it: the job lifecycle (lifecycle.py), the operators' verbs (inspector.py), flow
control's state (flow.py), the shared records (records.py), worker liveness
(liveness.py) and the blob store (blobs.py). They share one PostgresState
(state.py): the pools, the held connections, the queries, the clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any

import psycopg

from conveyor.backends.params import (
    BucketHold,
    BulkAction,
    CheckpointWrite,
    ClaimedJobs,
    ClaimRequest,
    EnqueueIn,
    FinishWait,
    FlowLoads,
    FlowQuery,
    ForcedState,
    Heartbeat,
    HeartbeatReply,
    HeldLease,
    JobFilter,
    JobPage,
    JobWait,
    KeyLimit,
    LeaseQuery,
    QueuePause,
    QueueStats,
    RecordIncrement,
    RecordKey,
    RecordSwap,
    RecordSwapIn,
    RecordWrite,
    ResultSweep,
    Retention,
    Settlement,
    TransactionalCompletion,
)
from conveyor.backends.postgres.blobs import PostgresBlobStore
from conveyor.backends.postgres.flow import PostgresFlow
from conveyor.backends.postgres.inspector import PostgresInspector
from conveyor.backends.postgres.lifecycle import PostgresLifecycle
from conveyor.backends.postgres.liveness import SIGNAL, AdvisoryLockHolder, PostgresLiveness
from conveyor.backends.postgres.records import PostgresRecords
from conveyor.backends.postgres.state import AsyncConn, PostgresState
from conveyor.model.clock import Clock, system_clock
from conveyor.model.job import Job, NewJob


class PostgresBackend:
    """Every Backend verb, each handed to the role object that owns it."""

    liveness_signal = SIGNAL

    def __init__(self, url: str, clock: Clock = system_clock) -> None:
        self.clock = clock
        self._state = PostgresState(url, clock)
        self._records = PostgresRecords(self._state)
        self._lifecycle = PostgresLifecycle(self._state, self._records)
        self._inspector = PostgresInspector(self._state, self._lifecycle.get_job)
        self._flow = PostgresFlow(self._state)
        self._liveness = PostgresLiveness(self._state)
        self._blobs: PostgresBlobStore | None = None  # the default blob store, made on first use

    def __repr__(self) -> str:
        return f"<PostgresBackend {self._state.config.redacted}>"

    def default_blob_store(self) -> PostgresBlobStore:
        """Blobs in a table of this schema, over this pool (ProvidesBlobStore)."""
        if self._blobs is None:
            self._blobs = PostgresBlobStore(self._state)
        return self._blobs

    # --- JobLifecycle -------------------------------------------------------------------
    async def open(self) -> None:
        await self._state.open()

    async def close(self) -> None:
        await self._state.close()

    async def migrate(self) -> list[int]:
        return await self._lifecycle.migrate()

    async def enqueue_jobs(self, jobs: Sequence[NewJob]) -> list[Job]:
        return await self._lifecycle.enqueue_jobs(jobs)

    async def fetch_jobs(self, request: ClaimRequest) -> ClaimedJobs:
        return await self._lifecycle.fetch_jobs(request)

    async def settle_jobs(self, settlements: Sequence[Settlement]) -> list[str]:
        return await self._lifecycle.settle_jobs(settlements)

    async def heartbeat_jobs(self, heartbeat: Heartbeat) -> HeartbeatReply:
        return await self._lifecycle.heartbeat_jobs(heartbeat)

    async def checkpoint_job(self, checkpoint_write: CheckpointWrite) -> bool:
        return await self._lifecycle.checkpoint_job(checkpoint_write)

    async def wait_for_jobs(self, job_wait: JobWait) -> None:
        await self._lifecycle.wait_for_jobs(job_wait)

    async def find_leases(self, query: LeaseQuery) -> list[HeldLease]:
        return await self._lifecycle.find_leases(query)

    async def prune_jobs(self, retention: Retention) -> int:
        return await self._lifecycle.prune_jobs(retention)

    async def expire_results(self, result_sweep: ResultSweep) -> list[str]:
        return await self._lifecycle.expire_results(result_sweep)

    async def get_job(self, job_id: str) -> Job | None:
        return await self._lifecycle.get_job(job_id)

    # --- the lifecycle's capabilities ---------------------------------------------------
    def enqueue_jobs_blocking(self, jobs: Sequence[NewJob]) -> list[Job]:
        return self._lifecycle.enqueue_jobs_blocking(jobs)

    async def enqueue_jobs_in(self, enqueue_in: EnqueueIn) -> list[Job]:
        return await self._lifecycle.enqueue_jobs_in(enqueue_in)

    async def wait_for_finish(self, finish_wait: FinishWait) -> None:
        await self._lifecycle.wait_for_finish(finish_wait)

    def complete_in_transaction(
        self, transactional_completion: TransactionalCompletion
    ) -> AbstractAsyncContextManager[AsyncConn]:
        return self._lifecycle.complete_in_transaction(transactional_completion)

    def complete_in_transaction_sync(
        self, transactional_completion: TransactionalCompletion
    ) -> AbstractContextManager[psycopg.Connection[Any]]:
        return self._lifecycle.complete_in_transaction_sync(transactional_completion)

    async def force_state(self, forced_state: ForcedState) -> None:
        await self._lifecycle.force_state(forced_state)

    # --- Inspector ----------------------------------------------------------------------
    async def list_jobs(self, job_page: JobPage) -> list[Job]:
        return await self._inspector.list_jobs(job_page)

    async def count_jobs(self, where: JobFilter) -> int:
        return await self._inspector.count_jobs(where)

    async def cancel_job(self, job_id: str) -> Job | None:
        return await self._inspector.cancel_job(job_id)

    async def redrive_jobs(self, bulk_action: BulkAction) -> list[Job]:
        return await self._inspector.redrive_jobs(bulk_action)

    async def delete_jobs(self, bulk_action: BulkAction) -> list[str]:
        return await self._inspector.delete_jobs(bulk_action)

    async def cancel_jobs(self, bulk_action: BulkAction) -> list[str]:
        return await self._inspector.cancel_jobs(bulk_action)

    async def task_names(self, where: JobFilter) -> list[str]:
        return await self._inspector.task_names(where)

    async def dependants_of(self, job_id: str) -> list[str]:
        return await self._inspector.dependants_of(job_id)

    async def parents_of(self, job_id: str) -> list[str]:
        return await self._inspector.parents_of(job_id)

    async def queue_stats(self) -> list[QueueStats]:
        return await self._inspector.queue_stats()

    # --- FlowState ----------------------------------------------------------------------
    async def pause_queue(self, queue_pause: QueuePause) -> None:
        await self._flow.pause_queue(queue_pause)

    async def queue_paused(self, queue: str) -> bool:
        return await self._flow.queue_paused(queue)

    async def hold_rate_bucket(self, bucket_hold: BucketHold) -> None:
        await self._flow.hold_rate_bucket(bucket_hold)

    async def set_key_limit(self, key_limit: KeyLimit) -> None:
        await self._flow.set_key_limit(key_limit)

    async def key_limit(self, concurrency_key: str) -> int | None:
        return await self._flow.key_limit(concurrency_key)

    async def count_running_of_key(self, concurrency_key: str) -> int:
        return await self._flow.count_running_of_key(concurrency_key)

    async def flow_loads(self, query: FlowQuery) -> FlowLoads:
        return await self._flow.flow_loads(query)

    # --- SharedRecords ------------------------------------------------------------------
    async def get_record(self, record_key: RecordKey) -> str | None:
        return await self._records.get_record(record_key)

    async def list_records(self, namespace: str) -> dict[str, str]:
        return await self._records.list_records(namespace)

    async def put_record(self, record_write: RecordWrite) -> None:
        await self._records.put_record(record_write)

    async def put_record_if_absent(self, record_write: RecordWrite) -> bool:
        return await self._records.put_record_if_absent(record_write)

    async def compare_and_set_record(self, record_swap: RecordSwap) -> bool:
        return await self._records.compare_and_set_record(record_swap)

    async def incr_record(self, record_increment: RecordIncrement) -> int:
        return await self._records.incr_record(record_increment)

    async def delete_record(self, record_key: RecordKey) -> bool:
        return await self._records.delete_record(record_key)

    async def compare_and_set_record_in(self, record_swap_in: RecordSwapIn) -> bool:
        return await self._records.compare_and_set_record_in(record_swap_in)

    def compare_and_set_record_in_sync(self, record_swap_in: RecordSwapIn) -> bool:
        return self._records.compare_and_set_record_in_sync(record_swap_in)

    # --- WorkerLiveness -----------------------------------------------------------------
    async def hold_liveness(self, worker_id: str) -> AdvisoryLockHolder:
        return await self._liveness.hold_liveness(worker_id)

    async def dead_workers(self, candidates: Mapping[str, str]) -> set[str]:
        return await self._liveness.dead_workers(candidates)
