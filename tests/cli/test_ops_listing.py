"""`conveyor workers` and `conveyor throughput` read what running workers write."""

from __future__ import annotations

import json
import signal

from cli_harness import Cli, wait_until

from conveyor import Conveyor
from conveyor.model.job import JobState


def test_workers_and_throughput_of_a_running_worker(cli: Cli, inspector: Conveyor) -> None:
    assert cli("workers").ok().out == "no live worker\n"
    jobs = [cli.enqueue("add", str(n), "1") for n in range(3)] + [cli.enqueue("parse_total", "x")]
    worker = cli.start_worker("-c", "2", "--poll", "0.1")
    wait_until(lambda: all(inspector.jobs.get(j).is_finished for j in jobs), "4 jobs finished")  # type: ignore[union-attr]
    [record] = [json.loads(line) for line in cli("workers", "--json").ok().out.splitlines()]
    assert record["pid"] == worker.proc.pid and record["concurrency"] == 2
    assert record["queues"] == ["default", "emails"] and record["stopping"] is False
    table = cli("workers").ok().out
    assert f" {worker.proc.pid} " in table and "0/2" in table and "running" in table

    def finished_minutes() -> list[list[str]]:
        lines = cli("throughput", "-m", "2").ok().out.splitlines()[1:]
        rows = [line.split() for line in lines]
        return rows if sum(int(r[1]) for r in rows) == 3 else []

    rows = wait_until(finished_minutes, "the worker's per-minute record (written every 5 s)")
    assert sum(int(r[2]) for r in rows) == 1 and sum(int(r[3]) for r in rows) == 1
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert inspector.jobs.get(jobs[-1]).state is JobState.DEAD  # type: ignore[union-attr]
    assert cli("workers").ok().out == "no live worker\n"  # it removed its record
