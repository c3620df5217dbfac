"""Redis backend: every state transition is one Lua script, so nothing is half done.

URL: `redis://[:password@]host:6379/0?prefix=conveyor` (`rediss://` for TLS).
Query options:

* `prefix` (default `conveyor`): every key starts with `{prefix}:`; different
  prefixes never see each other's jobs (tests use a random one each).
* `max_completed` (default 100000): most completed (and, separately, cancelled)
  jobs kept per queue; the oldest are dropped as new ones finish. `0`: no bound.
* `max_dead` (default 100000): the same bound for the dead-letter queue.

Age-based retention (`prune_jobs`, run by workers) applies on top of these.
Times come from `self.clock()` and are passed to the scripts; Redis TIME is never
used for job logic, so an injected clock drives everything. See `keys.py` for the
key layout and `docs/redis.md` for durability (AOF) and operations.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import socket
from dataclasses import replace
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar, cast
from urllib.parse import parse_qs, urlsplit

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.connection import AbstractConnection as SyncConnection
from redis.exceptions import AuthenticationError, AuthenticationWrongNumberOfArgsError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ...errors import BackendUnavailable, ConfigurationError, JobNotFound
from ...job import TERMINAL_STATES, AttemptError, Job, JobState, NewJob
from ...lifecycle import IllegalTransition, initial_state
from ...timeutil import Clock, system_clock
from ...version import __version__
from .. import redact_url
from ..base import HeartbeatReply, JobFilter, Lease, QueueStats, Settlement, redrive_scope
from .keys import Keys, id_from_rank, micros_from_rank
from .lane import Command, Lane, ThreadLanes, first_error
from .lua import SCRIPT_NAMES, script_source

log = logging.getLogger("conveyor.redis")

P = ParamSpec("P")
T = TypeVar("T")

_OPTIONS = {"prefix", "max_completed", "max_dead"}
_ENQUEUE_CHUNK = 1000  # jobs per script call; several calls still go in one round trip
_STAGE_LIMIT = 1000  # due jobs staged per claim call
_RESCUE_LIMIT = 1000
_PRUNE_CHUNK = 1000
_ILLEGAL = "CONVEYOR_ILLEGAL_TRANSITION"
_LONGEST_WAIT = 15.0  # one BLPOP at most; the caller loops
_KEEPALIVE = {
    option: value
    for name, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3))
    if (option := getattr(socket, name, None)) is not None
}
_UNAVAILABLE = (RedisConnectionError, RedisTimeoutError, OSError)


def parse_redis_url(url: str) -> tuple[str, dict[str, str]]:
    """Split a Conveyor Redis URL into the driver's URL and Conveyor's options."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        raise ConfigurationError(f"not a Redis URL: {redact_url(url)!r}")
    options = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    unknown = set(options) - _OPTIONS
    if unknown:
        raise ConfigurationError(
            f"unknown Redis URL option(s) {sorted(unknown)} in {redact_url(url)!r}; "
            f"known: {', '.join(sorted(_OPTIONS))}"
        )
    prefix = options.get("prefix", "conveyor")
    if not prefix or any(c in prefix for c in "{}*?[] \t\r\n"):
        raise ConfigurationError(
            f"prefix={prefix!r} in {redact_url(url)!r}: use letters, digits, '-', '_', ':' or '.'"
        )
    for name in ("max_completed", "max_dead"):
        if name in options:
            try:
                if int(options[name]) < 0:
                    raise ValueError
            except ValueError:
                raise ConfigurationError(
                    f"{name}={options[name]!r} in {redact_url(url)!r}: expected a whole "
                    "number >= 0 (0: no bound)"
                ) from None
    return parts._replace(query="").geturl(), options


def _num(value: float) -> str:
    """Exact text of a float (repr round-trips; Lua's own formatting would not)."""
    return repr(float(value))


def _opt(value: str | None) -> str:
    """Optional script argument: '' for None, '~' + text otherwise."""
    return "" if value is None else "~" + value


def _pairs(flat: Sequence[str]) -> dict[str, str]:
    it = iter(flat)
    return dict(zip(it, it))


def _opt_float(fields: Mapping[str, str], name: str) -> float | None:
    value = fields.get(name)
    return None if value is None else float(value)


