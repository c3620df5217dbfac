"""The one inspection and admin API, used by the CLI, the dashboard and users.

`app.admin` is async; `app.jobs` is the same API for sync code. Every action that
changes jobs, queues or breakers (retry, redrive, cancel, delete, purge, pause, resume,
open and close a breaker) records
one entry in the audit trail (`conveyor.observe.audit`) here, whichever front end called it:
`by=` says who acts (a name, or an `Actor`); without it, the OS user of the process.
Task names in a filter may be short, as `conveyor enqueue` takes them
(`conveyor.model.names`).
"""

from __future__ import annotations

import builtins
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from conveyor.backends.contract import Backend
from conveyor.backends.filtering import WAITING_STATES
from conveyor.backends.params import (
    BulkAction,
    JobFilter,
    JobPage,
    QueuePause,
    QueueStats,
    Retention,
)
from conveyor.downstreams.breaker_records import close_by_hand, fleet_breakers, open_by_hand
from conveyor.model.job import TERMINAL_STATES, Job, JobState
from conveyor.model.names import match_task_name
from conveyor.model.workers import WORKERS_NAMESPACE, WorkerInfo
from conveyor.observe.audit import Actor, AuditEntry, AuditTrail, PendingAction, as_actor, recording
from conveyor.observe.minute_stats import STATS_NAMESPACE, Minute, merge_records, minute_of
from conveyor.rules.breakers import BreakerState
from conveyor.rules.concurrency import held_back

log = logging.getLogger("conveyor.admin")

if TYPE_CHECKING:
    from conveyor.model.clock import Clock
    from conveyor.model.portal import Portal
    from conveyor.payloads.claim_check import ClaimCheck
    from conveyor.rules.breakers import BreakerRegistry


def make_filter(
    *,
    states: Sequence[JobState | str] = (),
    queues: Sequence[str] = (),
    tasks: Sequence[str] = (),
    error_type: str | None = None,
    ids: Sequence[str] = (),
    args_contains: str | None = None,
) -> JobFilter:
    return JobFilter(
        states=tuple(JobState(s) for s in states),
        queues=tuple(queues),
        tasks=tuple(tasks),
        error_type=error_type,
        ids=tuple(ids),
        args_contains=args_contains or None,
    )


RETRYABLE_BY_OPERATOR = (JobState.DEAD, JobState.CANCELLED)
PURGE_BATCH = 1000
By = Actor | str | None


class AdminApp(Protocol):
    """What the admin API needs of its app (a `Conveyor`): the backend, the clock,
    the registered task names (to resolve short ones), and for the sync face the
    portal and the async API."""

    @property
    def clock(self) -> Clock: ...
    @property
    def tasks(self) -> Mapping[str, object]: ...
    @property
    def portal(self) -> Portal: ...
    @property
    def admin(self) -> Admin: ...
    @property
    def claim_check(self) -> ClaimCheck: ...  # blobs go with the jobs deleted here
    @property
    def breakers(self) -> BreakerRegistry: ...
    async def backend(self) -> Backend: ...


