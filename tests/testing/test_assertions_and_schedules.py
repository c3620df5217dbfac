"""assert_enqueued / refute_enqueued / enqueued match arguments partially; the test
clock drives schedules, across a DST change too."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from conveyor import Conveyor
from conveyor.testing import TestClock, assert_enqueued, drain, enqueued, refute_enqueued


def test_arguments_match_by_name_and_partially(conveyor_app: Conveyor) -> None:
    @conveyor_app.task
    def send(user_id: int, template: str, tags: tuple[str, ...] = (), **extra: object) -> None: ...

    send.enqueue(42, "welcome", tags=("new",), locale="es")
    send.enqueue(7, template="reminder")
    job = assert_enqueued(send, 42)
    assert job.args == [42, "welcome"]
    assert_enqueued(send, user_id=42, template="welcome")
    assert_enqueued(send, 42, tags=("new",))  # a tuple matches the list it is stored as
    assert_enqueued(send, locale="es")  # **extra matches key by key
    assert_enqueued(send, template="reminder")
    assert [j.args for j in enqueued(send)] == [[42, "welcome"], [7]]  # oldest first
    refute_enqueued(send, 42, "reminder")
    refute_enqueued(send, locale="fr")
    with pytest.raises(AssertionError) as missing:
        assert_enqueued(send, 99)
    assert str(missing.value).startswith(
        f"no {send.name}(99) job is enqueued; waiting: {send.name}(42, 'welcome', "
        "tags=['new'], locale='es') [available], "
    )
    with pytest.raises(AssertionError, match=r"expected no .*send\(7\) job enqueued, found 1"):
        refute_enqueued(send, 7)
    with pytest.raises(TypeError, match="too many positional arguments"):
        enqueued(send, 1, "a", (), "d")  # arguments the task cannot take: a mistake in the test
    drain(conveyor_app)
    refute_enqueued(send)  # ran: no longer waiting


def hourly_runs(app: Conveyor, clock: TestClock, hours: int) -> list[str]:
    ran: list[str] = []

    @app.periodic(cron="@hourly", tz="Europe/Madrid")
    @app.task
    def report() -> None:
        ran.append(clock.datetime.astimezone(ZoneInfo("Europe/Madrid")).strftime("%H:%M %Z"))

    drain(app)  # the schedule is first seen now: nothing before is owed
    for hour in range(hours):
        assert len(drain(app, advance=timedelta(hours=1)).of(report)) == 1, hour
    return ran


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        # Spring forward: 02:00 CET does not exist, the next local hour is 03:00 CEST.
        (
            datetime(2030, 3, 30, 22, 30, tzinfo=UTC),
            ["00:00 CET", "01:00 CET", "03:00 CEST", "04:00 CEST"],
        ),
        # Fall back: 02:00 comes twice, one real hour apart.
        (
            datetime(2030, 10, 26, 22, 30, tzinfo=UTC),
            ["01:00 CEST", "02:00 CEST", "02:00 CET", "03:00 CET"],
        ),
    ],
    ids=["spring-forward", "fall-back"],
)
def test_an_hourly_schedule_fires_once_per_hour_across_a_dst_change(
    start: datetime, expected: list[str]
) -> None:
    from conveyor.testing import use_memory

    clock = TestClock(start)
    app = Conveyor("memory://", clock=clock)
    with use_memory(app, clock):
        assert hourly_runs(app, clock, 4) == expected
    app.close()


def test_a_clock_moved_by_hand_counts_as_time_without_a_worker(
    conveyor_app: Conveyor, conveyor_clock: TestClock
) -> None:
    """`clock.advance` alone is downtime: the schedule's misfire rule decides (skip:
    the latest missed tick only), as for a worker that was down."""
    ran: list[float] = []

    @conveyor_app.periodic(cron="@hourly")
    @conveyor_app.task
    def tick() -> None:
        ran.append(conveyor_clock.now)

    start = conveyor_clock.now
    assert conveyor_clock.datetime == datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    drain(conveyor_app)  # first seen at 12:00 sharp: that tick fires
    conveyor_clock.advance(hours=3, minutes=10)
    drain(conveyor_app)
    assert ran == [start, start + 3 * 3600 + 600]  # 13:00, 14:00 skipped; 15:00 run at 15:10
