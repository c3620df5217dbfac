"""The embedded default: one SQLite file in WAL mode, shared by any number of
worker processes on one machine.

URL forms: `sqlite:///relative/path.db`, `sqlite:////absolute/path.db`,
`sqlite:///:memory:` is refused (workers in other processes could not see it).
Query options: `?synchronous=full` (default; an acknowledged enqueue survives a
power loss) or `normal` (faster; the last commits may be lost on power loss,
never on a process crash).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar
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
from conveyor.backends.sqlite import liveness, records
from conveyor.backends.sqlite.dependants import SqliteDependants
from conveyor.backends.sqlite.store import ENDED, SqliteStore
from conveyor.backends.sqlite.store_thread import StoreThread
from conveyor.backends.sqlite.wakeup import WakeupListener, WakeupSender
from conveyor.model.clock import Clock, system_clock
from conveyor.model.errors import ConfigurationError
from conveyor.model.job import Job, JobState, NewJob

# The page cache of the backend's own connection, the one that claims (SQLite's default is
# 2 MB, filled only as pages are read): a claim that rotates over fairness keys or queues
# reads rows spread over the file, and with 2 MB a queue of 100,000 jobs read most of them
# back through the WAL on every claim (figures: docs/performance.md, docs/sqlite.md). The
# connections a sync facade's threads enqueue on keep the default.
CLAIMING_CACHE_MB = 32

T = TypeVar("T")


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
    """Async face of `SqliteStore`: every call runs on one private thread."""

    def __init__(self, url: str, clock: Clock = system_clock) -> None:
        self.path, options = parse_sqlite_url(url)
        self.synchronous = options.get("synchronous", "full")
        self.clock = clock
        self._thread: StoreThread | None = None
        self._store: SqliteStore | None = None
        self._sender: WakeupSender | None = None
        self._listener: WakeupListener | None = None
        # job.result() (FinishWakeups): a datagram at each end to those waiting for one.
        self._done_sender: WakeupSender | None = None
        self._done_listener: WakeupListener | None = None
        self._open_lock = threading.Lock()
        self._thread_stores = threading.local()

    def default_blob_store(self) -> DirectoryBlobStore:
        """Blobs as files in `<database file>.blobs/`, beside it (ProvidesBlobStore)."""
        return DirectoryBlobStore(Path(self.path + ".blobs"), self.clock)

    # --- plumbing -------------------------------------------------------------------
    async def _on_thread(self, call: Callable[[SqliteStore], T]) -> T:
        """Run `call(store)` on the backend's own thread (store_thread.py)."""
        if self._thread is None:
            await self.open()
        assert self._thread is not None

        def run() -> T:
            assert self._store is not None, "backend closed"
            return call(self._store)

        return await self._thread.run(run)

    async def open(self) -> None:
        with self._open_lock:
            if self._thread is not None:
                return
            self._thread = StoreThread("conveyor-sqlite")

        def connect() -> None:
            self._store = SqliteStore(
                self.path, self.clock, self.synchronous, cache_mb=CLAIMING_CACHE_MB
            )

        await self._thread.run(connect)
        self._sender = WakeupSender(self.path)
        self._done_sender = WakeupSender(self.path, "done")

    async def close(self) -> None:
        for listener in (self._listener, self._done_listener):
            if listener is not None:
                listener.close()
        self._listener = self._done_listener = None
        for sender in (self._sender, self._done_sender):
            if sender is not None:
                sender.close()
        self._sender = self._done_sender = None
        thread, self._thread = self._thread, None
        if thread is not None:
            store = self._store
            if store is not None:
                await thread.run(store.close)
            thread.stop()
        self._store = None

    async def migrate(self) -> list[int]:
        return await self._on_thread(lambda s: s.migrate())

    # --- producer -----------------------------------------------------------------
    async def enqueue_jobs(self, jobs: Sequence[NewJob]) -> list[Job]:
        result = await self._on_thread(lambda s: s.enqueue_jobs(jobs))
        if self._sender is not None:
            self._sender.notify()
        return result

    def enqueue_jobs_blocking(self, jobs: Sequence[NewJob]) -> list[Job]:
        """Enqueue from the caller's own thread, on a connection of that thread.

        The sync facade uses this to skip two thread hops: an enqueue is then one
        commit, which is what bounds it with synchronous=FULL (measured in
        benchmarks/throughput.py)."""
        store: SqliteStore | None = getattr(self._thread_stores, "store", None)
        if store is None:
            store = SqliteStore(self.path, self.clock, self.synchronous)
            self._thread_stores.store = store
        result = store.enqueue_jobs(jobs)
        if self._sender is not None:
            self._sender.notify()
        return result

    # --- worker -----------------------------------------------------------------------
    async def fetch_jobs(self, request: ClaimRequest) -> ClaimedJobs:
        return await self._on_thread(lambda s: s.fetch_jobs(request))

    async def settle_jobs(self, settlements: Sequence[Settlement]) -> list[str]:
        stale, unblocked = await self._on_thread(lambda s: s.settle_jobs(settlements))
        if self._done_sender is not None and any(s.state in ENDED for s in settlements):
            self._done_sender.notify()  # lists an empty folder unless someone waits
        if self._sender is not None and (
            unblocked
            or any(s.state in (JobState.AVAILABLE, JobState.SCHEDULED) for s in settlements)
        ):
            self._sender.notify()
        return stale

    async def heartbeat_jobs(self, heartbeat: Heartbeat) -> HeartbeatReply:
        leases, lease_seconds = heartbeat.leases, heartbeat.lease_seconds
        return await self._on_thread(lambda s: s.heartbeat_jobs(leases, lease_seconds))

    async def checkpoint_job(self, checkpoint_write: CheckpointWrite) -> bool:
        lease, checkpoint, progress = (
            checkpoint_write.lease,
            checkpoint_write.checkpoint,
            checkpoint_write.progress,
        )
        return await self._on_thread(lambda s: s.checkpoint_job(lease, checkpoint, progress))

    async def hold_rate_bucket(self, bucket_hold: BucketHold) -> None:
        key, tokens, until = bucket_hold.key, bucket_hold.tokens, bucket_hold.until
        await self._on_thread(lambda s: records.hold_bucket(s, key, tokens, until))

    async def wait_for_jobs(self, job_wait: JobWait) -> None:
        timeout = job_wait.timeout
        if self._listener is None:
            self._listener = WakeupListener(self.path)
        await self._listener.wait(timeout)

    async def wait_for_finish(self, finish_wait: FinishWait) -> None:
        job_id, timeout = finish_wait.job_id, finish_wait.timeout
        if self._done_listener is None:  # listening before looking: no end is missed
            self._done_listener = WakeupListener(self.path, "done")
        job = await self.get_job(job_id)
        if job is not None and not job.is_finished:
            await self._done_listener.wait(timeout)

    # --- maintenance ----------------------------------------------------------------
    async def find_leases(self, query: LeaseQuery) -> list[HeldLease]:
        return await self._on_thread(lambda s: s.find_leases(query))

    async def prune_jobs(self, retention: Retention) -> int:
        completed_before, dead_before = retention.completed_before, retention.dead_before
        return await self._on_thread(lambda s: s.prune_jobs(completed_before, dead_before))

    async def expire_results(self, result_sweep: ResultSweep) -> list[str]:
        now, limit = result_sweep.now, result_sweep.limit
        return await self._on_thread(lambda s: s.expire_results(now, limit))

    # --- liveness (WorkerLiveness; see liveness.py) -------------------------------------
    liveness_signal = liveness.SIGNAL

    async def hold_liveness(self, worker_id: str) -> liveness.LockFileHolder:
        holder = liveness.LockFileHolder(self.path, worker_id)
        await holder.start(timeout=10.0)
        return holder

    async def dead_workers(self, candidates: Mapping[str, str]) -> set[str]:
        # A few file system calls per worker on this machine: cheaper than a thread hop.
        return liveness.dead_workers(self.path, candidates)

    # --- admin ---------------------------------------------------------------------
    async def get_job(self, job_id: str) -> Job | None:
        return await self._on_thread(lambda s: s.get_job(job_id))

    async def list_jobs(self, job_page: JobPage) -> list[Job]:
        where, limit, offset, after = (
            job_page.where,
            job_page.limit,
            job_page.offset,
            job_page.after,
        )
        return await self._on_thread(lambda s: s.list_jobs(where, limit, offset, after=after))

    async def count_jobs(self, where: JobFilter) -> int:
        return await self._on_thread(lambda s: s.count_jobs(where))

    async def count_running_of_key(self, concurrency_key: str) -> int:
        return await self._on_thread(lambda s: s.count_running_of_key(concurrency_key))

    async def set_key_limit(self, key_limit: KeyLimit) -> None:
        concurrency_key, limit = key_limit.concurrency_key, key_limit.limit
        await self._on_thread(lambda s: s.set_key_limit(concurrency_key, limit))
        if self._sender is not None:  # a raised limit may have unparked jobs
            self._sender.notify()

    async def key_limit(self, concurrency_key: str) -> int | None:
        return await self._on_thread(lambda s: s.key_limit(concurrency_key))

    async def cancel_job(self, job_id: str) -> Job | None:
        job = await self._on_thread(lambda s: s.cancel_job(job_id))
        if self._done_sender is not None and job is not None and job.is_finished:
            self._done_sender.notify()
        return job

    async def redrive_jobs(self, bulk_action: BulkAction) -> list[Job]:
        where, limit, dry_run = bulk_action.where, bulk_action.limit, bulk_action.dry_run
        jobs = await self._on_thread(lambda s: s.redrive_jobs(where, limit, dry_run))
        if jobs and not dry_run and self._sender is not None:
            self._sender.notify()
        return jobs

    async def delete_jobs(self, bulk_action: BulkAction) -> list[str]:
        where, limit, dry_run = bulk_action.where, bulk_action.limit, bulk_action.dry_run
        return await self._on_thread(lambda s: s.delete_jobs(where, limit, dry_run))

    async def dependants_of(self, job_id: str) -> list[str]:
        return await self._on_thread(lambda s: SqliteDependants(s.conn, 0.0).dependants(job_id))

    async def parents_of(self, job_id: str) -> list[str]:
        return await self._on_thread(lambda s: SqliteDependants(s.conn, 0.0).parents(job_id))

    async def cancel_jobs(self, bulk_action: BulkAction) -> list[str]:
        where, limit, dry_run = bulk_action.where, bulk_action.limit, bulk_action.dry_run
        return await self._on_thread(lambda s: s.cancel_jobs(where, limit, dry_run))

    async def task_names(self, where: JobFilter) -> list[str]:
        return await self._on_thread(lambda s: s.task_names(where))

    async def queue_stats(self) -> list[QueueStats]:
        return await self._on_thread(lambda s: s.queue_stats())

    async def flow_loads(self, query: FlowQuery) -> FlowLoads:
        return await self._on_thread(lambda s: s.flow_loads(query))

    async def queue_paused(self, queue: str) -> bool:
        return await self._on_thread(lambda s: s.queue_paused(queue))

    async def pause_queue(self, queue_pause: QueuePause) -> None:
        queue, paused = queue_pause.queue, queue_pause.paused
        await self._on_thread(lambda s: s.pause_queue(queue, paused))

    # --- shared records -------------------------------------------------------------
    async def get_record(self, record_key: RecordKey) -> str | None:
        namespace, key = record_key.namespace, record_key.key
        return await self._on_thread(lambda s: records.get(s, namespace, key))

    async def list_records(self, namespace: str) -> dict[str, str]:
        return await self._on_thread(lambda s: records.list_all(s, namespace))

    async def put_record(self, record_write: RecordWrite) -> None:
        namespace, key, value, ttl = (
            record_write.namespace,
            record_write.key,
            record_write.value,
            record_write.ttl,
        )
        await self._on_thread(lambda s: records.put(s, namespace, key, value, ttl))

    async def put_record_if_absent(self, record_write: RecordWrite) -> bool:
        namespace, key, value, ttl = (
            record_write.namespace,
            record_write.key,
            record_write.value,
            record_write.ttl,
        )
        return await self._on_thread(lambda s: records.put_if_absent(s, namespace, key, value, ttl))

    async def compare_and_set_record(self, record_swap: RecordSwap) -> bool:
        namespace, key, expected, value, ttl = (
            record_swap.namespace,
            record_swap.key,
            record_swap.expected,
            record_swap.value,
            record_swap.ttl,
        )
        return await self._on_thread(
            lambda s: records.compare_and_set(s, namespace, key, expected, value, ttl)
        )

    async def incr_record(self, record_increment: RecordIncrement) -> int:
        namespace, key, amount, ttl = (
            record_increment.namespace,
            record_increment.key,
            record_increment.amount,
            record_increment.ttl,
        )
        return await self._on_thread(lambda s: records.incr(s, namespace, key, amount, ttl))

    async def delete_record(self, record_key: RecordKey) -> bool:
        namespace, key = record_key.namespace, record_key.key
        return await self._on_thread(lambda s: records.delete(s, namespace, key))

    async def force_state(self, forced_state: ForcedState) -> None:
        """Test hook: try a raw state write, to show storage guards transitions."""
        job_id, state = forced_state.job_id, forced_state.state
        await self._on_thread(lambda s: s.force_state(job_id, state))
