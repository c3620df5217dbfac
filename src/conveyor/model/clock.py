"""Durations and clocks. Everything is stored as UTC epoch seconds."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

Duration = timedelta | float | int


def to_seconds(value: Duration) -> float:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"expected a timedelta or a number of seconds, got {value!r}")
    return float(value)


def to_epoch(when: datetime) -> float:
    if when.tzinfo is None:
        raise ValueError(f"naive datetime {when!r}: pass an aware datetime (times are UTC)")
    return when.astimezone(UTC).timestamp()


class Clock(Protocol):
    def __call__(self) -> float: ...


def system_clock() -> float:
    return time.time()


class ManualClock:
    """A clock for tests: time moves only when you say so."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: Duration) -> None:
        self.now += to_seconds(seconds)
