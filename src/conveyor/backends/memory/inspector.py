"""The operators' verbs (Inspector) on a memory store: listing, counting, bulk actions,
a workflow's links, stats.

Filters are the one Python predicate the Redis backend uses too
(`conveyor.backends.filtering.job_matches`), over the stored values; the scopes of
the bulk actions are the contract's own (`redrive_scope`, `waiting_scope`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from conveyor.backends.codec import last_error_type
from conveyor.backends.filtering import job_matches, redrive_scope, waiting_scope
from conveyor.backends.folding import queue_stats_from_rows
from conveyor.backends.memory import dependants
from conveyor.backends.memory.registry import StoreAccess
from conveyor.backends.memory.store import MemoryStore
from conveyor.backends.memory.stored_rows import Row, as_number
from conveyor.backends.params import BulkAction, JobFilter, JobPage, QueueStats
from conveyor.model.errors import JobNotFound
from conveyor.model.escaping import readable_text
from conveyor.model.job import TERMINAL_STATES, Job, JobState
from conveyor.model.lifecycle import Transition
from conveyor.rules.dependencies import resume_dependants

S = JobState


class MemoryInspector:
    def __init__(self, access: StoreAccess) -> None:
        self.access = access

    def list_jobs(self, job_page: JobPage) -> list[Job]:
        store = self.access.store
        limit, offset = job_page.limit, job_page.offset
        with store.lock:
            page: list[Job] = []
            for n, job_id in enumerate(_newest_first(store, job_page.where, job_page.after)):
                if n >= offset + limit:
                    break
                if n >= offset:
                    page.append(store.job(job_id))  # type: ignore[arg-type]
            return page

    def count_jobs(self, where: JobFilter) -> int:
        store = self.access.store
        with store.lock:
            return sum(1 for _ in _newest_first(store, where))

    def task_names(self, where: JobFilter) -> list[str]:
        store = self.access.store
        with store.lock:
            return sorted(
                {
                    readable_text(store.rows[i].get("task"))
                    for i in _newest_first(store, where)
                    if store.rows[i].get("task") is not None
                }
            )

    def cancel_job(self, job_id: str) -> Job | None:
        store, now = self.access.store, self.access.clock()
        with store.lock:
            if job_id not in store.rows:
                return None
            state = store.job(job_id).state  # type: ignore[union-attr]
            if state is S.BLOCKED:
                store.move(job_id, state, S.CANCELLED, Transition.CANCEL, finished_at=now)
            if state is S.BLOCKED or _cancel_waiting(store, job_id, now):
                # a workflow member: onwards (docs/workflows.md)
                dependants.release(store, job_id, now)
            elif state is S.RUNNING:
                store.rows[job_id]["cancel_requested"] = True
            job = store.job(job_id)
        if job is not None and job.state is S.CANCELLED:
            store.finished.notify()
        return job

    def cancel_jobs(self, bulk_action: BulkAction) -> list[str]:
        store, now = self.access.store, self.access.clock()
        scoped = waiting_scope(bulk_action.where)
        if scoped is None:
            return []
        with store.lock:
            ids = list(_newest_first(store, scoped))[: bulk_action.limit]
            if bulk_action.dry_run:
                return ids
            cancelled = [job_id for job_id in ids if _cancel_waiting(store, job_id, now)]
            for job_id in cancelled:
                dependants.release(store, job_id, now)  # a workflow member's dependants follow
        if cancelled:
            store.finished.notify()
        return cancelled

    def redrive_jobs(self, bulk_action: BulkAction) -> list[Job]:
        store, now = self.access.store, self.access.clock()
        scoped = redrive_scope(bulk_action.where)
        with store.lock:
            ids = _oldest_finished_first(store, scoped, bulk_action.limit)
            if not bulk_action.dry_run:
                for job_id in ids:
                    old = store.job(job_id).state  # type: ignore[union-attr]
                    store.move(
                        job_id,
                        old,
                        S.AVAILABLE,
                        Transition.REDRIVE,
                        attempt=0,
                        run_at=now,
                        finished_at=None,
                        cancel_requested=False,
                    )
                    if store.rows[job_id].get("dependants"):  # a workflow member: resume it
                        resume_dependants(dependants.MemoryDependants(store, now), job_id)
            jobs = [store.job(job_id) for job_id in ids]
        if ids and not bulk_action.dry_run:
            store.wakeups.notify()
        return [job for job in jobs if job is not None]

    def delete_jobs(self, bulk_action: BulkAction) -> list[str]:
        store, where = self.access.store, bulk_action.where
        finished = [s for s in where.states or TERMINAL_STATES if s in TERMINAL_STATES]
        if not finished:
            return []  # active jobs are never deleted
        with store.lock:
            ids = _oldest_finished_first(
                store, replace(where, states=tuple(sorted(finished))), bulk_action.limit
            )
            if not bulk_action.dry_run:
                for job_id in ids:
                    store.delete(job_id)
            return ids

    def dependants_of(self, job_id: str) -> list[str]:
        store = self.access.store
        with store.lock:
            return list(store.rows.get(job_id, {}).get("dependants") or ())

    def parents_of(self, job_id: str) -> list[str]:
        store = self.access.store
        with store.lock:
            return list(store.rows.get(job_id, {}).get("parents") or ())

    def queue_stats(self) -> list[QueueStats]:
        store, now = self.access.store, self.access.clock()
        with store.lock:
            counts: dict[tuple[Any, Any], int] = {}
            oldest: dict[Any, float] = {}
            for row in store.rows.values():
                where = (row.get("queue"), row.get("state"))
                counts[where] = counts.get(where, 0) + 1
                run_at = as_number(row.get("run_at"))
                if row.get("state") == S.AVAILABLE and run_at is not None:
                    oldest[row.get("queue")] = min(run_at, oldest.get(row.get("queue"), run_at))
            throttled = [
                (q, len(lane)) for (q, key), lane in store.available.items() if key is not None
            ]
            parked = [(queue, 1) for _key, queue in store.slots.parked_jobs()]
            return queue_stats_from_rows(
                now,
                [(q, s, n) for (q, s), n in counts.items()],
                list(oldest.items()),
                list(store.paused.items()),
                throttled,
                parked,
                list(store.shed.items()),
            )


def _text(value: Any) -> str | None:
    """A stored value as the text a filter compares (bytes a raw write left there are
    read as SQLite reads them: undecodable bytes as stand-ins)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "surrogateescape")
    return str(value)


