"""Redis backend: every state transition is one Lua script, so nothing is half done.

The URL and its options are in `config.py`, what the verbs share in `connection.py`;
age-based retention (`prune_jobs`, run by workers) applies on top of the
`max_completed`/`max_dead` bounds. Times come from `self.clock()`, passed to the scripts
(never Redis TIME), so an injected clock drives all.
See `keys.py` (layout), `inspector.py` (listing, counting), `docs/redis.md` (AOF, operations).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from redis.exceptions import NoScriptError, ResponseError

from conveyor.backends import redact_url
from conveyor.backends.codec import job_from_fields
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
    Retention,
    Settlement,
)
from conveyor.backends.redis import liveness
from conveyor.backends.redis.blobs import RedisBlobStore
from conveyor.backends.redis.codec import float_arg, job_from_reply, optional_arg
from conveyor.backends.redis.config import parse_redis_url
from conveyor.backends.redis.connection import RedisConnection
from conveyor.backends.redis.enqueue_connections import (
    Command,
    first_error,
)
from conveyor.backends.redis.errors import UNAVAILABLE, translate, translated
from conveyor.backends.redis.expiring import ResultExpiry
from conveyor.backends.redis.finish_wakeups import RedisFinishWakeups
from conveyor.backends.redis.flow import RedisFlowState
from conveyor.backends.redis.inspector import RedisInspector
from conveyor.backends.redis.records import RedisRecords
from conveyor.backends.redis.script_args import (
    claim_args,
    enqueue_commands,
    enqueue_script,
    enqueued_jobs,
    settle_calls,
    stale_settlements,
)
from conveyor.backends.redis.script_calls import Scripts
from conveyor.backends.redis.script_sources import script_source
from conveyor.model.clock import Clock, system_clock
from conveyor.model.job import Job, JobState, NewJob

__all__ = ["RedisBackend", "parse_redis_url"]

log = logging.getLogger("conveyor.redis")

_STAGE_LIMIT = 1000  # due jobs staged per claim call
LAYOUT = 2  # the key layout version (keys.py)
_PRUNE_CHUNK = 1000
_LONGEST_WAIT = 15.0  # one BLPOP at most; the caller loops


class RedisBackend(ResultExpiry):
    """The `Backend` protocol on Redis (redis-py asyncio; hiredis when installed)."""

    def __init__(self, url: str, clock: Clock = system_clock) -> None:
        self.url = url
        self.clock = clock
        self.connection = RedisConnection(url, clock)
        self.keys = self.connection.keys
        self.inspector = RedisInspector(self.connection)
        self.flow = RedisFlowState(self.connection)
        self.records = RedisRecords(self.connection)
        self.finish_wakeups = RedisFinishWakeups(self.connection)

    def __repr__(self) -> str:
        return f"<RedisBackend {redact_url(self.url)}>"

    def default_blob_store(self) -> RedisBlobStore:
        """Blobs under this prefix, on this client (ProvidesBlobStore)."""
        return RedisBlobStore(self.connection)

    # --- life of the connection -------------------------------------------------
    @property
    def client(self) -> Any:
        """The redis-py asyncio client (typed Any: redis-py annotates every command as
        returning "Awaitable[T] | T", which strict mypy cannot await)."""
        return self.connection.client

    @property
    def scripts(self) -> Scripts:
        """The Lua scripts, called by name (script_calls.py)."""
        return self.connection.scripts

    async def open(self) -> None:
        await self.connection.open()

    async def close(self) -> None:
        await self.connection.close()

    @translated
    async def migrate(self) -> list[int]:
        """Record the layout version (filling layout 2's waiting indexes for a layout 1)."""
        created = await self.client.set(self.keys.schema, str(LAYOUT), nx=True)
        older = not created and await self.client.get(self.keys.schema) == "1"
        if older:  # its jobs may be waiting already: index them
            await self.scripts.call("index_waiting", [self.keys.queues], [])
            await self.client.set(self.keys.schema, str(LAYOUT))
        await self._warn_if_evicting()
        return [1, LAYOUT] if created else [LAYOUT] if older else []

    async def _warn_if_evicting(self) -> None:
        try:
            policy = (await self.client.config_get("maxmemory-policy")).get("maxmemory-policy")
        except ResponseError:
            return  # CONFIG is disabled on many managed services
        if policy and policy != "noeviction":
            log.warning(
                "Redis at %s has maxmemory-policy=%s: under memory pressure it may "
                "evict jobs. Use noeviction for job queues.",
                redact_url(self.url),
                policy,
            )

    # --- producer -----------------------------------------------------------------
    # One EVALSHA per 1,000 jobs, in one write: a batch is one round trip. Through the
    # enqueue connection when it is free (enqueue_connections.py): enqueues are
    # idempotent, the job id dedups a resend.
    @translated
    async def enqueue_jobs(self, jobs: Sequence[NewJob]) -> list[Job]:
        if not jobs:
            return []
        made, commands = self._enqueue_commands(jobs)
        replies = await self._send_idempotent(commands)
        if any(isinstance(reply, NoScriptError) for reply in replies):  # a restarted server
            await self.client.script_load(script_source(enqueue_script(jobs)))
            replies = await self._send_idempotent(commands)  # it may be taken now
        return enqueued_jobs(made, first_error(replies), jobs)

    def _send_idempotent(self, commands: Sequence[Command]) -> Awaitable[list[Any]]:
        """Through the enqueue connection when it is free, else through the pool."""
        held = self.connection.enqueue_connection
        if held is None or held.busy:
            return self._pipelined(commands)
        return held.call_many(commands)

    async def _pipelined(self, commands: Sequence[Command]) -> list[Any]:
        """The commands through the pool in one round trip; errors as values."""
        async with self.client.pipeline(transaction=False) as pipe:
            for command in commands:
                pipe.execute_command(*command)
            replies: list[Any] = await pipe.execute(raise_on_error=False)
        return replies

    def enqueue_jobs_blocking(self, jobs: Sequence[NewJob]) -> list[Job]:
        """Enqueue from the caller's thread on a connection of its own (BlockingEnqueue):
        the sync facade then skips the two thread hops through the portal loop."""
        if not jobs:
            return []
        per_thread = self.connection.enqueue_connections_per_thread
        made, commands = self._enqueue_commands(jobs)
        try:
            replies = per_thread.call_many(commands)
            if any(isinstance(reply, NoScriptError) for reply in replies):
                per_thread.call_many([("SCRIPT", "LOAD", script_source(enqueue_script(jobs)))])
                replies = per_thread.call_many(commands)
            return enqueued_jobs(made, first_error(replies), jobs)
        except Exception as exc:
            conveyor_error = translate(self.url, exc)
            if conveyor_error is None:
                raise
            raise conveyor_error from exc

    def _enqueue_commands(self, jobs: Sequence[NewJob]) -> tuple[list[Job], list[Command]]:
        return enqueue_commands(
            jobs, self.clock(), self.scripts.sha(enqueue_script(jobs)), self.keys
        )

    # --- worker -------------------------------------------------------------------
    @translated
    async def fetch_jobs(self, request: ClaimRequest) -> ClaimedJobs:
        if request.limit <= 0 or not request.queues:
            return ClaimedJobs()
        rows = await self.scripts.call(
            "claim",
            [self.keys.due, self.keys.paused],
            claim_args(request, self.clock(), _STAGE_LIMIT),
        )
        next_token_at = rows.pop() if request.rate_limits else None
        return ClaimedJobs.of(
            (job_from_reply(row) for row in rows), float(next_token_at) if next_token_at else None
        )

    @translated
    async def settle_jobs(self, settlements: Sequence[Settlement]) -> list[str]:
        if not settlements:
            return []
        connection = self.connection
        calls = settle_calls(
            settlements, self.clock(), self.keys, connection.max_completed, connection.max_dead
        )
        if len(calls) == 1:
            replies = [await self.scripts.call(*calls[0])]
        else:  # one round trip for the whole batch
            replies = await self.scripts.call_in_one_trip(calls)
        return stale_settlements(settlements, replies)

    @translated
    async def heartbeat_jobs(self, heartbeat: Heartbeat) -> HeartbeatReply:
        leases, lease_seconds = heartbeat.leases, heartbeat.lease_seconds
        if not leases:
            return HeartbeatReply()
        args: list[str | int] = [float_arg(self.clock() + lease_seconds)]
        for lease in leases:
            args += [lease.job_id, lease.token]
        lost, cancel = await self.scripts.call("heartbeat", [self.keys.queues], args)
        return HeartbeatReply(lost=frozenset(lost), cancel_requested=frozenset(cancel))

    @translated
    async def checkpoint_job(self, checkpoint_write: CheckpointWrite) -> bool:
        lease, checkpoint, progress = (
            checkpoint_write.lease,
            checkpoint_write.checkpoint,
            checkpoint_write.progress,
        )
        stored = await self.scripts.call(
            "checkpoint",
            [self.keys.queues],
            [lease.job_id, lease.token, optional_arg(checkpoint), optional_arg(progress)],
        )
        return bool(stored)

    async def wait_for_jobs(self, job_wait: JobWait) -> None:
        """Block on the queues' wake lists (BLPOP) until a hint or `timeout`."""
        queues, timeout = job_wait.queues, job_wait.timeout
        if timeout <= 0 or not queues:
            return
        try:
            await self.client.blpop(
                [self.keys.wake(q) for q in queues], timeout=min(timeout, _LONGEST_WAIT)
            )
        except UNAVAILABLE:
            # No hints while Redis is away: a poll interval; the next fetch reports it.
            await asyncio.sleep(timeout)

    # --- maintenance ----------------------------------------------------------------
    @translated
    async def find_leases(self, query: LeaseQuery) -> list[HeldLease]:
        expired_before = "" if query.expired_before is None else float_arg(query.expired_before)
        flat = await self.scripts.call(
            "find_leases", [self.keys.queues], [expired_before, query.limit, *query.worker_ids]
        )
        return [
            HeldLease(
                job_id=flat[i],
                token=int(flat[i + 1]),
                worker_id=flat[i + 2] or None,
                attempt=int(flat[i + 3]),
                max_attempts=int(flat[i + 4]),
                lease_expires_at=float(flat[i + 5]) if flat[i + 5] else None,
            )
            for i in range(0, len(flat), 6)
        ]

    @translated
    async def prune_jobs(self, retention: Retention) -> int:
        completed_before, dead_before = retention.completed_before, retention.dead_before
        total = 0
        for queue in sorted(await self.client.smembers(self.keys.queues)):
            for state, before in (
                (JobState.COMPLETED, completed_before),
                (JobState.CANCELLED, completed_before),
                (JobState.DEAD, dead_before),
            ):
                skipped = 0  # candidates kept (inside a dedup window) are paged past
                while True:
                    ids = await self.client.zrangebyscore(
                        self.keys.state(queue, state),
                        "-inf",
                        f"({float_arg(before)}",
                        start=skipped,
                        num=_PRUNE_CHUNK,
                    )
                    if not ids:
                        break
                    deleted = await self.scripts.call(
                        "prune",
                        [self.keys.unique],
                        [
                            float_arg(self.clock()),
                            float_arg(completed_before),
                            float_arg(dead_before),
                            *ids,
                        ],
                    )
                    total += deleted
                    skipped += len(ids) - deleted
                    if len(ids) < _PRUNE_CHUNK:
                        break
        return total

    # --- liveness (WorkerLiveness; see liveness.py) -------------------------------------
    liveness_signal = liveness.SIGNAL

    async def hold_liveness(self, worker_id: str) -> liveness.NamedConnectionHolder:
        holder = liveness.NamedConnectionHolder(self.client, worker_id)
        await holder.start(timeout=10.0)
        return holder

    @translated
    async def dead_workers(self, candidates: Mapping[str, str]) -> set[str]:
        return await liveness.dead_workers(self.client, candidates)

    @translated
    async def get_job(self, job_id: str) -> Job | None:
        fields = await self.client.hgetall(self.keys.job(job_id))
        return job_from_fields(fields, job_id) if fields else None

    @translated
    async def force_state(self, forced_state: ForcedState) -> None:
        """Test hook: try a raw state write, to show storage guards transitions."""
        job_id, state = forced_state.job_id, forced_state.state
        await self.scripts.call("force_state", [self.keys.queues], [job_id, state.value])

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

    # --- FinishWakeups (finish_wakeups.py) -----------------------------------------------
    async def wait_for_finish(self, finish_wait: FinishWait) -> None:
        await self.finish_wakeups.wait_for_finish(finish_wait)

    # --- tests and operations --------------------------------------------------------
    @translated
    async def delete_all_keys(self) -> int:
        """Delete every key of this prefix (SCAN + UNLINK; never FLUSHDB). For tests."""
        deleted = 0
        batch: list[str] = []
        async for key in self.client.scan_iter(match=self.keys.pattern(), count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                deleted += await self.client.unlink(*batch)
                batch = []
        if batch:
            deleted += await self.client.unlink(*batch)
        return deleted