def job_from_hash(fields: Mapping[str, str]) -> Job:
    return Job(
        id=fields["id"],
        task=fields["task"],
        queue=fields["queue"],
        payload=fields["payload"],
        state=JobState(fields["state"]),
        priority=int(fields["priority"]),
        attempt=int(fields.get("attempt", 0)),
        max_attempts=int(fields["max_attempts"]),
        run_at=float(fields["run_at"]),
        created_at=float(fields["created_at"]),
        started_at=_opt_float(fields, "started_at"),
        finished_at=_opt_float(fields, "finished_at"),
        lease_token=int(fields.get("lease_token", 0)),
        lease_expires_at=_opt_float(fields, "lease_expires_at"),
        worker_id=fields.get("worker_id"),
        unique_key=fields.get("unique_key"),
        unique_for=_opt_float(fields, "unique_for"),
        result=fields.get("result"),
        errors=tuple(AttemptError.from_dict(e) for e in json.loads(fields.get("errors", "[]"))),
        checkpoint=fields.get("checkpoint"),
        progress=fields.get("progress"),
        cancel_requested=fields.get("cancel_requested") == "1",
        timeout=_opt_float(fields, "timeout"),
        meta=json.loads(fields.get("meta", "{}")),
    )


def _translate(backend: RedisBackend, exc: Exception) -> Exception | None:
    """The Conveyor error for a driver error, or None to let it through."""
    if isinstance(exc, (AuthenticationError, AuthenticationWrongNumberOfArgsError)):
        # redis-py makes these ConnectionErrors, but retrying will not help.
        return ConfigurationError(
            f"Redis at {redact_url(backend.url)} refused the credentials ({exc}); check the "
            "user and password in the URL")
    if isinstance(exc, _UNAVAILABLE):
        return BackendUnavailable(
            f"Redis at {redact_url(backend.url)} is unreachable ({type(exc).__name__}: {exc}). "
            "Retry later; re-enqueueing the same job id is safe (it deduplicates).")
    if isinstance(exc, ResponseError) and _ILLEGAL in str(exc):
        old, _, new = str(exc).split(_ILLEGAL, 1)[1].strip().partition(">")
        return IllegalTransition(JobState(old), JobState(new))
    return None


def _translated(
    method: Callable[P, Coroutine[Any, Any, T]],
) -> Callable[P, Coroutine[Any, Any, T]]:
    """Driver errors become Conveyor errors at the boundary."""

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(*args, **kwargs)
        except Exception as exc:
            backend = args[0]
            assert isinstance(backend, RedisBackend)
            translated = _translate(backend, exc)
            if translated is None:
                raise
            raise translated from exc

    return wrapper


