"""The pure time logic of schedules: cron in zones with real DST transitions,
elapsed-time schedules, jitter, misfire plans, and declaration errors."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from conveyor import Conveyor
from conveyor.model.errors import ConfigurationError
from conveyor.scheduling.schedules import Run, Schedule, iso, make_schedule
from conveyor.scheduling.state import ScheduleState


def schedule(cron: str | None = None, tz: str | None = None, **options: Any) -> Schedule:
    values: dict[str, Any] = dict(
        name="s",
        task="t",
        cron=cron,
        every=None,
        tz=tz,
        args=(),
        kwargs={},
        queue=None,
        priority=None,
        misfire="skip",
        max_catch_up=10,
        overlap="skip",
        jitter=None,
    )
    values.update(options)
    return make_schedule(**values)


def utc(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp())


def fires(s: Schedule, after_utc: str, count: int) -> list[str]:
    return [iso(t) for t in s.upcoming(utc(after_utc), count)]


def local(s: Schedule, ticks: list[str]) -> list[str]:
    zone = ZoneInfo(s.zone)
    return [
        datetime.fromisoformat(t.replace("Z", "+00:00")).astimezone(zone).strftime("%m-%d %H:%M%z")
        for t in ticks
    ]


# --- wall-clock cron in a zone ------------------------------------------------------------
def test_weekday_mornings_in_madrid_fire_at_local_nine_in_both_offsets() -> None:
    s = schedule("0 9 * * MON-FRI", tz="Europe/Madrid")
    assert fires(s, "2026-03-26T00:00:00", 4) == [
        "2026-03-26T08:00:00Z",
        "2026-03-27T08:00:00Z",  # CET, +01:00 (Thu, Fri)
        "2026-03-30T07:00:00Z",
        "2026-03-31T07:00:00Z",  # CEST, +02:00 (Mon, Tue)
    ]


def test_spring_forward_gap_fires_once_at_the_first_instant_after_it() -> None:
    # Europe/Madrid 2026-03-29: 02:00 CET jumps to 03:00 CEST; 02:30 never happens.
    s = schedule("30 2 * * *", tz="Europe/Madrid")
    ticks = fires(s, "2026-03-27T12:00:00", 3)
    assert ticks == ["2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]
    assert local(s, ticks) == ["03-28 02:30+0100", "03-29 03:00+0200", "03-30 02:30+0200"]


def test_several_ticks_in_one_gap_fire_once_together() -> None:
    s = schedule("*/20 2 * * *", tz="Europe/Madrid")  # 02:00, 02:20, 02:40: all in the gap
    ticks = fires(s, "2026-03-28T12:00:00", 2)
    assert local(s, ticks) == ["03-29 03:00+0200", "03-30 02:00+0200"]


def test_fall_back_fires_a_fixed_time_once_at_its_first_occurrence() -> None:
    # Europe/Madrid 2026-10-25: 03:00 CEST goes back to 02:00 CET; 02:30 happens twice.
    s = schedule("30 2 * * *", tz="Europe/Madrid")
    ticks = fires(s, "2026-10-23T12:00:00", 3)
    assert local(s, ticks) == ["10-24 02:30+0200", "10-25 02:30+0200", "10-26 02:30+0100"]
    # A scheduler that starts (or restarts) during the repeated hour does not fire it again.
    assert fires(s, "2026-10-25T01:10:00", 1) == ["2026-10-26T01:30:00Z"]


def test_hour_wildcard_schedules_keep_their_spacing_through_both_transitions() -> None:
    hourly = schedule("@hourly", tz="Europe/Madrid")
    fall = hourly.upcoming(utc("2026-10-24T22:00:00"), 26)
    assert {b - a for a, b in zip(fall, fall[1:], strict=False)} == {
        3600
    }  # 25 hours that day, each fires
    assert local(hourly, [iso(t) for t in fall[1:4]]) == [
        "10-25 02:00+0200",
        "10-25 02:00+0100",
        "10-25 03:00+0100",
    ]
    spring = hourly.upcoming(utc("2026-03-28T22:00:00"), 24)
    assert {b - a for a, b in zip(spring, spring[1:], strict=False)} == {3600}  # 23 hours that day
    quarter = schedule("*/15 * * * *", tz="America/New_York")
    around = quarter.upcoming(utc("2026-11-01T04:50:00"), 12)  # 01:00-02:00 EDT then EST
    assert {b - a for a, b in zip(around, around[1:], strict=False)} == {900}


def test_new_york_transitions() -> None:
    s = schedule("30 2 * * *", tz="America/New_York")  # 2026-03-08: 02:00 EST -> 03:00 EDT
    assert local(s, fires(s, "2026-03-07T12:00:00", 2)) == ["03-08 03:00-0400", "03-09 02:30-0400"]
    s = schedule("30 1 * * *", tz="America/New_York")  # 2026-11-01: 01:xx happens twice
    assert local(s, fires(s, "2026-10-31T12:00:00", 2)) == ["11-01 01:30-0400", "11-02 01:30-0500"]


def test_aliases_and_utc_default() -> None:
    assert fires(schedule("@daily"), "2026-01-01T10:00:00", 1) == ["2026-01-02T00:00:00Z"]
    assert fires(schedule("@weekly"), "2026-01-01T10:00:00", 1) == ["2026-01-04T00:00:00Z"]  # Sun
    assert fires(schedule("@monthly"), "2026-01-01T10:00:00", 1) == ["2026-02-01T00:00:00Z"]
    assert fires(schedule("@yearly"), "2026-01-01T10:00:00", 1) == ["2027-01-01T00:00:00Z"]
    assert fires(schedule("0 0 29 2 *"), "2026-03-01T00:00:00", 1) == ["2028-02-29T00:00:00Z"]


def test_ticks_are_strictly_after_and_whole_seconds() -> None:
    s = schedule("*/5 * * * *")
    assert fires(s, "2026-01-01T10:05:00", 1) == ["2026-01-01T10:10:00Z"]
    assert fires(s, "2026-01-01T10:04:59", 1) == ["2026-01-01T10:05:00Z"]


# --- elapsed time --------------------------------------------------------------------------
def test_every_is_anchored_at_the_epoch_so_replicas_agree() -> None:
    s = schedule(every=timedelta(minutes=5))
    assert fires(s, "2026-01-01T10:02:13", 3) == [
        "2026-01-01T10:05:00Z",
        "2026-01-01T10:10:00Z",
        "2026-01-01T10:15:00Z",
    ]


# --- jitter ----------------------------------------------------------------------------------
def test_jitter_is_stable_per_tick_and_spreads_schedules() -> None:
    a = schedule(every=3600, jitter=600)
    same = schedule(every=3600, jitter=600)
    other = schedule(every=3600, jitter=600, name="other")
    ticks = a.upcoming(0, 50)
    offsets = [a.jitter_of(t) for t in ticks]
    assert offsets == [same.jitter_of(t) for t in ticks]
    assert all(0 <= o < 600 for o in offsets) and len(set(offsets)) > 40
    assert offsets != [other.jitter_of(t) for t in ticks]
    assert schedule(every=3600).fire_at(ticks[0]) == ticks[0]


def test_due_ticks_wait_for_an_earlier_tick_whose_jittered_time_has_not_come() -> None:
    s = schedule(every=60, jitter=59, misfire="all", overlap="allow")
    ticks = s.upcoming(0, 100)
    for now in range(60, 6000, 7):
        latest, _, _ = s.due(0, now, 1000)
        expected = []
        for t in ticks:
            if s.fire_at(t) > now:
                break
            expected.append(t)
        assert latest == expected


# --- misfire plans -------------------------------------------------------------------------
SIX_HOURS_LATER = 6 * 3600


def test_plan_skip_fires_the_latest_tick_only() -> None:
    s = schedule(every=300, misfire="skip")
    plan = s.plan(0, SIX_HOURS_LATER)
    assert plan.runs == (Run(SIX_HOURS_LATER, SIX_HOURS_LATER, SIX_HOURS_LATER, 1),)
    assert (plan.skipped, plan.watermark) == (71, SIX_HOURS_LATER)


def test_plan_catch_up_fires_one_run_covering_the_window() -> None:
    plan = schedule(every=300, misfire="catch_up").plan(0, SIX_HOURS_LATER + 299)
    assert plan.runs == (Run(SIX_HOURS_LATER, 300, SIX_HOURS_LATER, 72),)


def test_plan_all_fires_at_most_max_catch_up() -> None:
    plan = schedule(every=300, misfire="all", max_catch_up=3, overlap="allow").plan(
        0, SIX_HOURS_LATER
    )
    assert [r.tick for r in plan.runs] == [
        SIX_HOURS_LATER - 600,
        SIX_HOURS_LATER - 300,
        SIX_HOURS_LATER,
    ]
    assert plan.skipped == 69


def test_plan_with_nothing_due_is_empty() -> None:
    plan = schedule(every=300).plan(300, 599)
    assert plan.runs == () and plan.watermark is None


def test_a_year_long_outage_of_a_minutely_schedule_is_planned_quickly() -> None:
    year = 365 * 24 * 3600
    for misfire in ("skip", "catch_up"):
        started = time.perf_counter()
        plan = schedule("* * * * *", tz="Europe/Madrid", misfire=misfire).plan(0, year + 30)
        assert time.perf_counter() - started < 2.0
        [run] = plan.runs
        assert run.tick == year and run.covers_to == year
    started = time.perf_counter()
    plan = schedule("* * * * *", misfire="all", max_catch_up=5, overlap="allow").plan(0, year + 30)
    assert time.perf_counter() - started < 2.0
    assert [r.tick for r in plan.runs] == [year - 60 * k for k in (4, 3, 2, 1, 0)]
    assert plan.skipped is None  # too many to count: reported as "very many"


@pytest.mark.parametrize("keep", [1, 7, 100])
def test_long_outage_of_an_uneven_schedule_keeps_the_latest_ticks(keep: int) -> None:
    # Weekday working hours only: tick density varies, so the look-back must search.
    s = schedule(
        "*/5 9-17 * * MON-FRI",
        tz="Europe/Madrid",
        misfire="all",
        max_catch_up=keep,
        overlap="allow",
    )
    now = utc("2027-06-07T07:10:00")  # Monday 09:10 CEST, after two years down
    plan = s.plan(utc("2025-06-01T00:00:00"), now)
    expected = s.upcoming(utc("2027-06-01T00:00:00"), 600)
    expected = [t for t in expected if t <= now][-keep:]
    assert [r.tick for r in plan.runs] == expected
    assert plan.skipped is None


# --- state merge -------------------------------------------------------------------------
def test_state_merge_never_goes_backwards_and_drops_a_fired_pending_run() -> None:
    base = ScheduleState.fresh(since=0)
    pending = base.buffered(Run(120, 120, 120, 1))
    fired = base.fired(Run(120, 120, 120, 1), "cron:s:120", now=130.0)
    for merged in (pending.merge(fired), fired.merge(pending)):
        assert merged.last_tick == 120 and merged.pending is None
        assert merged.last_run is not None and merged.last_run.job_id == "cron:s:120"
    # A replica that still holds the old run must not erase the run held after it fired.
    held_old = base.buffered(Run(120, 120, 120, 1))
    held_new = held_old.fired(Run(120, 120, 120, 1), "cron:s:120", 130.0).buffered(
        Run(180, 180, 180, 1)
    )
    for merged in (held_old.merge(held_new), held_new.merge(held_old)):
        assert merged.pending == Run(180, 180, 180, 1)
    # Same for the start of a catch_up window that no run covered: a stale, since
    # covered start must not hide the newer one.
    covered = base.left_uncovered(Run(60, 60, 60, 1))
    newer = covered.fired(Run(120, 60, 120, 2), "cron:s:120", 130.0).left_uncovered(
        Run(180, 180, 180, 1)
    )
    for merged in (covered.merge(newer), newer.merge(covered)):
        assert merged.uncovered_from == 180
    stale = base.merge(fired.advanced(600, 0))
    assert stale.last_tick == 600
    assert ScheduleState.from_json(fired.to_json()) == fired
    assert ScheduleState.from_json("{not json") is None


# --- declaration errors --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cron": "61 * * * *"}, "invalid cron expression '61 * * * *'"),
        ({"cron": "0 9 * *"}, "has 4 fields"),
        ({"cron": "0 0 30 2 *"}, "never matches"),
        ({"cron": "@fortnightly"}, "has 1 fields"),
        ({"cron": "0 9 * * *", "tz": "Europe/Madird"}, "unknown time zone 'Europe/Madird'"),
        ({}, "exactly one of cron= or every="),
        ({"cron": "@daily", "every": 60}, "exactly one of cron= or every="),
        ({"every": 60, "tz": "Europe/Madrid"}, "takes no tz="),
        ({"every": 0.5}, "whole number of seconds"),
        ({"every": 60, "misfire": "later"}, "misfire='later'"),
        ({"every": 60, "overlap": "sometimes"}, "overlap='sometimes'"),
        ({"every": 60, "misfire": "all"}, "pass overlap='allow'"),
        ({"every": 60, "max_catch_up": 0}, "max_catch_up must be between 1 and 100, got 0"),
        ({"every": 60, "max_catch_up": 101}, "max_catch_up must be between 1 and 100, got 101"),
        ({"every": 60, "jitter": 60}, "jitter must be shorter"),
        ({"every": 60, "args": (object(),)}, "must be JSON data"),
    ],
)
def test_bad_declarations_fail_at_once_with_a_clear_message(
    options: dict[str, Any], message: str
) -> None:
    app = Conveyor("sqlite:///unused.db")  # nothing connects: declarations only

    @app.task(name="t")
    def t(*args: Any) -> None: ...

    with pytest.raises(ConfigurationError, match=None) as raised:
        app.periodic(**options)(t)
    assert message in str(raised.value)
    assert "schedule 't'" in str(raised.value)
    assert app.schedules == {}


def test_two_schedules_with_one_name_fail_and_name_tells_them_apart() -> None:
    app = Conveyor("sqlite:///unused.db")  # nothing connects: declarations only

    @app.periodic(cron="@daily")
    @app.task(name="report")
    def report(kind: str = "daily") -> None: ...

    with pytest.raises(ConfigurationError, match="two schedules are named 'report'; pass name="):
        app.periodic(cron="@weekly", args=("weekly",))(report)
    app.periodic(cron="@weekly", args=("weekly",), name="report-weekly")(report)
    assert sorted(app.schedules) == ["report", "report-weekly"]


def test_arguments_are_checked_against_the_task() -> None:
    app = Conveyor("sqlite:///unused.db")  # nothing connects: declarations only

    @app.task(name="t")
    def t(user_id: int) -> None: ...

    with pytest.raises(ConfigurationError, match="schedule 't'.*missing a required argument"):
        app.periodic(every=60)(t)


def test_periodic_alone_registers_the_function_as_a_task_and_below_task_is_refused() -> None:
    app = Conveyor("sqlite:///unused.db")  # nothing connects: declarations only

    @app.periodic(every=timedelta(minutes=5))
    def sync() -> None: ...

    assert sync.name in app.tasks and app.schedules[sync.name].task == sync.name
    with pytest.raises(ConfigurationError, match="put @app.periodic above @app.task"):

        @app.task
        @app.periodic(every=60, name="x")
        def wrong() -> None: ...


def test_start_up_checks_names_and_tasks_before_anything_connects() -> None:
    from dataclasses import replace

    from conveyor.scheduling.scheduler import Scheduler

    app = Conveyor("sqlite:///unused.db")  # nothing connects: Scheduler() only checks

    @app.periodic(every=60)
    @app.task(name="t")
    def t() -> None: ...

    declared = app.schedules["t"]
    with pytest.raises(ConfigurationError, match="two schedules are named 't'"):
        Scheduler(app, [declared, declared])
    with pytest.raises(ConfigurationError, match="runs task 'gone', which is not registered"):
        Scheduler(app, [replace(declared, task="gone")])
    with pytest.raises(ConfigurationError, match=r"schedule 't'.*unexpected keyword"):
        Scheduler(app, [replace(declared, kwargs={"x": 1})])
    assert Scheduler(app).schedules == [declared]
