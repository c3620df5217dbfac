"""The embedded default: one SQLite file in WAL mode, shared by any number of
worker processes on one machine.

URL forms: `sqlite:///relative/path.db`, `sqlite:////absolute/path.db`,
`sqlite:///:memory:` is refused (workers in other processes could not see it).
Query options: `?synchronous=full` (default; an acknowledged enqueue survives a
power loss) or `normal` (faster; the last commits may be lost on power loss,
never on a process crash).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from conveyor.backends import redact_url
from conveyor.backends.blobs.directory import DirectoryBlobStore
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
from conveyor.backends.sqlite.flow import SqliteFlow
from conveyor.backends.sqlite.inspector import SqliteInspector
from conveyor.backends.sqlite.lifecycle import SqliteLifecycle
from conveyor.backends.sqlite.liveness import SIGNAL, LockFileHolder, SqliteLiveness
from conveyor.backends.sqlite.records import SqliteRecords
from conveyor.backends.sqlite.state import SqliteState
from conveyor.model.clock import Clock, system_clock
from conveyor.model.errors import ConfigurationError
from conveyor.model.job import Job, NewJob


def parse_sqlite_url(raw_url: str) -> tuple[str, dict[str, str]]:
    url = redact_url(raw_url)  # for messages: never echo a password
    parts = urlsplit(raw_url)
    if parts.scheme != "sqlite":
        raise ConfigurationError(f"not a sqlite URL: {url!r}")
    if parts.netloc:
        raise ConfigurationError(
            f"malformed SQLite URL {url!r}: use sqlite:///relative.db or sqlite:////absolute.db"
        )
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    if not path or path == ":memory:":
        raise ConfigurationError(
            f"SQLite URL {url!r} names no file: workers in other processes need a file, "
            "e.g. sqlite:///jobs.db"
        )
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    unknown = set(options) - {"synchronous"}
    if unknown:
        raise ConfigurationError(f"unknown SQLite URL option(s) {sorted(unknown)} in {url!r}")
    return path, options


class SqliteBackend:
    """The contract on SQLite: each verb handed to the role that owns it (lifecycle.py,
    inspector.py, flow.py, records.py, liveness.py), all of them built on one
    `SqliteState` (state.py): the connection, run on the store thread."""

    liveness_signal = SIGNAL

    def __init__(self, url: str, clock: Clock = system_clock) -> None:
        self.path, options = parse_sqlite_url(url)
        self.synchronous = options.get("synchronous", "full")
        self.clock = clock
        self._state = SqliteState(self.path, self.synchronous, clock)
        self._lifecycle = SqliteLifecycle(self._state)
        self._inspector = SqliteInspector(self._state)
        self._flow = SqliteFlow(self._state)
        self._records = SqliteRecords(self._state)
        self._liveness = SqliteLiveness(self._state)

    def default_blob_store(self) -> DirectoryBlobStore:
        """Blobs as files in `<database file>.blobs/`, beside it (ProvidesBlobStore): the
        shared directory store (backends/blobs/directory.py), no store of its own."""
        return DirectoryBlobStore(Path(self.path + ".blobs"), self.clock)

    async def open(self) -> None:
        await self._state.open()

    async def close(self) -> None:
        self._lifecycle.stop_listening()
        await self._state.close()

    # --- JobLifecycle (lifecycle.py) ------------------------------------------------
    async def migrate(self) -> list[int]:
        return await self._lifecycle.migrate()

    async def enqueue_jobs(self, jobs: Sequence[NewJob]) -> list[Job]:
        return await self._lifecycle.enqueue_jobs(jobs)

    def enqueue_jobs_blocking(self, jobs: Sequence[NewJob]) -> list[Job]:
        return self._lifecycle.enqueue_jobs_blocking(jobs)

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

    async def wait_for_finish(self, finish_wait: FinishWait) -> None:
        await self._lifecycle.wait_for_finish(finish_wait)

    async def find_leases(self, query: LeaseQuery) -> list[HeldLease]:
        return await self._lifecycle.find_leases(query)

    async def prune_jobs(self, retention: Retention) -> int:
        return await self._lifecycle.prune_jobs(retention)

    async def expire_results(self, result_sweep: ResultSweep) -> list[str]:
        return await self._lifecycle.expire_results(result_sweep)

    async def get_job(self, job_id: str) -> Job | None:
        return await self._lifecycle.get_job(job_id)

    async def force_state(self, forced_state: ForcedState) -> None:
        """Test hook: try a raw state write, to show storage guards transitions."""
        await self._lifecycle.force_state(forced_state)

    # --- Inspector (inspector.py) ---------------------------------------------------
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

    # --- FlowState (flow.py) --------------------------------------------------------
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

    # --- SharedRecords (records.py) -------------------------------------------------
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

    # --- WorkerLiveness (liveness.py) -----------------------------------------------
    async def hold_liveness(self, worker_id: str) -> LockFileHolder:
        return await self._liveness.hold_liveness(worker_id)

    async def dead_workers(self, candidates: Mapping[str, str]) -> set[str]:
        return await self._liveness.dead_workers(candidates)