class RedisBackend:
    """The `Backend` protocol on Redis (redis-py asyncio; hiredis when installed)."""

    def __init__(self, url: str, clock: Clock = system_clock) -> None:
        self.url = url
        self.clock = clock
        self._driver_url, options = parse_redis_url(url)
        self.keys = Keys(options.get("prefix", "conveyor"))
        self.max_completed = int(options.get("max_completed", 100_000))
        self.max_dead = int(options.get("max_dead", 100_000))
        self._client: aioredis.Redis | None = None
        self._scripts: dict[str, AsyncScript] = {}
        self._lane: Lane | None = None
        self._thread_lanes: ThreadLanes | None = None

    def __repr__(self) -> str:
        return f"<RedisBackend {redact_url(self.url)}>"

    # --- life of the connection -------------------------------------------------
    @property
    def client(self) -> Any:
        """The redis-py asyncio client (typed Any: redis-py annotates every command as
        returning "Awaitable[T] | T", which strict mypy cannot await)."""
        if self._client is None:
            raise RuntimeError("RedisBackend used before open() or after close()")
        return self._client

    async def open(self) -> None:
        if self._client is not None:
            return
        # One quick retry takes a fresh connection when a pooled one died with a
        # server restart; longer outages surface as BackendUnavailable and the
        # worker's own backoff takes over.
        options: dict[str, Any] = dict(
            decode_responses=True,
            socket_connect_timeout=5.0,
            # A server that stops answering (a partition without a reset) must not
            # hang a worker forever. TCP keepalive finds the dead peer in about 25 s.
            # Not socket_timeout: redis-py wraps every read in a timeout context that
            # now and then swallows a task cancellation (a worker then cannot stop).
            socket_keepalive=True,
            socket_keepalive_options=_KEEPALIVE,
            health_check_interval=30,
            client_name="conveyor",
        )
        self._client = aioredis.Redis.from_url(self._driver_url, retry=Retry(NoBackoff(), 1),
                                               **options)
        self._scripts = {
            name: self._client.register_script(script_source(name)) for name in SCRIPT_NAMES
        }
        self._lane = Lane(self._client.connection_pool.make_connection)
        sync_pool = redis.ConnectionPool.from_url(self._driver_url, **options)
        self._thread_lanes = ThreadLanes(
            cast(Callable[[], SyncConnection], sync_pool.make_connection))

    async def close(self) -> None:
        client, self._client = self._client, None
        lane, self._lane = self._lane, None
        if lane is not None:
            await lane.close()
        if self._thread_lanes is not None:
            self._thread_lanes.close()
        if client is not None:
            await client.aclose()

    @_translated
    async def migrate(self) -> list[int]:
        """Redis has no schema to create; the layout version is recorded once."""
        created = await self.client.set(self.keys.schema, "1", nx=True)
        await self._warn_if_evicting()
        return [1] if created else []

    async def _warn_if_evicting(self) -> None:
        try:
            policy = (await self.client.config_get("maxmemory-policy")).get("maxmemory-policy")
        except ResponseError:
            return  # CONFIG is disabled on many managed services
        if policy and policy != "noeviction":
            log.warning("Redis at %s has maxmemory-policy=%s: under memory pressure it may "
                        "evict jobs. Use noeviction for job queues.", redact_url(self.url), policy)

    def _script(self, name: str, keys: Sequence[str], args: Sequence[str | int]) -> Awaitable[Any]:
        return self._evalsha(self._scripts[name], keys, args)

    async def _scripts_in_one_trip(
        self, calls: Sequence[tuple[str, Sequence[str], Sequence[str | int]]]
    ) -> list[Any]:
        """Several script calls in one pipeline (one round trip). redis-py's own
        script pipelining asks SCRIPT EXISTS first, a second round trip every time;
        here a call the server does not know is simply sent again after loading."""
        async with self.client.pipeline(transaction=False) as pipe:
            for name, keys, args in calls:
                pipe.evalsha(self._scripts[name].sha, len(keys), *keys, self.keys.base, *args)
            replies: list[Any] = await pipe.execute(raise_on_error=False)
        for i, reply in enumerate(replies):
            if isinstance(reply, NoScriptError):
                name, keys, args = calls[i]
                replies[i] = await self._evalsha(self._scripts[name], keys, args)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies

    async def _evalsha(self, script: AsyncScript, keys: Sequence[str],
                       args: Sequence[str | int]) -> Any:
        # EVALSHA directly; SCRIPT LOAD only when the server does not know the script,
        # e.g. after a restart.
        try:
            return await self.client.evalsha(script.sha, len(keys), *keys, self.keys.base, *args)
        except NoScriptError:
            script.sha = await self.client.script_load(script.script)
            return await self.client.evalsha(script.sha, len(keys), *keys, self.keys.base, *args)

    # --- producer -----------------------------------------------------------------
    # One EVALSHA per 1,000 jobs, all sent in one write: a batch is one round trip.
    # Enqueues go through a lane when one is free (see lane.py): they are idempotent,
    # as the job id deduplicates a resend.
    @_translated
    async def enqueue_jobs(self, jobs: Sequence[NewJob]) -> list[Job]:
        if not jobs:
            return []
        made, commands = self._enqueue_commands(jobs)
        replies = await self._send_idempotent(commands)
        if any(isinstance(reply, NoScriptError) for reply in replies):  # a restarted server
            await self.client.script_load(script_source("enqueue"))
            replies = await self._send_idempotent(commands)  # the lane may be taken now
        return self._enqueued(made, first_error(replies))

    def _send_idempotent(self, commands: Sequence[Command]) -> Awaitable[list[Any]]:
        """Through the lane when it is free, else through the pool."""
        lane = self._lane
        if lane is None or lane.busy:
            return self._pipelined(commands)
        return lane.call_many(commands)

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
        lanes = self._thread_lanes
        if lanes is None:
            raise RuntimeError("RedisBackend used before open() or after close()")
        made, commands = self._enqueue_commands(jobs)
        try:
            replies = lanes.call_many(commands)
            if any(isinstance(reply, NoScriptError) for reply in replies):
                lanes.call_many([("SCRIPT", "LOAD", script_source("enqueue"))])
                replies = lanes.call_many(commands)
            return self._enqueued(made, first_error(replies))
        except Exception as exc:
            translated = _translate(self, exc)
            if translated is None:
                raise
            raise translated from exc

    def _enqueue_commands(self, jobs: Sequence[NewJob]) -> tuple[list[Job], list[Command]]:
        """The jobs as stored when new, and the EVALSHA commands that store them."""
        now = self.clock()
        now_text = _num(now)
        head: list[str | int] = [
            "EVALSHA", self._scripts["enqueue"].sha, 5, self.keys.seq, self.keys.due,
            self.keys.unique, self.keys.queues, self.keys.jobs, self.keys.base, now_text]
        made: list[Job] = []
        commands: list[Command] = []
        for start in range(0, len(jobs), _ENQUEUE_CHUNK):
            command = list(head)
            for new in jobs[start:start + _ENQUEUE_CHUNK]:
                if new.run_at is None:  # the common case: due now, text already made
                    run_at, run_at_text, state = now, now_text, JobState.AVAILABLE
                else:
                    run_at, run_at_text = new.run_at, _num(new.run_at)
                    state = initial_state(run_at, now)
                command += (
                    new.id, new.queue, new.task, new.payload, state.value, new.priority,
                    new.max_attempts, run_at_text, f"{max(0, int(run_at * 1e6)):017d}",
                    _opt(new.unique_key),
                    "" if new.unique_for is None else _num(new.unique_for),
                    "" if new.timeout is None else _num(new.timeout),
                    json.dumps(new.meta) if new.meta else "",
                )
                made.append(Job(
                    id=new.id, task=new.task, queue=new.queue, payload=new.payload,
                    state=state, priority=new.priority, max_attempts=new.max_attempts,
                    run_at=run_at, created_at=now, unique_key=new.unique_key,
                    unique_for=new.unique_for, timeout=new.timeout, meta=new.meta,
                ))
            commands.append(command)
        return made, commands

    @staticmethod
    def _enqueued(made: list[Job], replies: list[Any]) -> list[Job]:
        """Each job as stored: the new one (reply 0) or the one it duplicates."""
        flat = [reply for chunk in replies for reply in chunk]
        return [job if reply == 0 else job_from_hash(_pairs(reply))
                for job, reply in zip(made, flat, strict=True)]

    # --- worker -------------------------------------------------------------------
    @_translated
    async def fetch_jobs(
        self, queues: Sequence[str], limit: int, worker_id: str, lease_seconds: float
    ) -> list[Job]:
        if limit <= 0 or not queues:
            return []
        now = self.clock()
        rows = await self._script(
            "claim", [self.keys.due, self.keys.paused],
            [_num(now), _num(now + lease_seconds), worker_id, limit, _STAGE_LIMIT, *queues],
        )
        return [job_from_hash(_pairs(row)) for row in rows]

    @_translated
    async def settle_jobs(self, settlements: Sequence[Settlement]) -> list[str]:
        if not settlements:
            return []
        now_text = _num(self.clock())
        complete: list[str | int] = [now_text, self.max_completed]
        fail: list[str | int] = [now_text, self.max_completed, self.max_dead]
        release: list[str | int] = []
        for s in settlements:
            if s.state is JobState.COMPLETED:
                complete += [s.job_id, s.token, _opt(s.result)]
            elif s.refund_attempt:
                release += [s.job_id, s.token, s.state.value,
                            _opt(None if s.run_at is None else _num(s.run_at))]
            else:
                error = None if s.error is None else json.dumps(s.error.to_dict())
                fail += [s.job_id, s.token, s.state.value,
                         _opt(None if s.run_at is None else _num(s.run_at)), _opt(error)]
        calls: list[tuple[str, list[str], list[str | int]]] = []
        if len(complete) > 2:
            calls.append(("complete", [self.keys.unique], complete))
        if len(fail) > 3:
            calls.append(("fail", [self.keys.due, self.keys.unique], fail))
        if release:
            calls.append(("release", [self.keys.due], release))
        if len(calls) == 1:
            replies = [await self._script(*calls[0])]
        else:  # one round trip for the whole batch
            replies = await self._scripts_in_one_trip(calls)
        stale: list[str] = []
        illegal: str | None = None
        for rejected in replies:
            for job_id, code in rejected:
                if code == "stale":
                    stale.append(job_id)
                else:
                    illegal = job_id
        if illegal is not None:
            target = next(s.state for s in settlements if s.job_id == illegal)
            raise IllegalTransition(JobState.RUNNING, target)
        return stale

    @_translated
    async def heartbeat_jobs(self, leases: Sequence[Lease], lease_seconds: float) -> HeartbeatReply:
        if not leases:
            return HeartbeatReply()
        args: list[str | int] = [_num(self.clock() + lease_seconds)]
        for lease in leases:
            args += [lease.job_id, lease.token]
        lost, cancel = await self._script("heartbeat", [self.keys.queues], args)
        return HeartbeatReply(lost=frozenset(lost), cancel_requested=frozenset(cancel))

    @_translated
    async def checkpoint_job(self, lease: Lease, checkpoint: str | None, progress: str | None) -> bool:
        stored = await self._script(
            "checkpoint", [self.keys.queues],
            [lease.job_id, lease.token, _opt(checkpoint), _opt(progress)],
        )
        return bool(stored)

    async def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> None:
        """Block on the queues' wake lists (BLPOP) until a hint or `timeout`."""
        if timeout <= 0 or not queues:
            return
        try:
            await self.client.blpop([self.keys.wake(q) for q in queues],
                                    timeout=min(timeout, _LONGEST_WAIT))
        except _UNAVAILABLE:
            # No hints while Redis is away: behave like a poll interval, and let the
            # next fetch report the outage.
            await asyncio.sleep(timeout)

    # --- maintenance ----------------------------------------------------------------
    @_translated
    async def rescue_expired_jobs(self) -> list[str]:
        rescued: list[str] = []
        while True:
            batch = await self._script(
                "rescue", [self.keys.queues],
                [_num(self.clock()), __version__, _RESCUE_LIMIT, self.max_dead],
            )
            rescued += batch
            if len(batch) < _RESCUE_LIMIT:
                return rescued

    @_translated
    async def prune_jobs(self, completed_before: float, dead_before: float) -> int:
        total = 0
        for queue in sorted(await self.client.smembers(self.keys.queues)):
            for state, before in ((JobState.COMPLETED, completed_before),
                                  (JobState.CANCELLED, completed_before),
                                  (JobState.DEAD, dead_before)):
                skipped = 0  # candidates kept (inside a dedup window) are paged past
                while True:
                    ids = await self.client.zrangebyscore(
                        self.keys.state(queue, state), "-inf", f"({_num(before)}",
                        start=skipped, num=_PRUNE_CHUNK)
                    if not ids:
                        break
                    deleted = await self._script(
                        "prune", [self.keys.unique],
                        [_num(self.clock()), _num(completed_before), _num(dead_before), *ids],
                    )
                    total += deleted
                    skipped += len(ids) - deleted
                    if len(ids) < _PRUNE_CHUNK:
                        break
        return total

    # --- admin ---------------------------------------------------------------------
    @_translated
    async def get_job(self, job_id: str) -> Job | None:
        fields = await self.client.hgetall(self.keys.job(job_id))
        return job_from_hash(fields) if fields else None

    _LIST_FIELDS = ("state", "queue", "task", "seq", "finished_at")

    async def _rows(self, ids: Sequence[str], where: JobFilter) -> list[list[str | None]]:
        # errors and payload (maybe large) only when a filter reads them: fields 5 and 6
        fields = (*self._LIST_FIELDS, "errors" if where.error_type is not None else "state",
                  "payload" if where.args_contains is not None else "state")
        async with self.client.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hmget(self.keys.job(job_id), fields)
            rows: list[list[str | None]] = await pipe.execute()
        return rows

    @staticmethod
    def _matches(where: JobFilter, row: Sequence[str | None]) -> bool:
        state, queue, task = row[0], row[1], row[2]
        if state is None:
            return False  # gone since the index was read
        if where.states and state not in {s.value for s in where.states}:
            return False
        if (where.queues and queue not in where.queues) or (where.tasks and task not in where.tasks):
            return False
        if where.error_type is not None:
            errors = json.loads(row[5] or "[]")
            if not errors or errors[-1].get("type") != where.error_type:
                return False
        if where.args_contains is not None and where.args_contains not in (row[6] or ""):
            return False
        return True

    async def _candidates(self, where: JobFilter) -> list[str]:
        """Every id that may match `where`, from the state indexes it names."""
        if where.ids:
            return list(dict.fromkeys(where.ids))
        queues = list(where.queues) or sorted(await self.client.smembers(self.keys.queues))
        states = where.states or tuple(JobState)
        async with self.client.pipeline(transaction=False) as pipe:
            for queue in queues:
                for state in states:
                    pipe.zrange(self.keys.state(queue, state), 0, -1)
            pages = await pipe.execute()
        candidates: list[str] = []
        for (_, state), page in zip(((q, s) for q in queues for s in states), pages, strict=True):
            candidates += [id_from_rank(m) for m in page] if state is JobState.AVAILABLE else page
        return candidates

    async def _select(self, where: JobFilter, oldest_finished_first: bool,
                      before_seq: int | None = None) -> list[str]:
        """Ids matching `where`, in listing order (newest first, or oldest finished first),
        only those enqueued before `before_seq` if given (the keyset cursor)."""
        candidates = await self._candidates(where)
        chosen: list[tuple[float, int, str]] = []
        for job_id, row in zip(candidates, await self._rows(candidates, where), strict=True):
            if before_seq is not None and int(row[3] or 0) >= before_seq:
                continue
            if self._matches(where, row):
                finished_at = row[4]
                order = float(finished_at or 0.0) if oldest_finished_first else 0.0
                chosen.append((order, -int(row[3] or 0), job_id))
        chosen.sort()
        return [job_id for _, _, job_id in chosen]

    async def _newest(self, where: JobFilter, want: int, before_seq: int | None = None) -> list[str]:
        """The first `want` ids matching `where`, newest first, read from the seq
        index page by page: a listing costs what it shows, not the whole store. With
        `before_seq` the walk starts below the cursor, so a deep page costs the same."""
        found: list[str] = []
        page_size = max(500, 2 * want)
        start = 0
        top = "+inf" if before_seq is None else f"({before_seq}"
        while len(found) < want:
            ids = await self.client.zrevrangebyscore(self.keys.jobs, top, "-inf", start=start,
                                                     num=page_size)
            if not ids:
                break
            found += [job_id for job_id, row in zip(ids, await self._rows(ids, where), strict=True)
                      if self._matches(where, row)]
            start += page_size
        return found[:want]

    async def _indexed_count(self, where: JobFilter) -> int:
        queues = list(where.queues) or sorted(await self.client.smembers(self.keys.queues))
        async with self.client.pipeline(transaction=False) as pipe:
            for queue in queues:
                for state in where.states or tuple(JobState):
                    pipe.zcard(self.keys.state(queue, state))
            return sum(await pipe.execute())

    async def _load(self, ids: Iterable[str]) -> list[Job]:
        async with self.client.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hgetall(self.keys.job(job_id))
            rows = await pipe.execute()
        return [job_from_hash(row) for row in rows if row]

    @_translated
    async def list_jobs(self, where: JobFilter, limit: int = 50, offset: int = 0,
                        after: str | None = None) -> list[Job]:
        want = offset + limit
        before_seq = None
        if after is not None:
            seq = await self.client.zscore(self.keys.jobs, after)
            if seq is None:
                raise JobNotFound(f"job {after} (the page cursor) no longer exists; "
                                  "start again from the first page")
            before_seq = int(seq)
        # Few candidates: read and sort them all. Many: walk the seq index until the
        # page is full (matches are then dense enough for that to be short).
        if where.ids or await self._indexed_count(where) <= max(2000, 4 * want):
            ids = await self._select(where, oldest_finished_first=False, before_seq=before_seq)
        else:
            ids = await self._newest(where, want, before_seq)
        return await self._load(ids[offset:want])

    @_translated
    async def count_jobs(self, where: JobFilter) -> int:
        if where.ids or where.tasks or where.error_type is not None or where.args_contains:
            return len(await self._select(where, oldest_finished_first=False))
        return await self._indexed_count(where)

    @_translated
    async def cancel_job(self, job_id: str) -> Job | None:
        row = await self._script(
            "cancel", [self.keys.due], [_num(self.clock()), job_id, self.max_completed])
        return job_from_hash(_pairs(row)) if row else None

    @_translated
    async def redrive_jobs(self, where: JobFilter, limit: int, dry_run: bool) -> list[Job]:
        scoped = redrive_scope(where)
        ids = (await self._select(scoped, oldest_finished_first=True))[:limit]
        if dry_run or not ids:
            return await self._load(ids)
        rows = await self._script("redrive", [self.keys.unique], [_num(self.clock()), *ids])
        return [job_from_hash(_pairs(row)) for row in rows]

    @_translated
    async def delete_jobs(self, where: JobFilter, limit: int, dry_run: bool) -> list[str]:
        finished = [s for s in where.states or TERMINAL_STATES if s in TERMINAL_STATES]
        if not finished:
            return []  # active jobs are never deleted
        scoped = replace(where, states=tuple(sorted(finished)))
        ids = (await self._select(scoped, oldest_finished_first=True))[:limit]
        if dry_run or not ids:
            return ids
        deleted = set(await self._script("delete", [self.keys.unique], ids))
        return [job_id for job_id in ids if job_id in deleted]

    @_translated
    async def queue_stats(self) -> list[QueueStats]:
        now = self.clock()
        client = self.client
        flags = await client.hgetall(self.keys.paused)
        names = sorted(set(await client.smembers(self.keys.queues)) | set(flags))
        states = tuple(JobState)
        async with client.pipeline(transaction=False) as pipe:
            for name in names:
                for state in states:
                    pipe.zcard(self.keys.state(name, state))
            sizes = await pipe.execute()
        out: list[QueueStats] = []
        for i, name in enumerate(names):
            counts = {s: n for s, n in zip(states, sizes[i * len(states):(i + 1) * len(states)],
                                           strict=True) if n}
            if not counts and name not in flags:
                continue
            oldest_age = None
            if counts.get(JobState.AVAILABLE):
                first = await self._oldest_available(name)
                run_at = None if first is None else await client.hget(
                    self.keys.job(id_from_rank(first)), "run_at")
                if run_at is not None:
                    oldest_age = max(0.0, now - float(run_at))
            out.append(QueueStats(queue=name, counts=counts, oldest_available_age=oldest_age,
                                  paused=flags.get(name) == "1"))
        return out

    async def _oldest_available(self, queue: str) -> str | None:
        """The available-index member with the earliest run_at. Within one priority
        (one score) members sort by run_at, so the first member of each priority is
        a candidate: one O(log n) step per distinct priority, not a full scan."""
        key = self.keys.state(queue, JobState.AVAILABLE)
        best: str | None = None
        floor = "-inf"
        while True:
            page = await self.client.zrangebyscore(key, floor, "+inf", start=0, num=1,
                                                   withscores=True)
            if not page:
                return best
            member, score = page[0]
            if best is None or micros_from_rank(member) < micros_from_rank(best):
                best = member
            floor = f"({score!r}"

    @_translated
    async def pause_queue(self, queue: str, paused: bool) -> None:
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.hset(self.keys.paused, queue, "1" if paused else "0")
            if not paused:  # idle workers may have work waiting in it
                pipe.rpush(self.keys.wake(queue), "1")
                pipe.ltrim(self.keys.wake(queue), 0, 0)
            await pipe.execute()

    # --- small shared records ---------------------------------------------------------
    # TTLs follow the injected clock, not Redis EXPIRE (which runs on the server's
    # clock): each namespace is a hash of values plus a zset of expiry times.
    @_translated
    async def put_meta(self, namespace: str, key: str, value: str, ttl: float | None = None) -> None:
        now = self.clock()
        await self._script(
            "put_meta", [self.keys.meta(namespace), self.keys.meta_expiry(namespace)],
            [_num(now), key, value, "" if ttl is None else _num(now + ttl)],
        )

    @_translated
    async def get_meta(self, namespace: str) -> dict[str, str]:
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.hgetall(self.keys.meta(namespace))
            pipe.zrangebyscore(self.keys.meta_expiry(namespace), "-inf", _num(self.clock()))
            values, expired = await pipe.execute()
        return {k: values[k] for k in sorted(values) if k not in set(expired)}

    @_translated
    async def delete_meta(self, namespace: str, key: str) -> None:
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.hdel(self.keys.meta(namespace), key)
            pipe.zrem(self.keys.meta_expiry(namespace), key)
            await pipe.execute()

    @_translated
    async def force_state(self, job_id: str, state: JobState) -> None:
        """Test hook: try a raw state write, to show storage guards transitions."""
        await self._script("force_state", [self.keys.queues], [job_id, state.value])

    # --- tests and operations --------------------------------------------------------
    @_translated
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
