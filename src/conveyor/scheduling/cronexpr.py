"""Cron expressions on naive wall-clock times, behind a small interface.

Only this module imports the cron parser (croniter), and only once an expression
is parsed, so it can be swapped for another one without touching the scheduler
(and a worker whose app has no cron schedule never imports it). Everything here
works on *wall* times (naive datetimes read off a clock in some zone); mapping wall times to
UTC instants, with the DST rules, is `conveyor.scheduling.timing`'s job.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Protocol

from conveyor.model.errors import ConfigurationError

# Aliases mapped here rather than left to the parser, so their meaning is ours and
# documented (docs/scheduling.md), whatever parser sits underneath.
ALIASES: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_ONE_MICROSECOND = timedelta(microseconds=1)


class WallCalendar(Protocol):
    """The matches of a cron expression on a naive wall clock."""

    expression: str

    def first_at_or_after(self, wall: datetime) -> datetime:
        """The earliest matching wall time >= `wall` (whole minutes)."""
        ...

    @property
    def every_hour(self) -> bool:
        """True when the hour field is `*`: the schedule is about elapsed time
        within the day, which decides how it behaves in a repeated DST hour."""
        ...


class CronCalendar:
    """A standard five-field cron expression (minute hour day month weekday)."""

    def __init__(self, expression: str) -> None:
        text = " ".join(expression.split())
        fields = ALIASES.get(text.lower(), text).split(" ")
        if len(fields) != 5:
            known = ", ".join(sorted(ALIASES))
            raise ConfigurationError(
                f"cron expression {expression!r} has {len(fields)} fields; Conveyor takes five "
                f"(minute hour day-of-month month day-of-week) or one of {known}"
            )
        normalized = " ".join(fields)
        # Imported here, by the first cron schedule: an app without one (and every
        # worker start) does not pay for the parser's import.
        from croniter import CroniterError, croniter  # type: ignore[import-untyped]

        try:
            croniter(normalized, datetime(2000, 1, 1))
        except (CroniterError, ValueError, KeyError) as exc:
            raise ConfigurationError(f"invalid cron expression {expression!r}: {exc}") from None
        if not croniter.is_valid(normalized):
            raise ConfigurationError(f"invalid cron expression {expression!r}")
        try:
            # "0 0 30 2 *" parses but never matches: find that out now, not at 3 a.m.
            croniter(normalized, datetime(2000, 1, 1)).get_next(datetime)
        except (CroniterError, ValueError) as exc:
            raise ConfigurationError(
                f"cron expression {expression!r} never matches a date ({exc})"
            ) from None
        self.expression = normalized
        self._every_hour = fields[1] == "*"
        # Parsing dominates the cost of a lookup; parse once and move the cursor.
        self._iterator = croniter(normalized, datetime(2000, 1, 1))
        self._cursor_lock = threading.Lock()  # the cursor is shared state; lookups are rare

    @property
    def every_hour(self) -> bool:
        return self._every_hour

    def first_at_or_after(self, wall: datetime) -> datetime:
        # croniter answers "strictly after"; step back a microsecond to include `wall`.
        with self._cursor_lock:
            self._iterator.set_current(wall - _ONE_MICROSECOND, force=True)
            found: datetime = self._iterator.get_next(datetime)
        return found

    def __repr__(self) -> str:
        return f"CronCalendar({self.expression!r})"