class Admin:
    def __init__(self, app: AdminApp) -> None:
        self.app = app

    # --- audit ------------------------------------------------------------------------
    async def trail(self) -> AuditTrail:
        return AuditTrail(await self.app.backend(), self.app.clock)

    @contextlib.asynccontextmanager
    async def recording(
        self, action: str, *, by: By = None, target: str = "", where: JobFilter | None = None
    ) -> AsyncIterator[PendingAction]:
        """One audit entry for a composite action: the verbs called inside add the jobs
        they touch to it. The dashboard's bulk actions use it.

        >>> async with app.admin.recording("cancel", by="alice", where=flt) as act:
        ...     for job in jobs:
        ...         await app.admin.cancel(job.id)
        """
        async with recording(await self.trail(), action, as_actor(by), target, where) as act:
            yield act

    async def audit(
        self,
        since: float | None = None,
        until: float | None = None,
        limit: int = 100,
        actions: Sequence[str] = (),
    ) -> builtins.list[AuditEntry]:
        """Operator actions from `since` to `until` (epoch seconds; default the last
        seven days), newest first, optionally only these `actions`."""
        return await (await self.trail()).entries(since, until, limit, actions)

    async def actions_on(self, job_id: str) -> builtins.list[AuditEntry]:
        """The operator actions that touched one job, oldest first (its timeline)."""
        return await (await self.trail()).for_job(job_id)

    async def resolve(self, where: JobFilter) -> JobFilter:
        """`where` with short task names replaced by the task they stand for, among
        the app's tasks and the tasks of the jobs `where` otherwise selects.
        Raises AmbiguousTaskName when a short name fits two tasks."""
        if not where.tasks or all(t in self.app.tasks for t in where.tasks):
            return where
        stored = await (await self.app.backend()).task_names(replace(where, tasks=()))
        known = set(self.app.tasks) | set(stored)
        return replace(where, tasks=tuple(match_task_name(t, known) or t for t in where.tasks))

    async def get(self, job_id: str) -> Job | None:
        return await (await self.app.backend()).get_job(job_id)

    async def held_back(self, job: Job) -> str | None:
        """Why a job waits although it is due, every reason that holds, or None: "its
        queue mail is paused", "waiting for a slot of key user:42: 1 of 1 running"
        (conveyor.rules.concurrency), "waiting for a token of rate limit bucket stripe",
        "waiting for its workflow parents: 1 of 3 finished"."""
        backend = await self.app.backend()
        if job.state is JobState.BLOCKED:
            parents = await backend.parents_of(job.id)
            if not parents:
                return "waiting for its workflow parents to finish"
            done = await backend.count_jobs(
                JobFilter(ids=tuple(parents), states=tuple(TERMINAL_STATES))
            )
            return f"waiting for its workflow parents: {done} of {len(parents)} finished"
        if job.state is not JobState.AVAILABLE:
            return None
        reasons = (
            [f"its queue {job.queue} is paused"] if await backend.queue_paused(job.queue) else []
        )
        by_key = None
        if job.concurrency_key is not None:
            running = await backend.count_running_of_key(job.concurrency_key)
            # An adaptive key's limit is the one its controller set (conveyor.rules.adaptive).
            limit = await backend.key_limit(job.concurrency_key)
            by_key = held_back(job, running, limit)
        if by_key is not None:
            reasons.append(by_key)
        elif job.rate_key is not None:  # a parked job waits for its slot before its token
            reasons.append(f"waiting for a token of rate limit bucket {job.rate_key}")
        return "; ".join(reasons) or None

    async def list(
        self,
        where: JobFilter = JobFilter(),
        limit: int = 50,
        offset: int = 0,
        after: str | None = None,
    ) -> builtins.list[Job]:
        """Newest enqueued first. Page with `after=<id of the last job shown>`:
        keyset pagination, as fast on page 10,000 as on page 1.

        >>> page = await app.admin.list(make_filter(states=["dead"]), limit=50)
        >>> more = await app.admin.list(make_filter(states=["dead"]), 50, after=page[-1].id)
        """
        backend = await self.app.backend()
        where = await self.resolve(where)
        if after is None:
            return await backend.list_jobs(JobPage(where=where, limit=limit, offset=offset))
        return await backend.list_jobs(
            JobPage(where=where, limit=limit, offset=offset, after=after)
        )

    async def count(self, where: JobFilter = JobFilter()) -> int:
        return await (await self.app.backend()).count_jobs(await self.resolve(where))

    async def cancel(self, job_id: str, *, by: By = None) -> Job | None:
        """Cancel a waiting job; ask a running one to stop (its handler sees
        `ctx.cancel_requested`). Returns the job as it is now, None if unknown."""
        backend = await self.app.backend()
        async with self.recording("cancel", by=by, target=f"job {job_id}") as act:
            before = await backend.get_job(job_id)
            job = await backend.cancel_job(job_id)
            if (
                before is not None
                and job is not None
                and not before.is_finished
                and (job.state is JobState.CANCELLED or job.cancel_requested)
            ):
                act.add([job_id])
        return job

    async def retry(self, job_ids: Sequence[str], *, by: By = None) -> builtins.list[Job]:
        """Send these dead or cancelled jobs back to their queue with fresh attempts
        (their error history stays); the others are left as they are. Returns the
        jobs moved."""
        ids = list(dict.fromkeys(job_ids))
        if not ids:
            return []
        target = f"job {ids[0]}" if len(ids) == 1 else f"{len(ids)} jobs"
        async with self.recording("retry", by=by, target=target):
            return await self.redrive(
                JobFilter(ids=tuple(ids), states=RETRYABLE_BY_OPERATOR), limit=len(ids), by=by
            )

    async def redrive(
        self,
        where: JobFilter = JobFilter(states=(JobState.DEAD,)),
        limit: int = 100,
        dry_run: bool = False,
        *,
        by: By = None,
    ) -> builtins.list[Job]:
        """Send up to `limit` dead jobs matching `where` back to work, oldest failure
        first, with fresh attempts. With dry_run, only show which would move.
        For a paced redrive of many, see `conveyor.ops.redrive_runs`."""
        backend = await self.app.backend()
        where = await self.resolve(where)
        if dry_run:
            return await backend.redrive_jobs(BulkAction(where=where, limit=limit, dry_run=True))
        async with self.recording("redrive", by=by, where=where) as act:
            jobs = await backend.redrive_jobs(BulkAction(where=where, limit=limit, dry_run=False))
            act.add([j.id for j in jobs])
        return jobs

    async def delete(
        self, where: JobFilter, limit: int = 1000, dry_run: bool = False, *, by: By = None
    ) -> builtins.list[str]:
        """Delete finished jobs matching `where` (active jobs are never deleted)."""
        backend = await self.app.backend()
        where = await self.resolve(where)
        if dry_run:
            return await backend.delete_jobs(BulkAction(where=where, limit=limit, dry_run=True))
        async with self.recording("delete", by=by, where=where) as act:
            ids = await backend.delete_jobs(BulkAction(where=where, limit=limit, dry_run=False))
            act.add(ids)
        await self._delete_blobs(ids)
        return ids

    async def _delete_blobs(self, job_ids: builtins.list[str]) -> None:
        """The blobs of deleted jobs go with them; a store that is down now leaves
        orphans, which the prune loop deletes later."""
        try:
            await self.app.claim_check.delete_with_jobs(job_ids)
        except Exception as exc:
            log.warning(
                "the blobs of %d deleted jobs were not deleted (%s); the prune loop will",
                len(job_ids),
                exc,
            )

    async def purge(
        self, queue: str, where: JobFilter = JobFilter(), dry_run: bool = False, *, by: By = None
    ) -> int:
        """Cancel every waiting job (scheduled, available, retryable) of `queue` that
        matches `where`; running jobs finish. Returns how many were cancelled (with
        dry_run: how many would be). Cancelled, not deleted: they stay listed until
        pruned and `redrive(JobFilter(states=(JobState.CANCELLED,), queues=(queue,)))`
        brings them back."""
        backend = await self.app.backend()
        where = await self.resolve(replace(where, queues=(queue,)))
        scoped = replace(
            where, states=tuple(s for s in (where.states or WAITING_STATES) if s in WAITING_STATES)
        )
        if not scoped.states:
            return 0
        if dry_run:
            return await backend.count_jobs(scoped)
        async with self.recording("purge", by=by, target=f"queue {queue}", where=scoped) as act:
            while True:
                ids = await backend.cancel_jobs(
                    BulkAction(where=scoped, limit=PURGE_BATCH, dry_run=False)
                )
                act.add(ids)
                if len(ids) < PURGE_BATCH:
                    break
        return act.count

    async def stats(self) -> builtins.list[QueueStats]:
        return await (await self.app.backend()).queue_stats()

    async def workers(self) -> builtins.list[WorkerInfo]:
        """Live workers (each announces itself with a short TTL), by host and pid."""
        records = await (await self.app.backend()).list_records(WORKERS_NAMESPACE)
        found = []
        for key, text in records.items():
            try:
                found.append(WorkerInfo.from_json(key, text))
            except (ValueError, TypeError):
                continue  # a record from an incompatible version: not shown
        return sorted(found, key=lambda w: (w.host, w.pid, w.id))

    async def throughput(self, minutes: int = 60) -> builtins.list[Minute]:
        """Jobs finished per minute, by queue, with wait and run latency, for the last
        `minutes` minutes (the current one included), oldest first; minutes without
        any finished job are present and empty."""
        now_minute = minute_of(self.app.clock())
        since = now_minute - 60 * (minutes - 1)
        records = await (await self.app.backend()).list_records(STATS_NAMESPACE)
        merged = merge_records(records.values(), since)
        return [merged.get(start, Minute(start)) for start in range(since, now_minute + 1, 60)]

    async def pause(self, queue: str, *, by: By = None) -> None:
        async with self.recording("pause", by=by, target=f"queue {queue}"):
            await (await self.app.backend()).pause_queue(QueuePause(queue=queue, paused=True))

    async def resume(self, queue: str, *, by: By = None) -> None:
        async with self.recording("resume", by=by, target=f"queue {queue}"):
            await (await self.app.backend()).pause_queue(QueuePause(queue=queue, paused=False))

    async def breakers(self) -> dict[str, BreakerState]:
        """Every circuit breaker the app declares or the store holds, by name."""
        return await fleet_breakers(await self.app.backend(), (b.name for b in self.app.breakers))

    async def set_breaker(self, name: str, *, open: bool, by: By = None) -> BreakerState:
        """Open a breaker by hand (it stays open until closed by hand) or close it
        (docs/downstreams.md). Workers follow within their refresh interval."""
        async with self.recording("open" if open else "close", by=by, target=f"breaker {name}"):
            backend, now = await self.app.backend(), self.app.clock()
            if open:
                return await open_by_hand(backend, name, now, self.app.breakers.get(name))
            return await close_by_hand(backend, name, now)

    async def prune(self, completed_before: float, dead_before: float) -> int:
        """Delete finished jobs past retention, clear results past their result_ttl,
        then delete blobs whose job is gone."""
        backend = await self.app.backend()
        pruned = await backend.prune_jobs(
            Retention(completed_before=completed_before, dead_before=dead_before)
        )
        await self.app.claim_check.expire_results(backend, self.app.clock())
        await self.app.claim_check.sweep_orphans(backend, self.app.clock())
        return pruned

    async def migrate(self) -> builtins.list[int]:
        """Apply pending schema migrations; return the versions applied now (empty
        when the schema was up to date). An app built with `auto_migrate=True`
        (the default) has already migrated on first use, so this returns []."""
        return await (await self.app.backend()).migrate()


