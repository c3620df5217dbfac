"""The operator audit trail: who retried, redrove, cancelled, deleted, purged, paused or
resumed what, when, and how many jobs it touched, whether from the CLI, the dashboard
or the API. `conveyor.admin.api` records every entry (front ends never do), so nothing
an operator does is left out because it came another way.

Stored in the backend's shared records, so it works on every backend with no verb or
table of its own, and expires after `RETENTION` by the backend's clock:

* each entry is one record in namespace `audit.<slot>`, the slot being the UTC day
  number modulo `SLOTS`; its key, `<epoch ms, 13 digits>-<counter><random>`, sorts
  by time.
  Listing a day reads that day's slot only. The set of namespaces is fixed (not one
  per day) because a backend sweeps expired records of a namespace when it writes to
  it (Redis does so per namespace): a day's namespace, never written again, would
  keep its expired records for good.
* a job's entries are found through `audit.jobs`: key the job id, value the keys of
  its entries (the last `JOB_REFS`), for its timeline.

Bounded: an action on 10,000 jobs is one entry with its filter and count and the first
`MAX_IDS` ids; the first `INDEXED_JOBS` jobs get the entry on their timeline.
"""

from __future__ import annotations

import contextlib
import getpass
import itertools
import json
import logging
import os
import secrets
import socket
from collections.abc import AsyncIterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from conveyor.backends.contract import SharedRecords
from conveyor.backends.params import JobFilter, RecordKey, RecordSwap, RecordWrite
from conveyor.model.clock import Clock

log = logging.getLogger("conveyor.audit")

