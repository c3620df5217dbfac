"""Paced redrive: send dead jobs back in small batches at a set rate, watch how the
redriven jobs fare, and stop by itself when too many fail again.

"Redrive after the fix, in controlled batches": `conveyor dead redrive --rate 20/s`
or the dashboard's redrive page start a *run*. A run is a shared record (namespace
`redrive-runs`) holding its filter, pace, threshold, status and counts, so any process
can show it, pause it, resume it or cancel it, and a run survives the process that
drove it:

* The process that starts (or resumes) a run drives it
  (`conveyor.ops.redrive_driver`): a token bucket lets through `rate` jobs a
  second, each batch is one `redrive_jobs`, and once a second it reads the
  states of the jobs it redrove. A redriven job that fails again (a retry
  or dead) counts as failing, one that completes as succeeded; once `min_sample` have
  an outcome and more than `stop_if_failing` of them failed, the run stops itself.
  At most `window` redriven jobs wait for an outcome at once: with no worker taking
  them, the run waits instead of flooding the queue.
* The driver holds a lease on the run (`driver`, `driver_until`), renewed at each
  step. A run whose driver stopped renewing (killed, or a dashboard restarted) is
  adopted by the next dashboard that starts or shows its redrive page, or by
  `conveyor dead redrive --resume RUN`. Workers do not drive runs: operator pacing is
  not a worker's job, and a run must not depend on which app a worker loaded.
* Pause and cancel write the status; the driver sees it at its next step and lets go.
  The jobs a driver was watching are in its memory only: after an adoption, jobs
  redriven before it are no longer counted.

Every start, pause, resume, cancel and end is an audit entry; the jobs a run redrives
are on their timelines under its start entry.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import socket
from dataclasses import asdict, dataclass, fields, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from conveyor.backends.filtering import redrive_scope
from conveyor.backends.params import JobFilter, RecordKey, RecordSwap, RecordWrite
from conveyor.model.job import JobState
from conveyor.observe.audit import Actor, AuditTrail, PendingAction

if TYPE_CHECKING:
    from conveyor.app import Conveyor

RUNS_NAMESPACE = "redrive-runs"
RUN_TTL = 30 * 86400.0  # a run's record is kept this long after its last change
DRIVER_LEASE = 30.0  # seconds a driver's claim lasts without a step
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:/\s*(s|sec|second|m|min|minute|h|hour))?\s*$")
_PER = {
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
}


def parse_rate(text: str) -> float:
    """Jobs per second from `20/s`, `300/min`, `1000/h` or a plain number (per second).

    >>> parse_rate("300/min")
    5.0
    """
    match = _RATE.match(text.lower())
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"rate {text!r}: expected jobs per unit, e.g. 20/s, 300/min, 1000/h")
    return float(match.group(1)) / _PER[match.group(2) or "s"]


def format_rate(per_second: float) -> str:
    if per_second >= 1:
        return f"{per_second:g}/s"
    if per_second * 60 >= 1:
        return f"{per_second * 60:g}/min"
    return f"{per_second * 3600:g}/h"


def parse_share(text: str) -> float:
    """A share from `20%` or `0.2`."""
    value = text.strip()
    try:
        share = float(value[:-1]) / 100 if value.endswith("%") else float(value)
    except ValueError:
        raise ValueError(f"{text!r}: expected a share such as 20% or 0.2") from None
    if not 0 <= share <= 1:
        raise ValueError(f"{text!r}: a share is from 0% to 100%")
    return share


class RunStatus(StrEnum):
    RUNNING = "running"
    PAUSED = "paused"
    CANCELLED = "cancelled"
    STOPPED = "stopped"  # by itself: too many redriven jobs failed again
    DONE = "done"  # nothing left to redrive, every outcome seen

    @property
    def finished(self) -> bool:
        return self in (RunStatus.CANCELLED, RunStatus.STOPPED, RunStatus.DONE)


def filter_to_dict(where: JobFilter) -> dict[str, Any]:
    data = asdict(where)
    data["states"] = [s.value for s in where.states]
    return data


def filter_from_dict(data: dict[str, Any]) -> JobFilter:
    return JobFilter(
        states=tuple(JobState(s) for s in data.get("states", [])),
        queues=tuple(data.get("queues", [])),
        tasks=tuple(data.get("tasks", [])),
        error_type=data.get("error_type"),
        ids=tuple(data.get("ids", [])),
        args_contains=data.get("args_contains"),
    )


@dataclass(frozen=True, slots=True)
class RedriveRun:
    id: str
    where: JobFilter
    rate: float  # jobs per second
    stop_if_failing: float  # share of outcomes, 0..1
    min_sample: int
    window: int  # most redriven jobs waiting for an outcome at once
    limit: int | None  # most jobs to redrive in all (None: every match)
    by: str
    via: str
    created_at: float
    status: RunStatus = RunStatus.RUNNING
    reason: str = ""
    updated_at: float = 0.0
    redriven: int = 0
    succeeded: int = 0
    failed: int = 0
    pending: int = 0
    remaining: int = 0  # jobs still matching at the last step
    driver: str | None = None
    driver_until: float = 0.0
    audit_key: str = ""

    @property
    def total(self) -> int:
        goal = self.redriven + self.remaining
        return goal if self.limit is None else min(goal, self.limit)

    @property
    def failing_share(self) -> float:
        seen = self.succeeded + self.failed
        return self.failed / seen if seen else 0.0

    def to_json(self) -> str:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["where"] = filter_to_dict(self.where)
        data["status"] = self.status.value
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> RedriveRun:
        data: dict[str, Any] = json.loads(text)
        data["where"] = filter_from_dict(data["where"])
        data["status"] = RunStatus(data["status"])
        return cls(**data)

    def describe(self) -> str:
        """One line: `running  42/100 redriven, 40 ok, 1 failing (2%), 1 waiting`."""
        share = f" ({self.failing_share:.0%})" if self.succeeded + self.failed else ""
        text = (
            f"{self.status.value}  {self.redriven:,}/{self.total:,} redriven, "
            f"{self.succeeded:,} ok, {self.failed:,} failing{share}, "
            f"{self.pending:,} waiting"
        )
        return text + (f"  ({self.reason})" if self.reason else "")


def new_driver_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Runs:
    """The run records of one app: create, list, pause, resume, cancel."""

    def __init__(self, app: Conveyor) -> None:
        self.app = app

    async def _records(self) -> Any:
        return await self.app.backend()

    async def get(self, run_id: str) -> RedriveRun | None:
        text = await (await self._records()).get_record(
            RecordKey(namespace=RUNS_NAMESPACE, key=run_id)
        )
        return None if text is None else RedriveRun.from_json(text)

    async def all(self) -> list[RedriveRun]:
        runs = []
        for text in (await (await self._records()).list_records(RUNS_NAMESPACE)).values():
            try:
                runs.append(RedriveRun.from_json(text))
            except (ValueError, KeyError, TypeError):
                continue
        return sorted(runs, key=lambda r: r.created_at, reverse=True)

    async def start(
        self,
        where: JobFilter,
        rate: float,
        *,
        by: Actor | str | None = None,
        stop_if_failing: float = 0.2,
        min_sample: int = 20,
        window: int | None = None,
        limit: int | None = None,
        driver: str | None = None,
    ) -> RedriveRun:
        """Create a run (its driver: `driver`, who then calls `drive`)."""
        from conveyor.observe.audit import as_actor

        if not (rate > 0 and math.isfinite(rate)):
            raise ValueError("rate must be a positive number of jobs per second")
        where = redrive_scope(await self.app.admin.resolve(where))
        actor = as_actor(by)
        now = self.app.clock()
        run = RedriveRun(
            id=f"r{int(now):x}{secrets.token_hex(2)}",
            where=where,
            rate=rate,
            stop_if_failing=stop_if_failing,
            min_sample=max(1, min_sample),
            window=window or max(100, math.ceil(rate * 60)),
            limit=limit,
            by=actor.name,
            via=actor.via,
            created_at=now,
            updated_at=now,
            remaining=await self.app.admin.count(where),
            driver=driver,
            driver_until=now + DRIVER_LEASE if driver else 0.0,
        )
        entry = await self._audit(
            "redrive run started",
            actor,
            run,
            where=where,
            note=f"rate {format_rate(rate)}, stop if more than {stop_if_failing:.0%} fail again",
        )
        run = replace(run, audit_key=entry)
        await (await self._records()).put_record(
            RecordWrite(namespace=RUNS_NAMESPACE, key=run.id, value=run.to_json(), ttl=RUN_TTL)
        )
        return run

    async def pause(self, run_id: str, *, by: Actor | str | None = None) -> RedriveRun:
        return await self._set_status(run_id, RunStatus.PAUSED, by, "paused")

    async def cancel(self, run_id: str, *, by: Actor | str | None = None) -> RedriveRun:
        return await self._set_status(run_id, RunStatus.CANCELLED, by, "cancelled")

    async def resume(
        self, run_id: str, driver: str, *, by: Actor | str | None = None
    ) -> RedriveRun:
        """Resume a paused run, or adopt a running one whose driver is gone; `driver`
        drives it from now on."""
        return await self._set_status(run_id, RunStatus.RUNNING, by, "resumed", driver=driver)

    async def adopt_orphans(self, driver: str) -> list[RedriveRun]:
        """Claim every running run whose driver stopped renewing its lease."""
        adopted = []
        now = self.app.clock()
        backend = await self._records()
        for run in await self.all():
            if run.status is RunStatus.RUNNING and run.driver_until < now:
                claimed = replace(
                    run, driver=driver, driver_until=now + DRIVER_LEASE, updated_at=now
                )
                if await backend.compare_and_set_record(
                    RecordSwap(
                        namespace=RUNS_NAMESPACE,
                        key=run.id,
                        expected=run.to_json(),
                        value=claimed.to_json(),
                        ttl=RUN_TTL,
                    )
                ):
                    adopted.append(claimed)
        return adopted

    async def _set_status(
        self,
        run_id: str,
        status: RunStatus,
        by: Actor | str | None,
        verb: str,
        driver: str | None = None,
    ) -> RedriveRun:
        from conveyor.observe.audit import as_actor

        backend = await self._records()
        for _ in range(20):
            text = await backend.get_record(RecordKey(namespace=RUNS_NAMESPACE, key=run_id))
            if text is None:
                raise LookupError(
                    f"no redrive run {run_id!r} (finished runs are kept {RUN_TTL / 86400:.0f} days)"
                )
            run = RedriveRun.from_json(text)
            if run.status.finished:
                raise ValueError(f"redrive run {run_id} is {run.status.value}; start a new one")
            now = self.app.clock()
            if (
                status is RunStatus.RUNNING
                and run.status is RunStatus.RUNNING
                and (run.driver_until >= now and run.driver != driver)
            ):
                raise ValueError(f"redrive run {run_id} is running, driven by {run.driver}")
            changed = replace(
                run,
                status=status,
                updated_at=now,
                driver=driver,
                driver_until=now + DRIVER_LEASE if driver else 0.0,
                reason="" if status is RunStatus.RUNNING else f"{verb} by {as_actor(by).name}",
            )
            if await backend.compare_and_set_record(
                RecordSwap(
                    namespace=RUNS_NAMESPACE,
                    key=run_id,
                    expected=text,
                    value=changed.to_json(),
                    ttl=RUN_TTL,
                )
            ):
                await self._audit(f"redrive run {verb}", as_actor(by), changed)
                return changed
        raise RuntimeError(f"redrive run {run_id} kept changing; try again")

    async def _audit(
        self,
        action: str,
        actor: Actor,
        run: RedriveRun,
        where: JobFilter | None = None,
        note: str = "",
        count: int = 0,
    ) -> str:
        trail = AuditTrail(await self._records(), self.app.clock)
        pending = PendingAction(action, actor, f"run {run.id}", where, note=note)
        pending.count = count
        return (await trail.record(pending)).key
