"""`memory://name`: a backend inside this process, for tests (registry.py says how the
backends of one URL share its store).

`MemoryBackend` is the contract and nothing else: each verb hands its params to the
role object that owns it (lifecycle.py, inspector.py, flow.py, records.py, liveness.py),
all built from one `StoreAccess`, the state they share. A fifth backend keeps this
class's shape and replaces what the roles do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from conveyor.backends.memory.blobs import MemoryBlobStore
from conveyor.backends.memory.flow import MemoryFlowState
from conveyor.backends.memory.inspector import MemoryInspector
from conveyor.backends.memory.lifecycle import MemoryLifecycle
from conveyor.backends.memory.liveness import SIGNAL, InProcessHolder, MemoryLiveness
from conveyor.backends.memory.records import MemoryRecords
from conveyor.backends.memory.registry import StoreAccess
from conveyor.backends.params import (
    BucketHold,
    BulkAction,
    CheckpointWrite,
    ClaimedJobs,
    ClaimRequest,
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
    RecordWrite,
    ResultSweep,
    Retention,
    Settlement,
)
from conveyor.model.clock import Clock, system_clock
from conveyor.model.job import Job, NewJob


class MemoryBackend:
    """The `Backend` protocol on a memory store; each verb is one step under its lock."""

    liveness_signal = SIGNAL

    def __init__(self, url: str, clock: Clock = system_clock) -> None:
        self.url = url
        self.clock = clock
        self._access = StoreAccess(url, clock)
        self.name = self._access.name
        self._lifecycle = MemoryLifecycle(self._access)
        self._inspector = MemoryInspector(self._access)
        self._flow = MemoryFlowState(self._access)
        self._records = MemoryRecords(self._access)
        self._liveness = MemoryLiveness(self._access)

    def __repr__(self) -> str:
        return f"<MemoryBackend memory://{self.name}>"

    async def open(self) -> None:
        _ = self._access.store  # made now, and a store inherited through a fork refused now

    async def close(self) -> None:
        pass  # the store outlives its backends, as a database outlives a connection

    async def migrate(self) -> list[int]:
        return []  # no schema

    def default_blob_store(self) -> MemoryBlobStore:
        """Blobs kept by this URL's store, dropped with it (ProvidesBlobStore)."""
        return MemoryBlobStore(self._access.store.blobs, self.clock)

    # --- JobLifecycle ---------------------------------------------------------------
    async def enqueue_jobs(self, jobs: Sequence[NewJob]) -> list[Job]:
        return self._lifecycle.enqueue_jobs(jobs)

    def enqueue_jobs_blocking(self, jobs: Sequence[NewJob]) -> list[Job]:
        return self._lifecycle.enqueue_jobs(jobs)

    async def fetch_jobs(self, request: ClaimRequest) -> ClaimedJobs:
        return self._lifecycle.fetch_jobs(request)

    async def settle_jobs(self, settlements: Sequence[Settlement]) -> list[str]:
        return self._lifecycle.settle_jobs(settlements)

    async def heartbeat_jobs(self, heartbeat: Heartbeat) -> HeartbeatReply:
        return self._lifecycle.heartbeat_jobs(heartbeat)

    async def checkpoint_job(self, checkpoint_write: CheckpointWrite) -> bool:
        return self._lifecycle.checkpoint_job(checkpoint_write)

    async def wait_for_jobs(self, job_wait: JobWait) -> None:
        await self._lifecycle.wait_for_jobs(job_wait)

    async def wait_for_finish(self, finish_wait: FinishWait) -> None:
        await self._lifecycle.wait_for_finish(finish_wait)

    async def find_leases(self, query: LeaseQuery) -> list[HeldLease]:
        return self._lifecycle.find_leases(query)

    async def prune_jobs(self, retention: Retention) -> int:
        return self._lifecycle.prune_jobs(retention)

    async def expire_results(self, result_sweep: ResultSweep) -> list[str]:
        return self._lifecycle.expire_results(result_sweep)

    async def get_job(self, job_id: str) -> Job | None:
        return self._lifecycle.get_job(job_id)

    async def force_state(self, forced_state: ForcedState) -> None:
        """Test hook: a raw state write, refused unless the transition is in the table."""
        self._lifecycle.force_state(forced_state)

    # --- Inspector ------------------------------------------------------------------
    async def list_jobs(self, job_page: JobPage) -> list[Job]:
        return self._inspector.list_jobs(job_page)

    async def count_jobs(self, where: JobFilter) -> int:
        return self._inspector.count_jobs(where)

    async def cancel_job(self, job_id: str) -> Job | None:
        return self._inspector.cancel_job(job_id)

    async def redrive_jobs(self, bulk_action: BulkAction) -> list[Job]:
        return self._inspector.redrive_jobs(bulk_action)

    async def delete_jobs(self, bulk_action: BulkAction) -> list[str]:
        return self._inspector.delete_jobs(bulk_action)

    async def cancel_jobs(self, bulk_action: BulkAction) -> list[str]:
        return self._inspector.cancel_jobs(bulk_action)

    async def task_names(self, where: JobFilter) -> list[str]:
        return self._inspector.task_names(where)

    async def dependants_of(self, job_id: str) -> list[str]:
        return self._inspector.dependants_of(job_id)

    async def parents_of(self, job_id: str) -> list[str]:
        return self._inspector.parents_of(job_id)

    async def queue_stats(self) -> list[QueueStats]:
        return self._inspector.queue_stats()

    # --- FlowState ------------------------------------------------------------------
    async def pause_queue(self, queue_pause: QueuePause) -> None:
        self._flow.pause_queue(queue_pause)

    async def queue_paused(self, queue: str) -> bool:
        return self._flow.queue_paused(queue)

    async def hold_rate_bucket(self, bucket_hold: BucketHold) -> None:
        self._flow.hold_rate_bucket(bucket_hold)

    async def set_key_limit(self, key_limit: KeyLimit) -> None:
        self._flow.set_key_limit(key_limit)

    async def key_limit(self, concurrency_key: str) -> int | None:
        return self._flow.key_limit(concurrency_key)

    async def count_running_of_key(self, concurrency_key: str) -> int:
        return self._flow.count_running_of_key(concurrency_key)

    async def flow_loads(self, query: FlowQuery) -> FlowLoads:
        return self._flow.flow_loads(query)

    # --- SharedRecords --------------------------------------------------------------
    async def get_record(self, record_key: RecordKey) -> str | None:
        return self._records.get_record(record_key)

    async def list_records(self, namespace: str) -> dict[str, str]:
        return self._records.list_records(namespace)

    async def put_record(self, record_write: RecordWrite) -> None:
        self._records.put_record(record_write)

    async def put_record_if_absent(self, record_write: RecordWrite) -> bool:
        return self._records.put_record_if_absent(record_write)

    async def compare_and_set_record(self, record_swap: RecordSwap) -> bool:
        return self._records.compare_and_set_record(record_swap)

    async def incr_record(self, record_increment: RecordIncrement) -> int:
        return self._records.incr_record(record_increment)

    async def delete_record(self, record_key: RecordKey) -> bool:
        return self._records.delete_record(record_key)

    # --- WorkerLiveness -------------------------------------------------------------
    async def hold_liveness(self, worker_id: str) -> InProcessHolder:
        return await self._liveness.hold_liveness(worker_id)

    async def dead_workers(self, candidates: Mapping[str, str]) -> set[str]:
        return self._liveness.dead_workers(candidates)