RETENTION = 90 * 86400.0
SLOTS = 91  # more slots than days kept: a slot holds one day's live entries
JOBS_NAMESPACE = "audit.jobs"
MAX_IDS = 100
INDEXED_JOBS = 1000
JOB_REFS = 50
DAY = 86400.0


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acts: a dashboard user, the OS user at a terminal, or what API callers say
    with `by=`."""

    name: str
    via: str = "api"
    host: str = ""

    @classmethod
    def local(cls, via: str = "api") -> Actor:
        """The OS user of this process, on this host."""
        try:
            user = getpass.getuser()
        except (KeyError, OSError):  # no passwd entry (some containers)
            user = f"uid:{os.getuid()}" if hasattr(os, "getuid") else "unknown"
        return cls(user, via, socket.gethostname())


def as_actor(by: Actor | str | None) -> Actor:
    if isinstance(by, Actor):
        return by
    if by is None:
        return Actor.local("api")
    if not by.strip():
        raise ValueError("by= names who acts: give a non-empty name")
    return Actor(by, "api", "")


def describe_filter(where: JobFilter) -> dict[str, Any]:
    """The filter as stored in an entry: its non-empty fields; an argument search is
    kept as its length only (it may be an email address or a token)."""
    out: dict[str, Any] = {}
    if where.states:
        out["states"] = [s.value for s in where.states]
    for name in ("queues", "tasks"):
        if getattr(where, name):
            out[name] = list(getattr(where, name))
    if where.error_type is not None:
        out["error_type"] = where.error_type
    if where.ids:
        out["ids"] = len(where.ids)
    if where.args_contains is not None:
        out["args_contains"] = f"<{len(where.args_contains)} chars>"
    return out


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One operator action. `ids` are the first `MAX_IDS` jobs it touched; `count` is
    how many it touched in all."""

    key: str
    at: float
    action: str
    by: str
    via: str
    host: str
    target: str
    filter: dict[str, Any] | None
    ids: tuple[str, ...]
    count: int
    note: str = ""

    def to_json(self) -> str:
        return json.dumps(
            {
                "at": self.at,
                "action": self.action,
                "by": self.by,
                "via": self.via,
                "host": self.host,
                "target": self.target,
                "filter": self.filter,
                "ids": list(self.ids),
                "count": self.count,
                "note": self.note,
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, key: str, text: str) -> AuditEntry:
        data: dict[str, Any] = json.loads(text)
        flt = data.get("filter")
        return cls(
            key=key,
            at=float(data["at"]),
            action=str(data["action"]),
            by=str(data.get("by", "")),
            via=str(data.get("via", "")),
            host=str(data.get("host", "")),
            target=str(data.get("target", "")),
            filter=flt if isinstance(flt, dict) else None,
            ids=tuple(str(i) for i in data.get("ids", [])),
            count=int(data.get("count", 0)),
            note=str(data.get("note", "")),
        )


@dataclass
class PendingAction:
    """An action being taken: the admin verbs it runs add the jobs they touched."""

    action: str
    actor: Actor
    target: str = ""
    where: JobFilter | None = None
    ids: list[str] = field(default_factory=list)  # up to INDEXED_JOBS
    count: int = 0
    note: str = ""
    started_at: float | None = None  # the entry's time: when the action began

    def add(self, ids: Sequence[str]) -> None:
        self.count += len(ids)
        room = INDEXED_JOBS - len(self.ids)
        if room > 0:
            self.ids.extend(ids[:room])


# Orders one process's entries within one millisecond; the random part keeps keys
# of two processes apart.
_sequence = itertools.count()
_open: ContextVar[PendingAction | None] = ContextVar("conveyor_audit_open", default=None)


def slot_namespace(at: float) -> str:
    return f"audit.{int(at // DAY) % SLOTS:02d}"


def key_time(key: str) -> float:
    return int(key.split("-", 1)[0]) / 1000.0


class AuditTrail:
    """Writes and reads entries through a backend's shared records."""

    def __init__(self, records: SharedRecords, clock: Clock) -> None:
        self.records = records
        self.clock = clock

    async def record(self, pending: PendingAction) -> AuditEntry:
        at = self.clock() if pending.started_at is None else pending.started_at
        entry = AuditEntry(
            key=f"{round(at * 1000):013d}-{next(_sequence) % 10**6:06d}{secrets.token_hex(3)}",
            at=at,
            action=pending.action,
            by=pending.actor.name,
            via=pending.actor.via,
            host=pending.actor.host,
            target=pending.target,
            filter=None if pending.where is None else describe_filter(pending.where),
            ids=tuple(pending.ids[:MAX_IDS]),
            count=pending.count,
            note=pending.note,
        )
        await self.records.put_record(
            RecordWrite(
                namespace=slot_namespace(at), key=entry.key, value=entry.to_json(), ttl=RETENTION
            )
        )
        await self.index(pending.ids, entry.key)
        return entry

    async def index(self, job_ids: Sequence[str], key: str) -> None:
        """Put the entry `key` on the timeline of each of these jobs."""
        for job_id in job_ids:
            await self._index(job_id, key)

    async def _index(self, job_id: str, key: str) -> None:
        # Compare-and-set, so two actions on one job at once both stay on its timeline.
        for _ in range(10):
            current = await self.records.get_record(RecordKey(namespace=JOBS_NAMESPACE, key=job_id))
            refs = _refs(current)
            value = json.dumps((refs + [key])[-JOB_REFS:])
            if await self.records.compare_and_set_record(
                RecordSwap(
                    namespace=JOBS_NAMESPACE,
                    key=job_id,
                    expected=current,
                    value=value,
                    ttl=RETENTION,
                )
            ):
                return
        log.warning("audit: job %r kept changing; entry %s not on its timeline", job_id, key)

    async def entries(
        self,
        since: float | None = None,
        until: float | None = None,
        limit: int = 100,
        actions: Sequence[str] = (),
    ) -> list[AuditEntry]:
        """Entries from `since` to `until` (default: the last 7 days), newest first."""
        now = self.clock()
        until = now if until is None else until
        since = max(now - 7 * DAY if since is None else since, now - RETENTION)
        found: list[AuditEntry] = []
        day = int(until // DAY)
        while day >= int(since // DAY) and len(found) < limit:
            records = await self.records.list_records(f"audit.{day % SLOTS:02d}")
            todays = []
            for key, text in records.items():
                entry = _parse(key, text)
                # A slot may hold an entry from SLOTS days before (a longer TTL): skip it.
                if (
                    entry is not None
                    and int(entry.at // DAY) == day
                    and since <= entry.at <= until
                    and (not actions or entry.action in actions)
                ):
                    todays.append(entry)
            found += sorted(todays, key=lambda e: e.key, reverse=True)
            day -= 1
        return found[:limit]

    async def for_job(self, job_id: str) -> list[AuditEntry]:
        """The entries that touched `job_id`, oldest first."""
        found = []
        for key in _refs(
            await self.records.get_record(RecordKey(namespace=JOBS_NAMESPACE, key=job_id))
        ):
            try:
                text = await self.records.get_record(
                    RecordKey(namespace=slot_namespace(key_time(key)), key=key)
                )
            except ValueError:
                continue
            entry = None if text is None else _parse(key, text)
            if entry is not None:
                found.append(entry)
        return sorted(found, key=lambda e: e.key)


@contextlib.asynccontextmanager
async def recording(
    trail: AuditTrail, action: str, actor: Actor, target: str = "", where: JobFilter | None = None
) -> AsyncIterator[PendingAction]:
    """Record one entry for everything done inside; an admin verb called inside adds
    to it instead of recording its own (a bulk retry is one entry, not one per batch).
    What was done is recorded even if the action fails part-way."""
    outer = _open.get()
    if outer is not None:
        yield outer
        return
    pending = PendingAction(action, actor, target, where, started_at=trail.clock())
    token = _open.set(pending)
    try:
        yield pending
    except BaseException:
        _open.reset(token)
        if pending.count:
            with contextlib.suppress(Exception):
                await trail.record(pending)
        raise
    _open.reset(token)
    await trail.record(pending)


def _refs(text: str | None) -> list[str]:
    try:
        refs = json.loads(text) if text else []
    except ValueError:
        return []
    return [str(r) for r in refs] if isinstance(refs, list) else []


def _parse(key: str, text: str) -> AuditEntry | None:
    try:
        return AuditEntry.from_json(key, text)
    except (ValueError, KeyError, TypeError):
        return None  # written by an incompatible version: not shown
