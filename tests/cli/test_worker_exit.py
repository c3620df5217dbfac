"""`conveyor worker` as a real process exits once it has stopped, even when a handler
left a non-daemon thread running (which would otherwise hold the interpreter's exit
forever), and says what it left behind."""

from __future__ import annotations

import signal

import pytest
from cli_harness import Cli, wait_until

from conveyor import Conveyor
from conveyor.model.job import JobState


@pytest.mark.parametrize("pool", [[], ["-p", "1"]], ids=["single_process", "pool_child"])
def test_drained_worker_exits_despite_a_thread_its_handler_left_running(
    cli: Cli, inspector: Conveyor, pool: list[str]
) -> None:
    job_id = cli("enqueue", "--app", "thread_app:app", "leave_thread").ok().out.strip()
    worker = cli.start_worker("--poll", "0.1", *pool, app="thread_app:app")
    wait_until(lambda: inspector.jobs.get(job_id).state is JobState.COMPLETED, "job completed")  # type: ignore[union-attr]

    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0, worker.log()  # 0: drained, as documented
    log = worker.log()
    assert "stopped (drained)" in log
    assert "1 thread(s) left running: stray-forever" in log
    assert inspector.jobs.get(job_id).result_value == "started"  # type: ignore[union-attr]
