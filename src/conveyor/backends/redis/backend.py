"""Redis backend: the contract's four roles, each verb handed to the role object that
owns it. All of them share one `RedisConnection` (connection.py: the URL, the clock,
the key layout, and once open the client, the Lua scripts and the enqueue connections).

Where each verb is: lifecycle.py (JobLifecycle, BlockingEnqueue, StateForcing),
inspector.py (Inspector), flow.py (FlowState), records.py (SharedRecords), liveness.py
(WorkerLiveness), finish_wakeups.py (FinishWakeups), blobs.py (ProvidesBlobStore).
See keys.py (the key layout), config.py (the URL), docs/redis.md (AOF, operations).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from conveyor.backends import redact_url
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
from conveyor.backends.redis import liveness
from conveyor.backends.redis.blobs import RedisBlobStore
from conveyor.backends.redis.config import parse_redis_url
from conveyor.backends.redis.connection import RedisConnection
from conveyor.backends.redis.finish_wakeups import RedisFinishWakeups
from conveyor.backends.redis.flow import RedisFlowState
from conveyor.backends.redis.inspector import RedisInspector
from conveyor.backends.redis.lifecycle import RedisLifecycle
from conveyor.backends.redis.records import RedisRecords
from conveyor.model.clock import Clock, system_clock
from conveyor.model.job import Job, NewJob

__all__ = ["RedisBackend", "parse_redis_url"]


class RedisBackend:
    """The `Backend` protocol on Redis (redis-py asyncio; hiredis when installed)."""

    liveness_signal = liveness.SIGNAL

    def __init__(self, url: str, clock: Clock = system_clock) -> None:
        self.url = url
        self.clock = clock
        self.connection = RedisConnection(url, clock)
        self.keys = self.connection.keys
        self.lifecycle = RedisLifecycle(self.connection)
        self.inspector = RedisInspector(self.connection)
        self.flow = RedisFlowState(self.connection)
        self.records = RedisRecords(self.connection)
        self.liveness = liveness.RedisWorkerLiveness(self.connection)
        self.finish_wakeups = RedisFinishWakeups(self.connection)

    def __repr__(self) -> str:
        return f"<RedisBackend {redact_url(self.url)}>"

    @property
    def client(self) -> Any:
        """The redis-py asyncio client, for tests and operations (connection.py)."""
        return self.connection.client

    def default_blob_store(self) -> RedisBlobStore:
        """Blobs under this prefix, on this client (ProvidesBlobStore)."""
        return RedisBlobStore(self.connection)

    # --- JobLifecycle (lifecycle.py) ------------------------------------------------------
    async def open(self) -> None:
        await self.connection.open()

    async def close(self) -> None:
        await self.connection.close()

    async def migrate(self) -> list[int]:
        return await self.lifecycle.migrate()

    async def enqueue_jobs(self, jobs: Sequence[NewJob]) -> list[Job]:
        return await self.lifecycle.enqueue_jobs(jobs)

    def enqueue_jobs_blocking(self, jobs: Sequence[NewJob]) -> list[Job]:
        return self.lifecycle.enqueue_jobs_blocking(jobs)

    async def fetch_jobs(self, request: ClaimRequest) -> ClaimedJobs:
        return await self.lifecycle.fetch_jobs(request)

    async def settle_jobs(self, settlements: Sequence[Settlement]) -> list[str]:
        return await self.lifecycle.settle_jobs(settlements)

    async def heartbeat_jobs(self, heartbeat: Heartbeat) -> HeartbeatReply:
        return await self.lifecycle.heartbeat_jobs(heartbeat)

    async def checkpoint_job(self, checkpoint_write: CheckpointWrite) -> bool:
        return await self.lifecycle.checkpoint_job(checkpoint_write)

    async def wait_for_jobs(self, job_wait: JobWait) -> None:
        await self.lifecycle.wait_for_jobs(job_wait)

    async def find_leases(self, query: LeaseQuery) -> list[HeldLease]:
        return await self.lifecycle.find_leases(query)

    async def prune_jobs(self, retention: Retention) -> int:
        return await self.lifecycle.prune_jobs(retention)

    async def expire_results(self, result_sweep: ResultSweep) -> list[str]:
        return await self.lifecycle.expire_results(result_sweep)

    async def get_job(self, job_id: str) -> Job | None:
        return await self.lifecycle.get_job(job_id)

    async def force_state(self, forced_state: ForcedState) -> None:
        await self.lifecycle.force_state(forced_state)

    async def delete_all_keys(self) -> int:
        """Delete every key of this prefix (SCAN + UNLINK; never FLUSHDB). For tests."""
        return await self.lifecycle.delete_all_keys()

    # --- Inspector (inspector.py) ---------------------------------------------------------
    async def list_jobs(self, job_page: JobPage) -> list[Job]:
        return await self.inspector.list_jobs(job_page)

    async def count_jobs(self, where: JobFilter) -> int:
        return await self.inspector.count_jobs(where)

    async def cancel_job(self, job_id: str) -> Job | None:
        return await self.inspector.cancel_job(job_id)

    async def redrive_jobs(self, bulk_action: BulkAction) -> list[Job]:
        return await self.inspector.redrive_jobs(bulk_action)

    async def delete_jobs(self, bulk_action: BulkAction) -> list[str]:
        return await self.inspector.delete_jobs(bulk_action)

    async def cancel_jobs(self, bulk_action: BulkAction) -> list[str]:
        return await self.inspector.cancel_jobs(bulk_action)

    async def task_names(self, where: JobFilter) -> list[str]:
        return await self.inspector.task_names(where)

    async def dependants_of(self, job_id: str) -> list[str]:
        return await self.inspector.dependants_of(job_id)

    async def parents_of(self, job_id: str) -> list[str]:
        return await self.inspector.parents_of(job_id)

    async def queue_stats(self) -> list[QueueStats]:
        return await self.inspector.queue_stats()

    # --- FlowState (flow.py) --------------------------------------------------------------
    async def pause_queue(self, queue_pause: QueuePause) -> None:
        await self.flow.pause_queue(queue_pause)

    async def queue_paused(self, queue: str) -> bool:
        return await self.flow.queue_paused(queue)

    async def hold_rate_bucket(self, bucket_hold: BucketHold) -> None:
        await self.flow.hold_rate_bucket(bucket_hold)

    async def set_key_limit(self, key_limit: KeyLimit) -> None:
        await self.flow.set_key_limit(key_limit)

    async def key_limit(self, concurrency_key: str) -> int | None:
        return await self.flow.key_limit(concurrency_key)

    async def count_running_of_key(self, concurrency_key: str) -> int:
        return await self.flow.count_running_of_key(concurrency_key)

    async def flow_loads(self, query: FlowQuery) -> FlowLoads:
        return await self.flow.flow_loads(query)

    # --- SharedRecords (records.py) -------------------------------------------------------
    async def get_record(self, record_key: RecordKey) -> str | None:
        return await self.records.get_record(record_key)

    async def list_records(self, namespace: str) -> dict[str, str]:
        return await self.records.list_records(namespace)

    async def put_record(self, record_write: RecordWrite) -> None:
        await self.records.put_record(record_write)

    async def put_record_if_absent(self, record_write: RecordWrite) -> bool:
        return await self.records.put_record_if_absent(record_write)

    async def compare_and_set_record(self, record_swap: RecordSwap) -> bool:
        return await self.records.compare_and_set_record(record_swap)

    async def incr_record(self, record_increment: RecordIncrement) -> int:
        return await self.records.incr_record(record_increment)

    async def delete_record(self, record_key: RecordKey) -> bool:
        return await self.records.delete_record(record_key)

    # --- WorkerLiveness (liveness.py) and FinishWakeups (finish_wakeups.py) ---------------
    async def hold_liveness(self, worker_id: str) -> liveness.NamedConnectionHolder:
        return await self.liveness.hold_liveness(worker_id)

    async def dead_workers(self, candidates: Mapping[str, str]) -> set[str]:
        return await self.liveness.dead_workers(candidates)

    async def wait_for_finish(self, finish_wait: FinishWait) -> None:
        await self.finish_wakeups.wait_for_finish(finish_wait)
