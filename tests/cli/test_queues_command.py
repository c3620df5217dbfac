"""`conveyor queues`: per queue, how the live workers claim it (their announced weights),
the limits the loaded app declares, and its waiting, throttled and held-by-key jobs."""

from __future__ import annotations

import json

from cli_harness import Cli, wait_until


def test_queues_shows_the_workers_weights_the_declared_limits_and_what_waits(cli: Cli) -> None:
    assert cli("queues").ok().out == "no queues yet\n"
    for _ in range(3):
        cli("enqueue", "--app", "flow_app:app", "sync", "1").ok()  # one slot: two held
    for order in (1, 2):
        cli("enqueue", "--app", "flow_app:app", "charge", str(order)).ok()  # a bucket each
    for args in (("-q", "critical=6,bulk=1"), ("-q", "critical=6,bulk=1"), ("-q", "bulk,critical")):
        cli.start_worker(*args, "--poll", "0.2", app="flow_app:app")
    wait_until(lambda: len(cli("workers", "--json").ok().out.splitlines()) == 3, "3 workers")

    lines = cli("queues", "--app", "flow_app:app", "--json").ok().out.splitlines()
    assert [json.loads(line) for line in lines] == [
        {
            "queue": "bulk",
            "paused": False,
            "claimed_by": [{"how": "1", "workers": 2}, {"how": "strict #1", "workers": 1}],
            "limits": [
                "rate limit 10/m, burst 10",
                "max_waiting 1,000 (shed_oldest)",
                "aging: a priority level per 60s waited",
            ],
            "waiting": 0,
            "available": 0,
            "throttled": 0,
            "held_by_key": 0,
            "running": 0,
            "shed": 0,
        },
        {
            "queue": "critical",
            "paused": False,
            "claimed_by": [{"how": "6", "workers": 2}, {"how": "strict #2", "workers": 1}],
            "limits": ["max_waiting 50 (block, up to 5s)"],
            "waiting": 0,
            "available": 0,
            "throttled": 0,
            "held_by_key": 0,
            "running": 0,
            "shed": 0,
        },
        {
            "queue": "reports",
            "paused": False,
            "claimed_by": [],
            "limits": [],
            "waiting": 5,
            "available": 5,
            "throttled": 2,
            "held_by_key": 2,
            "running": 0,
            "shed": 0,
        },
    ]
    table = cli("queues", "--app", "flow_app:app").ok().out.splitlines()
    assert table[0].split() == [
        "QUEUE",
        "CLAIMED",
        "BY",
        "PAUSED",
        "WAITING",
        "THROTTLED",
        "HELD",
        "BY",
        "KEY",
        "RUNNING",
        "LIMITS",
    ]
    assert "1 (2 workers), strict #1 (1 worker)" in table[1]
    assert "6 (2 workers), strict #2 (1 worker)" in table[2]
    assert table[3].split()[:9] == ["reports", "no", "live", "worker", "no", "5", "2", "2", "0"]
    # Without the app, the limits are not known here; the workers' weights still are.
    plain = [json.loads(line) for line in cli("queues", "--json").ok().out.splitlines()]
    assert [q["limits"] for q in plain] == [[], [], []]
    assert plain[1]["claimed_by"][0] == {"how": "6", "workers": 2}
