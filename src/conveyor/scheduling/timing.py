"""When a schedule fires: `Every` (elapsed time in UTC) and `ZonedCron` (a cron
expression on a time zone's wall clock), each a `Timing` giving the next tick, in
whole UTC epoch seconds. Pure time logic, no I/O.

Wall-clock rules for `cron=` with `tz=` (see docs/scheduling.md):

* A wall time that does not exist (spring-forward gap) fires once, at the first
  instant after the gap (02:30 in Europe/Madrid on 2026-03-29 fires at 03:00
  CEST). Several ticks in one gap fire once, together.
* A wall time that occurs twice (fall-back) fires once, at its first occurrence,
  unless the hour field is `*`: such schedules (`*/15 * * * *`, `@hourly`) are
  about elapsed time and also fire in the repeated hour, so they keep their
  spacing instead of leaving an hour's hole.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo

from conveyor.model.errors import ConfigurationError
from conveyor.scheduling.cronexpr import WallCalendar

_EPOCH = datetime(1970, 1, 1)
_ONE_SECOND = timedelta(seconds=1)
# Offset changes are found by probing this often, then bisecting. Real zones never
# change offset twice within six hours.
_PROBE = 6 * 3600
_HORIZON = 8 * 24 * 3600  # how far one segment search looks before moving on
_MAX_SEGMENTS = 2000  # ~44 years of 8-day segments: enough for "0 0 29 2 *"


class Timing(Protocol):
    def next_after(self, after: int) -> int:
        """The first tick strictly after `after` (UTC epoch seconds)."""
        ...

    def describe(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Every:
    """Fixed elapsed time in UTC, anchored at the Unix epoch so every replica agrees
    (every 5 minutes fires at :00, :05, ...; every day at 00:00 UTC)."""

    seconds: int

    def next_after(self, after: int) -> int:
        return (after // self.seconds + 1) * self.seconds

    def describe(self) -> str:
        return f"every {timedelta(seconds=self.seconds)}"


class ZonedCron:
    """A cron expression read on the wall clock of a time zone."""

    def __init__(self, calendar: WallCalendar, zone: ZoneInfo) -> None:
        self.calendar = calendar
        self.zone = zone

    def describe(self) -> str:
        return f"cron {self.calendar.expression!r} in {self.zone.key}"

    # --- offsets and transitions ----------------------------------------------------
    def _offset(self, instant: int) -> int:
        offset = datetime.fromtimestamp(instant, tz=self.zone).utcoffset()
        return 0 if offset is None else int(offset.total_seconds())

    def _first_change(self, lo: int, hi: int) -> int:
        """The first instant in (lo, hi] whose offset differs from lo's."""
        base = self._offset(lo)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._offset(mid) == base:
                lo = mid
            else:
                hi = mid
        return hi

    def _next_transition(self, start: int, horizon: int) -> int | None:
        base = self._offset(start)
        probe = start
        while probe < start + horizon:
            nxt = min(probe + _PROBE, start + horizon)
            if self._offset(nxt) != base:
                return self._first_change(probe, nxt)
            probe = nxt
        return None

    def _prev_transition(self, instant: int, lookback: int) -> int | None:
        if self._offset(instant - lookback) == self._offset(instant):
            return None
        return self._first_change(instant - lookback, instant)

    # --- the search -----------------------------------------------------------------
    def next_after(self, after: int) -> int:
        # Walk UTC in segments of constant offset. Inside a segment wall time is
        # UTC + offset, so the first cron match maps straight back; at each
        # transition apply the gap or fold rule.
        start, offset = after, self._offset(after)
        lowest_wall = _wall(after + offset) + _ONE_SECOND
        if not self.calendar.every_hour:
            # Just after a fall-back, the repeated wall times already fired in the first pass.
            prev = self._prev_transition(after, 24 * 3600)
            if prev is not None and self._offset(prev - 1) > offset:
                lowest_wall = max(lowest_wall, _wall(prev + self._offset(prev - 1)))
        for _ in range(_MAX_SEGMENTS):
            transition = self._next_transition(start, _HORIZON)
            end = transition if transition is not None else start + _HORIZON
            match = self.calendar.first_at_or_after(lowest_wall)
            match_epoch = _epoch(match)
            if match_epoch < end + offset:
                return match_epoch - offset
            if transition is None:
                start = end
                lowest_wall = max(lowest_wall, _wall(end + offset))
                continue
            new_offset = self._offset(transition)
            if new_offset > offset:
                # Gap: wall times [end+offset, end+new_offset) never happen. A match
                # in there fires at the first real instant after the gap.
                if match_epoch < transition + new_offset:
                    return transition
                lowest_wall = _wall(transition + new_offset)
            elif self.calendar.every_hour:
                # Fold, elapsed-time schedule: the repeated wall times fire again.
                lowest_wall = _wall(transition + new_offset)
            else:
                # Fold, fixed-time schedule: repeated wall times fired in the first pass.
                lowest_wall = _wall(transition + offset)
            start, offset = transition, new_offset
        raise ConfigurationError(f"{self.describe()}: no fire time within the search horizon")


def _wall(seconds: int) -> datetime:
    return _EPOCH + timedelta(seconds=seconds)


def _epoch(wall: datetime) -> int:
    return int((wall - _EPOCH).total_seconds())
