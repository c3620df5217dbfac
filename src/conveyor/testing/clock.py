"""A clock for tests that moves only when told, forward only."""

from __future__ import annotations

import datetime as dt
from datetime import datetime, timedelta

from conveyor.model.clock import Duration, ManualClock, to_epoch, to_seconds

# A fixed, readable start: tests that print times read the same on every run.
DEFAULT_START = datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)


class TestClock(ManualClock):
    """The time an app under test sees (`Conveyor(..., clock=TestClock())`).

    >>> clock = TestClock(datetime(2030, 3, 31, 0, 30, tzinfo=timezone.utc))
    >>> clock.advance(hours=1)            # or clock.advance(3600), clock.advance(timedelta(...))
    >>> clock.datetime
    datetime.datetime(2030, 3, 31, 1, 30, tzinfo=datetime.timezone.utc)

    Moving the clock runs nothing: `drain(app)` runs what became due, and
    `drain(app, advance=...)` lets time pass with a worker running all along.
    """

    __test__ = False  # a class named Test*: not one for pytest to collect

    def __init__(self, start: datetime | float = DEFAULT_START) -> None:
        super().__init__(to_epoch(start) if isinstance(start, datetime) else float(start))

    @property
    def datetime(self) -> dt.datetime:
        """Now, as an aware UTC datetime."""
        return dt.datetime.fromtimestamp(self.now, tz=dt.UTC)

    def advance(self, seconds: Duration = 0.0, **parts: float) -> None:
        """Move forward by `seconds` (a number or a timedelta) plus `parts`
        (`hours=1, minutes=5`: timedelta's keywords)."""
        seconds = to_seconds(seconds) + timedelta(**parts).total_seconds()
        if seconds < 0:
            raise ValueError(f"a test clock only moves forward (asked to move {seconds:g}s)")
        self.now += seconds

    def move_to(self, when: dt.datetime | float) -> None:
        """Move forward to `when` (an aware datetime or epoch seconds)."""
        target = to_epoch(when) if isinstance(when, dt.datetime) else float(when)
        self.advance(target - self.now)
