"""The job lifecycle on Redis (JobLifecycle, and BlockingEnqueue): every state
transition is one Lua script (scripts/), so nothing is half done.

Age-based retention (`prune_jobs`, run by workers) applies on top of the URL's
`max_completed`/`max_dead` bounds (config.py), which the settle scripts keep. Times come
from the connection's clock, passed to the scripts (never Redis TIME), so an injected
clock drives all. Result expiry: the complete script files a job whose result expires in
`{p}:result_expiries` (id by expiry); expire_results.lua takes the due entries from
there and clears their results.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from typing import Any

from redis.exceptions import NoScriptError, ResponseError

from conveyor.backends import redact_url
from conveyor.backends.codec import job_from_fields
from conveyor.backends.params import (
    CheckpointWrite,
    ClaimedJobs,
    ClaimRequest,
    ForcedState,
    Heartbeat,
    HeartbeatReply,
    HeldLease,
    JobWait,
    LeaseQuery,
    ResultSweep,
    Retention,
    Settlement,
)
from conveyor.backends.redis.codec import float_arg, job_from_reply, optional_arg
from conveyor.backends.redis.connection import RedisConnection
from conveyor.backends.redis.enqueue_connections import Command, first_error
from conveyor.backends.redis.errors import UNAVAILABLE, translate, translated
from conveyor.backends.redis.script_args import (
    claim_args,
    enqueue_commands,
    enqueue_script,
    enqueued_jobs,
    settle_calls,
    stale_settlements,
)
from conveyor.backends.redis.script_sources import script_source
from conveyor.model.job import Job, JobState, NewJob

log = logging.getLogger("conveyor.redis")

_STAGE_LIMIT = 1000  # due jobs staged per claim call
LAYOUT = 2  # the key layout version (keys.py)
_PRUNE_CHUNK = 1000
_LONGEST_WAIT = 15.0  # one BLPOP at most; the caller loops


class RedisLifecycle:
    def __init__(self, connection: RedisConnection) -> None:
        self.connection = connection
        self.keys = connection.keys

    # --- the prefix as a whole: its layout, and (for tests) its deletion -----------------
    @translated
    async def migrate(self) -> list[int]:
        """Record the layout version (filling layout 2's waiting indexes for a layout 1)."""
        client = self.connection.client
        created = await client.set(self.keys.schema, str(LAYOUT), nx=True)
        older = not created and await client.get(self.keys.schema) == "1"
        if older:  # its jobs may be waiting already: index them
            await self.connection.scripts.call("index_waiting", [self.keys.queues], [])
            await client.set(self.keys.schema, str(LAYOUT))
        await self._warn_if_evicting()
        return [1, LAYOUT] if created else [LAYOUT] if older else []

    async def _warn_if_evicting(self) -> None:
        try:
            config = await self.connection.client.config_get("maxmemory-policy")
            policy = config.get("maxmemory-policy")
        except ResponseError:
            return  # CONFIG is disabled on many managed services
        if policy and policy != "noeviction":
            log.warning(
                "Redis at %s has maxmemory-policy=%s: under memory pressure it may "
                "evict jobs. Use noeviction for job queues.",
                redact_url(self.connection.url),
                policy,
            )

    @translated
    async def delete_all_keys(self) -> int:
        """Delete every key of this prefix (SCAN + UNLINK; never FLUSHDB). For tests."""
        client, deleted = self.connection.client, 0
        batch: list[str] = []
        async for key in client.scan_iter(match=self.keys.pattern(), count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                deleted += await client.unlink(*batch)
                batch = []
        if batch:
            deleted += await client.unlink(*batch)
        return deleted

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
            await self.connection.client.script_load(script_source(enqueue_script(jobs)))
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
        async with self.connection.client.pipeline(transaction=False) as pipe:
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
            conveyor_error = translate(self.connection.url, exc)
            if conveyor_error is None:
                raise
            raise conveyor_error from exc

    def _enqueue_commands(self, jobs: Sequence[NewJob]) -> tuple[list[Job], list[Command]]:
        return enqueue_commands(
            jobs,
            self.connection.clock(),
            self.connection.scripts.sha(enqueue_script(jobs)),
            self.keys,
        )

    # --- worker -------------------------------------------------------------------
    @translated
    async def fetch_jobs(self, request: ClaimRequest) -> ClaimedJobs:
        if request.limit <= 0 or not request.queues:
            return ClaimedJobs()
        rows = await self.connection.scripts.call(
            "claim",
            [self.keys.due, self.keys.paused],
            claim_args(request, self.connection.clock(), _STAGE_LIMIT),
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
            settlements,
            connection.clock(),
            self.keys,
            connection.max_completed,
            connection.max_dead,
        )
        if len(calls) == 1:
            replies = [await connection.scripts.call(*calls[0])]
        else:  # one round trip for the whole batch
            replies = await connection.scripts.call_in_one_trip(calls)
        return stale_settlements(settlements, replies)

    @translated
    async def heartbeat_jobs(self, heartbeat: Heartbeat) -> HeartbeatReply:
        leases, lease_seconds = heartbeat.leases, heartbeat.lease_seconds
        if not leases:
            return HeartbeatReply()
        args: list[str | int] = [float_arg(self.connection.clock() + lease_seconds)]
        for lease in leases:
            args += [lease.job_id, lease.token]
        lost, cancel = await self.connection.scripts.call("heartbeat", [self.keys.queues], args)
        return HeartbeatReply(lost=frozenset(lost), cancel_requested=frozenset(cancel))

    @translated
    async def checkpoint_job(self, checkpoint_write: CheckpointWrite) -> bool:
        lease, checkpoint, progress = (
            checkpoint_write.lease,
            checkpoint_write.checkpoint,
            checkpoint_write.progress,
        )
        stored = await self.connection.scripts.call(
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
            await self.connection.client.blpop(
                [self.keys.wake(q) for q in queues], timeout=min(timeout, _LONGEST_WAIT)
            )
        except UNAVAILABLE:
            # No hints while Redis is away: a poll interval; the next fetch reports it.
            await asyncio.sleep(timeout)

    # --- maintenance ----------------------------------------------------------------
    @translated
    async def find_leases(self, query: LeaseQuery) -> list[HeldLease]:
        expired_before = "" if query.expired_before is None else float_arg(query.expired_before)
        flat = await self.connection.scripts.call(
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
        client, total = self.connection.client, 0
        for queue in sorted(await client.smembers(self.keys.queues)):
            for state, before in (
                (JobState.COMPLETED, completed_before),
                (JobState.CANCELLED, completed_before),
                (JobState.DEAD, dead_before),
            ):
                skipped = 0  # candidates kept (inside a dedup window) are paged past
                while True:
                    ids = await client.zrangebyscore(
                        self.keys.state(queue, state),
                        "-inf",
                        f"({float_arg(before)}",
                        start=skipped,
                        num=_PRUNE_CHUNK,
                    )
                    if not ids:
                        break
                    deleted = await self.connection.scripts.call(
                        "prune",
                        [self.keys.unique],
                        [
                            float_arg(self.connection.clock()),
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

    @translated
    async def expire_results(self, result_sweep: ResultSweep) -> list[str]:
        now, limit = result_sweep.now, result_sweep.limit
        cleared: list[str] = []
        while len(cleared) < limit:
            want = limit - len(cleared)
            taken, *ids = await self.connection.scripts.call(
                "expire_results", [self.keys.result_expiries], [float_arg(now), want]
            )
            cleared += [str(i) for i in ids]
            if int(taken) < want:  # no more due (entries of gone jobs are taken too)
                break
        return cleared

    @translated
    async def get_job(self, job_id: str) -> Job | None:
        fields = await self.connection.client.hgetall(self.keys.job(job_id))
        return job_from_fields(fields, job_id) if fields else None

    # --- the conformance suite's test hook (StateForcing) ------------------------------
    @translated
    async def force_state(self, forced_state: ForcedState) -> None:
        """Test hook: try a raw state write, to show storage guards transitions."""
        job_id, state = forced_state.job_id, forced_state.state
        await self.connection.scripts.call("force_state", [self.keys.queues], [job_id, state.value])
