"""The Inspector on Redis: listing, counting and selecting jobs, queue statistics, a
job's workflow edges, and the operator's actions on jobs found so (cancel, redrive,
delete).

Redis has no query language, so a filter reads the state indexes it names (keys.py),
fetches the few fields it tests, and sorts in Python. Every change to a job is a Lua
script (one per transition), so an action selects here, then changes in one script.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import replace

from conveyor.backends.codec import job_from_fields, last_error_type
from conveyor.backends.filtering import ascii_lower, job_matches, redrive_scope, waiting_scope
from conveyor.backends.params import BulkAction, JobFilter, JobPage, QueueStats
from conveyor.backends.redis.codec import float_arg, job_from_reply
from conveyor.backends.redis.connection import RedisConnection
from conveyor.backends.redis.errors import translated
from conveyor.backends.redis.keys import id_from_rank, micros_from_rank
from conveyor.backends.redis.rate_limit_lanes import lane_keys, lane_sizes
from conveyor.backends.redis.script_args import bulk_cancel_args, cancel_args
from conveyor.model.errors import JobNotFound
from conveyor.model.escaping import readable_text
from conveyor.model.job import TERMINAL_STATES, Job, JobState

# The fields of a row a filter tests, in this order (5 and 6: see _rows).
_LIST_FIELDS = ("state", "queue", "task", "seq", "finished_at")
_WALK_ABOVE = 2000  # more candidates than this: list by walking the seq index
# Jobs count_by_error.lua reads per call (it decodes a JSON history, a dear read), so
# that each call holds the server a few milliseconds (docs/performance.md).
_ERROR_PAGE = 1000


class RedisInspector:
    def __init__(self, connection: RedisConnection) -> None:
        self.connection = connection
        self.keys = connection.keys

    @translated
    async def list_jobs(self, job_page: JobPage) -> list[Job]:
        where, limit, offset, after = (
            job_page.where,
            job_page.limit,
            job_page.offset,
            job_page.after,
        )
        want = offset + limit
        before_seq = None
        if after is not None:
            seq = await self.connection.client.zscore(self.keys.jobs, after)
            if seq is None:
                raise JobNotFound(
                    f"job {after} (the page cursor) no longer exists; "
                    "start again from the first page"
                )
            before_seq = int(seq)
        # Few candidates: read and sort them all. Many: walk the seq index until the
        # page is full (matches are then dense enough for that to be short).
        if where.ids or await self._indexed_count(where) <= max(_WALK_ABOVE, 4 * want):
            ids = await self.select(where, oldest_finished_first=False, before_seq=before_seq)
        else:
            ids = await self.newest(where, want, before_seq)
        return await self.load(ids[offset:want])

    @translated
    async def count_jobs(self, where: JobFilter) -> int:
        if (
            where.error_type is not None
            and where.states
            and JobState.AVAILABLE not in where.states
            and not (where.ids or where.tasks or where.args_contains)
        ):
            return await self._count_by_error(where, where.error_type)
        if where.ids or where.tasks or where.error_type is not None or where.args_contains:
            return len(await self.select(where, oldest_finished_first=False))
        return await self._indexed_count(where)

    async def _count_by_error(self, where: JobFilter, error_type: str) -> int:
        """Counted on the server by count_by_error.lua, a page at a time: a scrape that
        counts a queue's shed jobs reads no job into Python."""
        queues = list(where.queues) or sorted(
            await self.connection.client.smembers(self.keys.queues)
        )
        total = 0
        for queue in queues:
            for state in where.states:
                replies = await self.connection.scripts.call_in_pages(
                    "count_by_error",
                    self.keys.state(queue, state),
                    _ERROR_PAGE,
                    ascii_lower(error_type),
                )
                total += sum(int(reply[1]) for reply in replies)
        return total

    async def select(
        self, where: JobFilter, oldest_finished_first: bool, before_seq: int | None = None
    ) -> list[str]:
        """Ids matching `where`, in listing order (newest first, or oldest finished first),
        only those enqueued before `before_seq` if given (the keyset cursor)."""
        candidates = await self._candidates(where)
        chosen: list[tuple[float, float, str]] = []
        for job_id, row in zip(candidates, await self._rows(candidates, where), strict=True):
            seq = _number(row[3]) or 0.0
            if before_seq is not None and seq >= before_seq:
                continue
            if _matches(where, job_id, row):
                order = (_number(row[4]) or 0.0) if oldest_finished_first else 0.0
                chosen.append((order, -seq, job_id))
        chosen.sort()
        return [job_id for _, _, job_id in chosen]

    @translated
    async def task_names(self, where: JobFilter) -> list[str]:
        candidates = await self._candidates(where)
        rows = await self._rows(candidates, where)
        return sorted(
            {
                readable_text(row[2])
                for job_id, row in zip(candidates, rows, strict=True)
                if row[2] is not None and _matches(where, job_id, row)
            }
        )

    async def newest(self, where: JobFilter, want: int, before_seq: int | None = None) -> list[str]:
        """The first `want` ids matching `where`, newest first, read from the seq
        index page by page: a listing costs what it shows, not the whole store. With
        `before_seq` the walk starts below the cursor, so a deep page costs the same."""
        found: list[str] = []
        page_size = max(500, 2 * want)
        start = 0
        top = "+inf" if before_seq is None else f"({before_seq}"
        while len(found) < want:
            ids = await self.connection.client.zrevrangebyscore(
                self.keys.jobs, top, "-inf", start=start, num=page_size
            )
            if not ids:
                break
            found += [
                job_id
                for job_id, row in zip(ids, await self._rows(ids, where), strict=True)
                if _matches(where, job_id, row)
            ]
            start += page_size
        return found[:want]

    async def load(self, ids: Iterable[str]) -> list[Job]:
        """The jobs of `ids` that still exist, in that order."""
        ids = list(ids)
        async with self.connection.client.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hgetall(self.keys.job(job_id))
            rows = await pipe.execute()
        return [job_from_fields(row, job_id) for job_id, row in zip(ids, rows, strict=True) if row]

    @translated
    async def queue_stats(self) -> list[QueueStats]:
        client, now = self.connection.client, self.connection.clock()
        flags = await client.hgetall(self.keys.paused)
        shed = await client.hgetall(self.keys.shed)
        names = sorted(set(await client.smembers(self.keys.queues)) | set(flags) | set(shed))
        states = tuple(JobState)
        async with client.pipeline(transaction=False) as pipe:
            for name in names:
                for state in states:
                    pipe.zcard(self.keys.state(name, state))
                pipe.zcard(self.keys.parked(name))
            sizes = await pipe.execute()
        throttled = await lane_sizes(client, self.keys, names)  # available too, in rate limit lanes
        out: list[QueueStats] = []
        width = len(states) + 1
        for i, name in enumerate(names):
            row = sizes[i * width : (i + 1) * width]
            parked = row.pop()
            row[states.index(JobState.AVAILABLE)] += parked  # parked jobs are available
            row[states.index(JobState.AVAILABLE)] += throttled.get(name, 0)
            counts = {s: n for s, n in zip(states, row, strict=True) if n}
            if not counts and name not in flags and not int(shed.get(name, 0)):
                continue
            oldest_age = None
            if counts.get(JobState.AVAILABLE):
                first = await self._oldest_available(name)
                run_at = (
                    None
                    if first is None
                    else await client.hget(self.keys.job(id_from_rank(first)), "run_at")
                )
                first_run_at = _number(run_at)
                if first_run_at is not None:
                    oldest_age = max(0.0, now - first_run_at)
            out.append(
                QueueStats(
                    queue=name,
                    counts=counts,
                    oldest_available_age=oldest_age,
                    paused=flags.get(name) == "1",
                    throttled=throttled.get(name, 0),
                    held_by_key=parked,
                    shed=int(shed.get(name, 0)),
                )
            )
        return out

    async def _rows(self, ids: Sequence[str], where: JobFilter) -> list[list[str | None]]:
        # errors and payload (maybe large) only when a filter reads them: fields 5 and 6
        fields = (
            *_LIST_FIELDS,
            "errors" if where.error_type is not None else "state",
            "payload" if where.args_contains is not None else "state",
        )
        async with self.connection.client.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hmget(self.keys.job(job_id), fields)
            rows: list[list[str | None]] = await pipe.execute()
        return rows

    async def _candidates(self, where: JobFilter) -> list[str]:
        """Every id that may match `where`, from the state indexes it names."""
        if where.ids:
            return list(dict.fromkeys(where.ids))
        queues = list(where.queues) or sorted(
            await self.connection.client.smembers(self.keys.queues)
        )
        states = where.states or tuple(JobState)
        async with self.connection.client.pipeline(transaction=False) as pipe:
            for queue in queues:
                for state in states:
                    pipe.zrange(self.keys.state(queue, state), 0, -1)
                if JobState.AVAILABLE in states:
                    pipe.zrange(self.keys.parked(queue), 0, -1)
            pages = await pipe.execute()
        candidates: list[str] = []
        indexes = [
            (q, s)
            for q in queues
            for s in (*states, *(("parked",) if JobState.AVAILABLE in states else ()))
        ]
        for (_, state), page in zip(indexes, pages, strict=True):
            candidates += [id_from_rank(m) for m in page] if state is JobState.AVAILABLE else page
        if JobState.AVAILABLE in states:  # and the rate limit lanes' available jobs
            async with self.connection.client.pipeline(transaction=False) as pipe:
                for lane in await lane_keys(self.connection.client, self.keys, queues):
                    pipe.zrange(lane, 0, -1)
                candidates += [id_from_rank(m) for page in await pipe.execute() for m in page]
        return candidates

    async def _indexed_count(self, where: JobFilter) -> int:
        queues = list(where.queues) or sorted(
            await self.connection.client.smembers(self.keys.queues)
        )
        async with self.connection.client.pipeline(transaction=False) as pipe:
            for queue in queues:
                for state in where.states or tuple(JobState):
                    pipe.zcard(self.keys.state(queue, state))
                    if state is JobState.AVAILABLE:
                        pipe.zcard(self.keys.parked(queue))
            indexed: int = sum(await pipe.execute())
        if JobState.AVAILABLE in (where.states or tuple(JobState)):
            indexed += sum((await lane_sizes(self.connection.client, self.keys, queues)).values())
        return indexed

    async def _oldest_available(self, queue: str) -> str | None:
        """The available-index member with the earliest run_at. Within one priority
        (one score) members sort by run_at, so the first member of each priority is
        a candidate: one O(log n) step per distinct priority, not a full scan. Keyed
        members (tenant fairness) sort by vtime first, so for a queue of keyed jobs the
        candidate is the job next in line, which may be younger than the oldest."""
        key = self.keys.state(queue, JobState.AVAILABLE)
        best: str | None = None
        floor = "-inf"
        while True:
            page = await self.connection.client.zrangebyscore(
                key, floor, "+inf", start=0, num=1, withscores=True
            )
            if not page:
                return best
            member, score = page[0]
            if best is None or micros_from_rank(member) < micros_from_rank(best):
                best = member
            floor = f"({score!r}"

    # --- the operator's actions: select here, change in one script --------------------
    @translated
    async def cancel_job(self, job_id: str) -> Job | None:
        connection = self.connection
        row = await connection.scripts.call(
            "cancel",
            [self.keys.due],
            cancel_args(connection.clock(), job_id, connection.max_completed),
        )
        return job_from_reply(row) if row else None

    @translated
    async def redrive_jobs(self, bulk_action: BulkAction) -> list[Job]:
        where, limit, dry_run = bulk_action.where, bulk_action.limit, bulk_action.dry_run
        scoped = redrive_scope(where)
        ids = (await self.select(scoped, oldest_finished_first=True))[:limit]
        if dry_run or not ids:
            return await self.load(ids)
        rows = await self.connection.scripts.call(
            "redrive", [self.keys.unique], [float_arg(self.connection.clock()), *ids]
        )
        return [job_from_reply(row) for row in rows]

    @translated
    async def delete_jobs(self, bulk_action: BulkAction) -> list[str]:
        where, limit, dry_run = bulk_action.where, bulk_action.limit, bulk_action.dry_run
        finished = [s for s in where.states or TERMINAL_STATES if s in TERMINAL_STATES]
        if not finished:
            return []  # active jobs are never deleted
        scoped = replace(where, states=tuple(sorted(finished)))
        ids = (await self.select(scoped, oldest_finished_first=True))[:limit]
        if dry_run or not ids:
            return ids
        deleted = set(await self.connection.scripts.call("delete", [self.keys.unique], ids))
        return [job_id for job_id in ids if job_id in deleted]

    @translated
    async def cancel_jobs(self, bulk_action: BulkAction) -> list[str]:
        where, limit, dry_run = bulk_action.where, bulk_action.limit, bulk_action.dry_run
        scoped = waiting_scope(where)
        if scoped is None:
            return []
        ids = (await self.select(scoped, oldest_finished_first=False))[:limit]
        if dry_run or not ids:
            return ids
        connection = self.connection
        cancelled = set(
            await connection.scripts.call(
                "cancel_waiting",
                [self.keys.due],
                bulk_cancel_args(connection.clock(), connection.max_completed, ids),
            )
        )
        return [job_id for job_id in ids if job_id in cancelled]

    # --- a job's workflow edges: the `dependants` and `parents` fields (JSON ids) written
    # by enqueue_dependants.lua
    @translated
    async def dependants_of(self, job_id: str) -> list[str]:
        return await self._ids_in(job_id, "dependants")

    @translated
    async def parents_of(self, job_id: str) -> list[str]:
        return await self._ids_in(job_id, "parents")

    async def _ids_in(self, job_id: str, field: str) -> list[str]:
        raw = await self.connection.client.hget(self.keys.job(job_id), field)
        try:
            ids = json.loads(raw) if raw else []
        except ValueError:  # a damaged list shows as none
            return []
        return [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else []


def _matches(where: JobFilter, job_id: str, row: Sequence[str | None]) -> bool:
    """The shared predicate over a row of `_rows`."""
    return job_matches(
        where,
        job_id=job_id,
        state=row[0],
        queue=row[1],
        task=row[2],
        last_error_type=None if where.error_type is None else last_error_type(row[5]),
        payload=row[6],
    )


def _number(text: str | None) -> float | None:
    """A stored number, or None when absent or not a number (a corrupt field: the job
    is still listed, and the codec marks it)."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None
