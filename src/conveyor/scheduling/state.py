"""Per-schedule state, kept in the backend's meta records (namespace "schedules").

Meta writes replace a whole record and are not compare-and-swap, so replicas
may overwrite each other. Every field is therefore *monotonic* and two states
merge without loss: a replica re-reads the record just before writing and
writes the merge, and never moves the watermark backwards. A lost update costs
at most one extra overlap check; it can never fire a tick twice, because a
tick's job identity (and the backend's dedup) guards that.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from conveyor.scheduling.schedules import Run

SCHEDULES_NAMESPACE = "schedules"
RECENT_JOBS = 4  # fired job ids kept for overlap checks (a race can add one extra)


@dataclass(frozen=True, slots=True)
class LastRun:
    tick: int
    job_id: str
    enqueued_at: float
    covers_from: int
    covers_to: int
    ticks: int | None


@dataclass(frozen=True, slots=True)
class ScheduleState:
    since: int  # when a scheduler first saw this schedule: no tick before it is owed
    last_tick: int  # watermark: the latest tick handled (fired, skipped or buffered)
    last_run: LastRun | None = None
    recent_job_ids: tuple[str, ...] = ()
    pending: Run | None = None  # overlap="queue_one": the run waiting for the current one
    last_skipped: int | None = None
    skipped: int = 0  # ticks dropped by misfire or overlap, as seen by the writers (approximate)
    # misfire="catch_up": ticks that no fired run has covered yet (an overlap skipped
    # them); the next run's window starts here, so windows never leave a hole.
    uncovered_from: int | None = None

    @classmethod
    def fresh(cls, since: int) -> ScheduleState:
        return cls(since=since, last_tick=since)

    # --- transitions (pure) ---------------------------------------------------------
    def fired(self, run: Run, job_id: str, now: float) -> ScheduleState:
        last = LastRun(run.tick, job_id, now, run.covers_from, run.covers_to, run.ticks)
        recent = _recent((*self.recent_job_ids, job_id))
        pending = (
            self.pending if self.pending is not None and self.pending.tick > run.tick else None
        )
        uncovered = self.uncovered_from is not None and self.uncovered_from > run.covers_to
        return replace(
            self,
            last_tick=max(self.last_tick, run.tick),
            last_run=_later(self.last_run, last),
            recent_job_ids=recent,
            pending=pending,
            uncovered_from=self.uncovered_from if uncovered else None,
        )

    def left_uncovered(self, run: Run) -> ScheduleState:
        """A catch_up run was not fired: its window joins the next run's."""
        start = (
            run.covers_from
            if self.uncovered_from is None
            else min(self.uncovered_from, run.covers_from)
        )
        return replace(self, uncovered_from=start)

    def skipped_tick(self, tick: int, count: int = 1) -> ScheduleState:
        return replace(
            self,
            last_tick=max(self.last_tick, tick),
            skipped=self.skipped + count,
            last_skipped=max(tick, self.last_skipped or tick),
        )

    def buffered(self, run: Run) -> ScheduleState:
        # The held run owns its window now: ticks dropped after it start a new one.
        uncovered = self.uncovered_from is not None and self.uncovered_from > run.covers_to
        return replace(
            self,
            last_tick=max(self.last_tick, run.tick),
            pending=run,
            uncovered_from=self.uncovered_from if uncovered else None,
        )

    def advanced(self, watermark: int, dropped: int) -> ScheduleState:
        return replace(
            self, last_tick=max(self.last_tick, watermark), skipped=self.skipped + max(0, dropped)
        )

    def merge(self, other: ScheduleState | None) -> ScheduleState:
        if other is None:
            return self
        last_run = _later(self.last_run, other.last_run)
        fired_up_to = last_run.tick if last_run is not None else None
        # A held run that either side saw fired is gone; of the rest, the first held wins.
        pending = _earlier_pending(
            _unfired(self.pending, fired_up_to), _unfired(other.pending, fired_up_to)
        )

        def still_uncovered(start: int) -> bool:
            # Drop a start that a fired or held run covers *before* taking the
            # earliest, or a stale start would hide a newer one.
            return not (
                (last_run is not None and start <= last_run.covers_to)
                or (pending is not None and pending.covers_from <= start <= pending.covers_to)
            )

        starts = [
            u
            for u in (self.uncovered_from, other.uncovered_from)
            if u is not None and still_uncovered(u)
        ]
        uncovered_from = min(starts) if starts else None
        return ScheduleState(
            since=min(self.since, other.since),
            last_tick=max(self.last_tick, other.last_tick),
            last_run=last_run,
            recent_job_ids=_recent((*other.recent_job_ids, *self.recent_job_ids)),
            pending=pending,
            last_skipped=max(self.last_skipped or 0, other.last_skipped or 0) or None,
            skipped=max(self.skipped, other.skipped),
            uncovered_from=uncovered_from,
        )

    # --- storage --------------------------------------------------------------------
    def to_json(self) -> str:
        data: dict[str, Any] = {
            "since": self.since,
            "last_tick": self.last_tick,
            "recent_job_ids": list(self.recent_job_ids),
            "last_skipped": self.last_skipped,
            "skipped": self.skipped,
            "uncovered_from": self.uncovered_from,
            "last_run": None
            if self.last_run is None
            else {
                "tick": self.last_run.tick,
                "job_id": self.last_run.job_id,
                "enqueued_at": self.last_run.enqueued_at,
                "covers_from": self.last_run.covers_from,
                "covers_to": self.last_run.covers_to,
                "ticks": self.last_run.ticks,
            },
            "pending": None
            if self.pending is None
            else {
                "tick": self.pending.tick,
                "covers_from": self.pending.covers_from,
                "covers_to": self.pending.covers_to,
                "ticks": self.pending.ticks,
            },
        }
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ScheduleState | None:
        """None for a record this version cannot read: the schedule starts afresh
        rather than the scheduler failing on it."""
        try:
            data = json.loads(text)
            last = data.get("last_run")
            pending = data.get("pending")
            return cls(
                since=int(data["since"]),
                last_tick=int(data["last_tick"]),
                last_run=None
                if last is None
                else LastRun(
                    int(last["tick"]),
                    str(last["job_id"]),
                    float(last["enqueued_at"]),
                    int(last["covers_from"]),
                    int(last["covers_to"]),
                    None if last.get("ticks") is None else int(last["ticks"]),
                ),
                recent_job_ids=tuple(str(i) for i in data.get("recent_job_ids", [])),
                pending=None
                if pending is None
                else Run(
                    int(pending["tick"]),
                    int(pending["covers_from"]),
                    int(pending["covers_to"]),
                    None if pending.get("ticks") is None else int(pending["ticks"]),
                ),
                last_skipped=None
                if data.get("last_skipped") is None
                else int(data["last_skipped"]),
                skipped=int(data.get("skipped", 0)),
                uncovered_from=None
                if data.get("uncovered_from") is None
                else int(data["uncovered_from"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def _later(a: LastRun | None, b: LastRun | None) -> LastRun | None:
    if a is None:
        return b
    if b is None:
        return a
    return b if b.tick > a.tick else a


def _unfired(pending: Run | None, fired_up_to: int | None) -> Run | None:
    if pending is None or (fired_up_to is not None and pending.tick <= fired_up_to):
        return None
    return pending


def _earlier_pending(a: Run | None, b: Run | None) -> Run | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a.tick <= b.tick else b


def _recent(ids: tuple[str, ...]) -> tuple[str, ...]:
    # Job ids end in the ISO tick, so string order is tick order.
    return tuple(sorted(set(ids))[-RECENT_JOBS:])