class Jobs:
    """Sync face of `Admin`: `app.jobs.get(job_id).state`."""

    def __init__(self, app: AdminApp) -> None:
        self.app = app

    def held_back(self, job: Job) -> str | None:
        return self.app.portal.call(self.app.admin.held_back(job))

    def get(self, job_id: str) -> Job | None:
        return self.app.portal.call(self.app.admin.get(job_id))

    def list(
        self,
        where: JobFilter = JobFilter(),
        limit: int = 50,
        offset: int = 0,
        after: str | None = None,
    ) -> builtins.list[Job]:
        return self.app.portal.call(self.app.admin.list(where, limit, offset, after))

    def count(self, where: JobFilter = JobFilter()) -> int:
        return self.app.portal.call(self.app.admin.count(where))

    def cancel(self, job_id: str, *, by: By = None) -> Job | None:
        return self.app.portal.call(self.app.admin.cancel(job_id, by=by))

    def retry(self, job_ids: Sequence[str], *, by: By = None) -> builtins.list[Job]:
        return self.app.portal.call(self.app.admin.retry(job_ids, by=by))

    def redrive(
        self,
        where: JobFilter = JobFilter(states=(JobState.DEAD,)),
        limit: int = 100,
        dry_run: bool = False,
        *,
        by: By = None,
    ) -> builtins.list[Job]:
        return self.app.portal.call(self.app.admin.redrive(where, limit, dry_run, by=by))

    def delete(
        self, where: JobFilter, limit: int = 1000, dry_run: bool = False, *, by: By = None
    ) -> builtins.list[str]:
        return self.app.portal.call(self.app.admin.delete(where, limit, dry_run, by=by))

    def purge(
        self, queue: str, where: JobFilter = JobFilter(), dry_run: bool = False, *, by: By = None
    ) -> int:
        return self.app.portal.call(self.app.admin.purge(queue, where, dry_run, by=by))

    def audit(
        self,
        since: float | None = None,
        until: float | None = None,
        limit: int = 100,
        actions: Sequence[str] = (),
    ) -> builtins.list[AuditEntry]:
        return self.app.portal.call(self.app.admin.audit(since, until, limit, actions))

    def actions_on(self, job_id: str) -> builtins.list[AuditEntry]:
        return self.app.portal.call(self.app.admin.actions_on(job_id))

    def stats(self) -> builtins.list[QueueStats]:
        return self.app.portal.call(self.app.admin.stats())

    def workers(self) -> builtins.list[WorkerInfo]:
        return self.app.portal.call(self.app.admin.workers())

    def throughput(self, minutes: int = 60) -> builtins.list[Minute]:
        return self.app.portal.call(self.app.admin.throughput(minutes))

    def pause(self, queue: str, *, by: By = None) -> None:
        self.app.portal.call(self.app.admin.pause(queue, by=by))

    def resume(self, queue: str, *, by: By = None) -> None:
        self.app.portal.call(self.app.admin.resume(queue, by=by))

    def migrate(self) -> builtins.list[int]:
        return self.app.portal.call(self.app.admin.migrate())
