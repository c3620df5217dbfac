"""Pure pieces of the dashboard: charts, health verdicts, filters, formatting."""

from __future__ import annotations

import math
import re

import pytest

from conveyor.admin.api import WorkerInfo
from conveyor.backends.params import QueueStats
from conveyor.model.escaping import printable
from conveyor.model.job import Job, JobState
from conveyor.observe.minute_stats import Minute, QueueMinute
from conveyor.web.charts import (
    Series,
    count_ticks,
    duration_ticks,
    format_seconds,
    lines,
    stacked_bars,
)
from conveyor.web.params import BadRequest, ListQuery
from conveyor.web.views import build_overview, format_duration, queue_health


def test_count_axis_ticks_are_round_and_few() -> None:
    assert [count_ticks(v)[-1] for v in (0, 0.3, 1, 1.1, 3, 7, 42, 180, 5000)] == [
        1.0,
        1.0,
        1.0,
        2.0,
        3.0,
        8.0,
        50.0,
        200.0,
        5000.0,
    ]
    assert count_ticks(42) == [0, 10, 20, 30, 40, 50]
    assert count_ticks(101) == [0, 50, 100, 150]


@pytest.mark.parametrize(
    ("longest", "labels"),
    [
        # A wait of 8 minutes once read "0, 100s, 3m, 5m, 7m, 8m".
        (500.0, ["0", "2m", "4m", "6m", "8m", "10m"]),
        (480.0, ["0", "2m", "4m", "6m", "8m"]),
        (100.0, ["0", "30s", "60s", "90s", "120s"]),
        (45.0, ["0", "10s", "20s", "30s", "40s", "50s"]),
        (7.0, ["0", "2s", "4s", "6s", "8s"]),
        (0.4, ["0", "100ms", "200ms", "300ms", "400ms"]),
        (0.003, ["0", "1ms", "2ms", "3ms"]),
        (0.0, ["0", "200ms", "400ms", "600ms", "800ms", "1000ms"]),
        (1000.0, ["0", "5m", "10m", "15m", "20m"]),
        (4000.0, ["0", "15m", "30m", "45m", "60m", "75m"]),
        (20000.0, ["0", "2h", "4h", "6h"]),
    ],
)
def test_duration_axis_ticks_are_round_in_one_unit(longest: float, labels: list[str]) -> None:
    ticks = duration_ticks(longest)
    assert ticks[-1] >= longest and len(ticks) <= 6
    assert [format_seconds(t, ticks[1]) for t in ticks] == labels


def test_latency_chart_labels_its_axis_with_those_ticks() -> None:
    svg = lines("wait", [Series("p95", [30.0, 500.0, None], "s-p95")])
    labels = re.findall(r'text-anchor="end">([^<]*)</text>', svg)
    assert labels == ["0", "2m", "4m", "6m", "8m", "10m"]


def test_bars_scale_and_escape() -> None:
    svg = stacked_bars(
        "Jobs <per> minute",
        [Series("ok & done", [1, 0, 3], "s-ok"), Series("failed", [0, 0, 1], "s-bad")],
    )
    assert "<title>Jobs &lt;per&gt; minute</title>" in svg
    assert "ok &amp; done" in svg and "ok & done" not in svg
    assert svg.count("<title>ok &amp; done: ") == 2 and svg.count("<title>failed: 1</title>") == 1
    assert ">4</text>" in svg and ">5</text>" not in svg  # ticks 0..4 for a total of 4
    assert stacked_bars("empty", []) == ""


def test_lines_break_where_nothing_was_measured() -> None:
    svg = lines("latency", [Series("p50", [0.1, None, 0.2, 0.3, None, 0.05], "s-p50")])
    assert svg.count("<polyline") == 1  # 0.2, 0.3
    assert svg.count("<circle") == 2  # 0.1 and 0.05 stand alone
    assert ">300ms</text>" in svg and format_seconds(90) == "90s" and format_seconds(600) == "10m"
    beyond = lines("x", [Series("p95", [math.inf], "s-p95")])  # past the last bucket
    assert "<polyline" not in beyond and "<circle" not in beyond and "inf" not in beyond


