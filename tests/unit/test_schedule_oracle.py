"""The zone-aware tick search agrees with a brute-force oracle that walks UTC
minute by minute and applies the documented DST rules literally, in real zones
(including Lord Howe's 30-minute shift and Kolkata's fixed +05:30)."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor.scheduling.schedules import make_schedule

ZONES = ["Europe/Madrid", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata", "UTC"]
EXPRESSIONS = [
    "30 2 * * *",
    "0 * * * *",
    "*/20 * * * *",
    "15 1,2,3 * * *",
    "0 2 * * *",
    "45 0-4 * * *",
    "*/7 2 * * *",
    "0 3 * * *",
    "59 23 * * *",
]
# Transitions of 2026 in those zones: the walk starts a few hours either side of one.
TRANSITIONS = [
    datetime(2026, 3, 29, 1, tzinfo=UTC),
    datetime(2026, 10, 25, 1, tzinfo=UTC),
    datetime(2026, 3, 8, 7, tzinfo=UTC),
    datetime(2026, 11, 1, 6, tzinfo=UTC),
    datetime(2026, 4, 4, 15, tzinfo=UTC),
    datetime(2026, 10, 3, 15, 30, tzinfo=UTC),
]


def field_values(text: str, low: int, high: int) -> set[int]:
    values: set[int] = set()
    for part in text.split(","):
        if part == "*":
            values.update(range(low, high + 1))
        elif part.startswith("*/"):
            values.update(range(low, high + 1, int(part[2:])))
        elif "-" in part:
            a, b = part.split("-")
            values.update(range(int(a), int(b) + 1))
        else:
            values.add(int(part))
    return values


def matcher(expression: str) -> tuple[set[int], set[int]]:
    minute, hour, *_ = expression.split()
    return field_values(minute, 0, 59), field_values(hour, 0, 23)


def oracle_next(expression: str, zone: ZoneInfo, after: int) -> int:
    """Walk UTC minutes; fire where the wall clock matches, at its first occurrence
    unless the hour field is '*', and at the end of a gap that swallowed a match."""
    minutes, hours = matcher(expression)
    every_hour = expression.split()[1] == "*"

    def offset(u: int) -> int:
        off = datetime.fromtimestamp(u, tz=zone).utcoffset()
        assert off is not None
        return int(off.total_seconds())

    u = (after // 60 + 1) * 60
    previous = offset(u - 60)
    while True:
        current = offset(u)
        if current > previous:  # walls [u + previous, u + current) never happened
            for skipped in range(u + previous, u + current, 60):
                wall = datetime.fromtimestamp(skipped, tz=UTC)
                if wall.minute in minutes and wall.hour in hours:
                    return u
        local = datetime.fromtimestamp(u, tz=zone)
        if local.minute in minutes and local.hour in hours and (every_hour or local.fold == 0):
            return u
        previous = current
        u += 60


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    zone_name=st.sampled_from(ZONES),
    expression=st.sampled_from(EXPRESSIONS),
    around=st.sampled_from(TRANSITIONS),
    shift=st.integers(-4 * 3600, 4 * 3600),
)
def test_next_tick_matches_the_oracle_around_real_transitions(
    zone_name: str, expression: str, around: datetime, shift: int
) -> None:
    schedule = make_schedule(
        name="s",
        task="t",
        cron=expression,
        every=None,
        tz=zone_name,
        args=(),
        kwargs={},
        queue=None,
        priority=None,
        misfire="skip",
        max_catch_up=1,
        overlap="skip",
        jitter=None,
    )
    zone = ZoneInfo(zone_name)
    after = int(around.timestamp()) + shift
    for _ in range(3):  # a few consecutive ticks, so the state after a fire is covered too
        expected = oracle_next(expression, zone, after)
        assert schedule.next_tick(after) == expected, (zone_name, expression, after)
        after = expected
