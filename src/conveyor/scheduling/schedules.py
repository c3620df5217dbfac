"""Periodic schedules: declarations and what to fire when (no I/O); when a
schedule's ticks fall is `timing.py`'s part.

A schedule produces *ticks*: planned fire instants, whole UTC epoch seconds.
A tick is the identity of a run: the job enqueued for it has the id
`cron:<schedule name>:<tick in ISO-8601 UTC>`, so any number of schedulers that
agree on the ticks enqueue each one once (the backend dedups by job id).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from conveyor.model.errors import ConfigurationError
from conveyor.scheduling.cronexpr import CronCalendar
from conveyor.scheduling.timing import Every, Timing, ZonedCron

Misfire = Literal["catch_up", "skip", "all"]
Overlap = Literal["skip", "allow", "queue_one"]
MISFIRE_POLICIES: tuple[str, ...] = ("catch_up", "skip", "all")
OVERLAP_POLICIES: tuple[str, ...] = ("skip", "allow", "queue_one")

# Past this many due ticks the window is not walked tick by tick (a year-long outage
# of a minutely schedule must not cost 500k steps); see `Schedule.due`.
ENUMERATION_CAP = 1000
MAX_CATCH_UP_LIMIT = 100  # misfire="all" fires at most this many missed ticks
SCHEDULE_META_KEY = "schedule"  # job.meta[...] holds the ScheduledRun of a scheduled job


def iso(tick: int) -> str:
    """UTC ISO-8601 with a Z, the form ticks take in job ids, meta and the CLI."""
    return datetime.fromtimestamp(tick, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class Run:
    """One job the scheduler enqueues: for `tick`, covering ticks first..last."""

    tick: int
    covers_from: int
    covers_to: int
    ticks: int | None  # how many planned ticks it stands for; None: more than ENUMERATION_CAP


@dataclass(frozen=True, slots=True)
class Plan:
    """What a schedule should do now, given the last tick it handled."""

    runs: tuple[Run, ...] = ()
    skipped: int | None = 0  # ticks dropped by the misfire policy; None: very many
    watermark: int | None = None  # the latest tick handled by this plan (fired or skipped)


@dataclass(frozen=True, slots=True)
class ScheduledRun:
    """What a job enqueued by the scheduler knows about its run.

    >>> run = scheduled_run()   # inside the handler
    >>> run.covers_from, run.covers_to   # the missed window, for misfire="catch_up"
    """

    schedule: str
    tick: datetime
    covers_from: datetime
    covers_to: datetime
    ticks: int | None

    def to_meta(self) -> dict[str, Any]:
        return {
            "name": self.schedule,
            "tick": iso(int(self.tick.timestamp())),
            "covers_from": iso(int(self.covers_from.timestamp())),
            "covers_to": iso(int(self.covers_to.timestamp())),
            "ticks": self.ticks,
        }

    @classmethod
    def from_meta(cls, data: dict[str, Any]) -> ScheduledRun:
        def parse(text: str) -> datetime:
            return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)

        ticks = data.get("ticks")
        return cls(
            schedule=str(data["name"]),
            tick=parse(data["tick"]),
            covers_from=parse(data["covers_from"]),
            covers_to=parse(data["covers_to"]),
            ticks=None if ticks is None else int(ticks),
        )

    @classmethod
    def of(cls, schedule: str, run: Run) -> ScheduledRun:
        def at(tick: int) -> datetime:
            return datetime.fromtimestamp(tick, tz=UTC)

        return cls(schedule, at(run.tick), at(run.covers_from), at(run.covers_to), run.ticks)


def scheduled_run() -> ScheduledRun | None:
    """The schedule run of the job this handler runs for; None for a job not
    enqueued by the scheduler. Call it inside a handler."""
    from conveyor.context import current_job

    data = current_job().job.meta.get(SCHEDULE_META_KEY)
    return ScheduledRun.from_meta(data) if isinstance(data, dict) else None


@dataclass(frozen=True)
class Schedule:
    """A declared periodic schedule. Build it with `app.periodic(...)`."""

    name: str
    task: str
    timing: Timing
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None
    priority: int | None = None
    misfire: Misfire = "skip"
    max_catch_up: int = 10
    overlap: Overlap = "skip"
    jitter: int = 0  # seconds; each tick fires at tick + a stable offset in [0, jitter)
    zone: str = "UTC"

    def job_id(self, tick: int) -> str:
        return f"cron:{self.name}:{iso(tick)}"

    def next_tick(self, after: int) -> int:
        return self.timing.next_after(after)

    def jitter_of(self, tick: int) -> int:
        """A stable offset: every replica computes the same one for the same tick."""
        if self.jitter <= 0:
            return 0
        digest = hashlib.sha256(f"{self.name}\x00{tick}".encode()).digest()
        return int.from_bytes(digest[:8], "big") % self.jitter

    def fire_at(self, tick: int) -> int:
        return tick + self.jitter_of(tick)

    def upcoming(self, after: int, count: int) -> list[int]:
        ticks: list[int] = []
        tick = after
        for _ in range(count):
            tick = self.next_tick(tick)
            ticks.append(tick)
        return ticks

    def due(self, after: int, now: float, keep: int) -> tuple[list[int], int | None, int | None]:
        """Ticks after `after` whose fire time has come: (the latest `keep` of them in
        order, the first of them, how many there are or None past ENUMERATION_CAP).

        Ticks are due in order: a tick whose jittered fire time has come waits for an
        earlier one whose time has not, so none is ever passed over.
        """
        ticks, complete = self._walk(after, now, ENUMERATION_CAP)
        if not ticks:
            return [], None, 0
        if complete:
            return ticks[-keep:], ticks[0], len(ticks)
        first = ticks[0]
        # Too many to walk: look back from now over a span that holds `keep` ticks.
        average = max(1, (ticks[-1] - ticks[0]) // max(1, len(ticks) - 1))
        span = average * (keep + 2) + self.jitter
        tail: list[int] = []
        for _ in range(64):  # ticks are not spread evenly (weekdays only...): search, bounded
            start = max(after, int(now) - span)
            tail, complete = self._walk(start, now, ENUMERATION_CAP)
            if complete and (len(tail) >= keep or start == after):
                break
            # MAX_CATCH_UP_LIMIT is far below ENUMERATION_CAP, so doubling from too few
            # cannot overshoot to too many and halving from too many cannot drop below.
            span = span * 2 if complete else span // 2 + 1
        return tail[-keep:], first, None

    def widen(self, run: Run, uncovered_from: int | None) -> Run:
        """`run` with the window that no fired run covered (catch_up) prepended."""
        if uncovered_from is None or uncovered_from >= run.covers_from:
            return run
        # Counted afresh rather than carried in the state: counts do not merge.
        count = 0
        tick = uncovered_from - 1
        while count <= ENUMERATION_CAP and (tick := self.next_tick(tick)) <= run.covers_to:
            count += 1
        return Run(
            run.tick, uncovered_from, run.covers_to, count if count <= ENUMERATION_CAP else None
        )

    def _walk(self, after: int, now: float, cap: int) -> tuple[list[int], bool]:
        ticks: list[int] = []
        tick = after
        while len(ticks) < cap:
            tick = self.next_tick(tick)
            if self.fire_at(tick) > now:
                return ticks, True
            ticks.append(tick)
        return ticks, False

    def plan(self, after: int, now: float) -> Plan:
        """Apply the misfire policy to the ticks due since `after`.

        * skip: fire the latest due tick only; older ones are dropped.
        * catch_up: one run for the latest tick that covers the whole window.
        * all: one run per due tick, the latest `max_catch_up` of them.
        """
        keep = self.max_catch_up if self.misfire == "all" else 1
        latest, first, count = self.due(after, now, keep)
        if not latest or first is None:
            return Plan()
        watermark = latest[-1]
        if self.misfire == "all":
            runs = tuple(Run(t, t, t, 1) for t in latest)
            return Plan(runs, None if count is None else count - len(runs), watermark)
        if self.misfire == "catch_up":
            return Plan((Run(watermark, first, watermark, count),), 0, watermark)
        return Plan(
            (Run(watermark, watermark, watermark, 1),),
            None if count is None else count - 1,
            watermark,
        )


def make_schedule(
    *,
    name: str,
    task: str,
    cron: str | None,
    every: timedelta | float | int | None,
    tz: str | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    queue: str | None,
    priority: int | None,
    misfire: str,
    max_catch_up: int,
    overlap: str,
    jitter: timedelta | float | int | None,
) -> Schedule:
    """Validate a declaration; every mistake is a ConfigurationError here, at import
    time, rather than a surprise at the first fire."""
    where = f"schedule {name!r}"
    timing: Timing
    if (cron is None) == (every is None):
        raise ConfigurationError(f"{where}: pass exactly one of cron= or every=")
    if cron is not None:
        zone_name = tz or "UTC"
        try:
            zone = ZoneInfo(zone_name)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ConfigurationError(
                f"{where}: unknown time zone {zone_name!r} ({exc}); use an IANA name such "
                "as 'Europe/Madrid' or 'UTC'"
            ) from None
        try:
            timing = ZonedCron(CronCalendar(cron), zone)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{where}: {exc}") from None
    else:
        if tz is not None:
            raise ConfigurationError(
                f"{where}: every= is elapsed time in UTC and takes no tz=; use cron= for "
                "wall-clock times in a zone"
            )
        seconds = _seconds(every, f"{where}: every=")
        if seconds < 1 or seconds != int(seconds):
            raise ConfigurationError(
                f"{where}: every= must be a whole number of seconds >= 1, got {seconds}"
            )
        timing = Every(int(seconds))
        zone_name = "UTC"
    if misfire not in MISFIRE_POLICIES:
        raise ConfigurationError(f"{where}: misfire={misfire!r}; choose one of {MISFIRE_POLICIES}")
    if overlap not in OVERLAP_POLICIES:
        raise ConfigurationError(f"{where}: overlap={overlap!r}; choose one of {OVERLAP_POLICIES}")
    if not 1 <= max_catch_up <= MAX_CATCH_UP_LIMIT:
        raise ConfigurationError(
            f"{where}: max_catch_up must be between 1 and {MAX_CATCH_UP_LIMIT}, got {max_catch_up}"
        )
    if misfire == "all" and overlap != "allow":
        raise ConfigurationError(
            f"{where}: misfire='all' enqueues several runs at once, which overlap={overlap!r} "
            "would drop or hold back; pass overlap='allow' (or use misfire='catch_up')"
        )
    jitter_seconds = 0 if jitter is None else _seconds(jitter, f"{where}: jitter=")
    if jitter_seconds < 0:
        raise ConfigurationError(f"{where}: jitter must not be negative")
    if isinstance(timing, Every) and jitter_seconds >= timing.seconds:
        raise ConfigurationError(f"{where}: jitter must be shorter than every=")
    try:
        json.dumps({"args": list(args), "kwargs": kwargs}, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"{where}: args/kwargs must be JSON data ({exc})") from None
    return Schedule(
        name=name,
        task=task,
        timing=timing,
        args=tuple(args),
        kwargs=dict(kwargs),
        queue=queue,
        priority=priority,
        misfire=cast(Misfire, misfire),
        max_catch_up=max_catch_up,
        overlap=cast(Overlap, overlap),
        jitter=int(jitter_seconds),
        zone=zone_name,
    )


def _seconds(value: timedelta | float | int | None, what: str) -> float:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(f"{what} takes a timedelta or a number of seconds, got {value!r}")
    return float(value)