def test_queue_health_verdicts() -> None:
    waiting = QueueStats("q", {JobState.AVAILABLE: 3}, oldest_available_age=5.0)
    assert queue_health(waiting, serving=0)[0] == "no workers"
    assert queue_health(waiting, serving=1) == ("ok", "keeping up")
    slow = QueueStats("q", {JobState.AVAILABLE: 3}, oldest_available_age=45.0)
    assert queue_health(slow, 2) == ("slow", "the oldest job has waited 45 s")
    behind = QueueStats("q", {JobState.AVAILABLE: 3}, oldest_available_age=3700.0)
    assert queue_health(behind, 2) == ("behind", "the oldest job has waited 1 h 1 min")
    paused = QueueStats("q", {JobState.AVAILABLE: 3}, paused=True)
    assert queue_health(paused, 0)[0] == "paused"
    assert queue_health(QueueStats("idle"), 0)[0] == "ok"


def test_overview_rates_use_whole_minutes_and_count_serving_workers() -> None:
    def minute(start: int, done: int, failed: int) -> Minute:
        q = QueueMinute()
        q.counts["completed"], q.counts["failed"] = done, failed
        return Minute(start, {"mail": q})

    minutes = [minute(60 * i, 10 * i, i % 2) for i in range(10)]
    worker = WorkerInfo("w", "h", 1, ("mail",), 4, 2, 0.0, 0.0, "v", False)
    draining = WorkerInfo("d", "h", 2, ("mail",), 4, 1, 0.0, 0.0, "v", True)
    o = build_overview([QueueStats("mail", {JobState.DEAD: 2})], [worker, draining], minutes)
    [row] = o.queues
    assert row.done_this_minute == 90 and row.failed_this_minute == 1
    assert row.done_per_minute == (40 + 50 + 60 + 70 + 80) / 5  # minutes 4..8
    assert row.failed_per_minute == 2 / 5
    assert row.workers == 1 and o.workers_up == 1 and o.in_flight == 3 and o.slots == 4
    assert o.totals["dead"] == 2


def test_list_query_round_trip_and_redacted_description() -> None:
    q = ListQuery.from_mapping(
        {"state": "dead", "queue": " mail ", "q": "alice@example.org", "bogus": "x"}
    )
    assert q.params() == {"state": "dead", "queue": "mail", "q": "alice@example.org"}
    where = q.to_filter()
    assert where.states == (JobState.DEAD,) and where.args_contains == "alice@example.org"
    assert q.describe() == "state=dead, queue=mail, args contain=<17 chars>"
    with pytest.raises(
        BadRequest, match="state 'exploded' is not one of: blocked, scheduled, available, "
    ):
        ListQuery.from_mapping({"state": "exploded"})


def test_durations() -> None:
    assert [format_duration(s) for s in (None, 0.0042, 3.25, 42, 125, 7300, 90000)] == [
        "-",
        "4 ms",
        "3.2 s",
        "42 s",
        "2 min 5 s",
        "2 h 1 min",
        "1 d 1 h",
    ]


def test_job_fields_used_by_templates_exist() -> None:
    job = Job(
        id="j",
        task="t",
        queue="q",
        payload='{"args":[1],"kwargs":{"a":"b"}}',
        state=JobState.AVAILABLE,
    )
    from conveyor.web.views import args_preview

    assert args_preview(job) == '1, a="b"'


def test_log_fields_cannot_end_a_line_or_hide_text() -> None:
    assert printable("job-1 é 日本") == "job-1 é 日本"
    assert printable("x\nalice delete job y") == "x\\nalice delete job y"
    assert printable("a\r\x00\x1b[31m\x85\u2028b") == "a\\r\\x00\\x1b[31m\\x85\\u2028b"
    assert printable("admin\u202etxt.exe") == "admin\\u202etxt.exe"  # a bidi override
    # A backslash is escaped too, so an escape in the log always means a character.
    assert printable("a\\nb") == "a\\\\nb"
    assert printable(42) == "42"