def _matches(where: JobFilter, job_id: str, row: Row) -> bool:
    return job_matches(
        where,
        job_id=job_id,
        state=_text(row.get("state")),
        queue=_text(row.get("queue")),
        task=_text(row.get("task")),
        last_error_type=None if where.error_type is None else last_error_type(row.get("errors")),
        payload=_text(row.get("payload")),
    )


def _newest_first(store: MemoryStore, where: JobFilter, after: str | None = None) -> Iterator[str]:
    ids: Iterator[str] = reversed(list(store.rows))
    if after is not None:
        if after not in store.rows:
            raise JobNotFound(
                f"job {after} (the page cursor) no longer exists; start again from the first page"
            )
        ids = iter(list(ids)[list(reversed(store.rows)).index(after) + 1 :])
    return (job_id for job_id in ids if _matches(where, job_id, store.rows[job_id]))


def _oldest_finished_first(store: MemoryStore, where: JobFilter, limit: int) -> list[str]:
    chosen = [job_id for job_id in _newest_first(store, where)]
    chosen.sort(key=lambda i: as_number(store.rows[i].get("finished_at")) or 0.0)  # stable
    return chosen[:limit]


def _cancel_waiting(store: MemoryStore, job_id: str, now: float) -> bool:
    state = store.job(job_id).state  # type: ignore[union-attr]
    if state not in (S.SCHEDULED, S.AVAILABLE, S.RETRYABLE):
        return False
    store.move(job_id, state, S.CANCELLED, Transition.CANCEL, finished_at=now)
    return True
