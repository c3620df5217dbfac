"""`conveyor worker` as a real process: runs jobs, drains on SIGTERM, cold-stops on a second."""

from __future__ import annotations

import signal
from pathlib import Path

from cli_harness import Cli, wait_until

from conveyor import Conveyor
from conveyor.admin.api import make_filter
from conveyor.model.job import JobState


def count(app: Conveyor, state: JobState, **where: list[str]) -> int:
    # Ignored for mypy: only the list-valued filters are passed
    return app.jobs.count(make_filter(states=[state], **where))  # type: ignore[arg-type]


def test_worker_runs_jobs_then_drains_on_sigterm(cli: Cli, inspector: Conveyor) -> None:
    adds = [cli.enqueue("add", str(n), "10") for n in range(5)]
    greeting = cli.enqueue("greet", "Ada")  # on the "emails" queue
    poison = cli.enqueue("parse_total", "twelve")

    worker = cli.start_worker("-c", "4", "--poll", "0.1")
    wait_until(
        lambda: count(inspector, JobState.COMPLETED) == 6 and count(inspector, JobState.DEAD) == 1,
        "6 completed and 1 dead",
    )
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.log()

    assert [inspector.jobs.get(i).result_value for i in adds] == [10, 11, 12, 13, 14]  # type: ignore[union-attr]
    assert inspector.jobs.get(greeting).result_value == "hello Ada!"  # type: ignore[union-attr]
    dead = inspector.jobs.get(poison)
    assert (dead.state, dead.attempt, dead.errors[-1].type) == (JobState.DEAD, 1, "ValueError")  # type: ignore[union-attr]
    log = worker.log()
    assert "Traceback" not in log
    # Without -q the worker serves every queue its app's tasks use.
    assert "queues=default,emails" in log
    assert "stopped (drained)" in log
    assert "SIGTERM received (draining" in log


def test_queue_option_and_paused_queue(cli: Cli, inspector: Conveyor) -> None:
    cli("queue", "pause", "default").ok()
    add = cli.enqueue("add", "1", "2")
    greeting = cli.enqueue("greet", "Grace", "--kw", "punctuation=?")
    both_queues = cli.start_worker("-q", "default,emails", "--poll", "0.1")
    # Both jobs were waiting before the worker's first claim: had "default" not been
    # paused, the claim that took the greeting would have taken the add too.
    wait_until(lambda: inspector.jobs.get(greeting).state is JobState.COMPLETED, "greeting done")  # type: ignore[union-attr]
    assert inspector.jobs.get(add).state is JobState.AVAILABLE  # type: ignore[union-attr]
    cli("queue", "resume", "default").ok()
    wait_until(lambda: inspector.jobs.get(add).state is JobState.COMPLETED, "add done")  # type: ignore[union-attr]
    both_queues.signal(signal.SIGTERM)
    assert both_queues.wait() == 0, both_queues.log()
    assert inspector.jobs.get(greeting).result_value == "hello Grace?"  # type: ignore[union-attr]

    only_emails = cli.start_worker("-q", "emails", "--poll", "0.1")
    later_add = cli.enqueue("add", "5", "5")
    later_greeting = cli.enqueue("greet", "Alan")
    wait_until(
        lambda: inspector.jobs.get(later_greeting).state is JobState.COMPLETED,  # type: ignore[union-attr]
        "greeting done",
    )
    only_emails.signal(signal.SIGINT)  # Ctrl-C drains like SIGTERM
    assert only_emails.wait() == 0, only_emails.log()
    assert inspector.jobs.get(later_add).state is JobState.AVAILABLE  # type: ignore[union-attr]
    assert "SIGINT received (draining" in only_emails.log()


def test_first_signal_waits_for_the_running_job(
    cli: Cli, inspector: Conveyor, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    job_id = cli.enqueue("wait_for_file", str(release))
    worker = cli.start_worker("--grace", "60", "--poll", "0.1")
    wait_until(lambda: inspector.jobs.get(job_id).state is JobState.RUNNING, "job running")  # type: ignore[union-attr]

    worker.signal(signal.SIGTERM)
    worker.wait_for_log("SIGTERM received (draining")
    assert worker.proc.poll() is None  # draining: the job holds it
    assert inspector.jobs.get(job_id).state is JobState.RUNNING  # type: ignore[union-attr]
    release.touch()
    assert worker.wait() == 0, worker.log()
    job = inspector.jobs.get(job_id)
    assert (job.state, job.result_value, job.attempt) == (JobState.COMPLETED, "released", 1)  # type: ignore[union-attr]


def test_second_signal_is_a_cold_stop_even_with_a_busy_sync_handler(
    cli: Cli, inspector: Conveyor, tmp_path: Path
) -> None:
    never = tmp_path / "never-created"
    job_id = cli.enqueue("wait_for_file", str(never), "--kw", "limit=120")
    worker = cli.start_worker("--grace", "60", "--poll", "0.1")
    wait_until(lambda: inspector.jobs.get(job_id).state is JobState.RUNNING, "job running")  # type: ignore[union-attr]

    worker.signal(signal.SIGTERM)
    worker.wait_for_log("SIGTERM received (draining")
    worker.signal(signal.SIGTERM)
    # The handler's thread is still blocked for up to 120 s; the process must not wait for it.
    assert worker.wait(timeout=20) == 3, worker.log()
    log = worker.log()
    assert "cold stop" in log and "stopped (cold)" in log
    job = inspector.jobs.get(job_id)
    # Returned to its queue without using up the attempt.
    assert (job.state, job.attempt, job.errors) == (JobState.AVAILABLE, 0, ())  # type: ignore[union-attr]


def test_grace_period_running_out_is_a_cold_stop(
    cli: Cli, inspector: Conveyor, tmp_path: Path
) -> None:
    job_id = cli.enqueue("wait_for_file", str(tmp_path / "never-created"), "--kw", "limit=120")
    worker = cli.start_worker("--grace", "0.5", "--poll", "0.1")
    wait_until(lambda: inspector.jobs.get(job_id).state is JobState.RUNNING, "job running")  # type: ignore[union-attr]
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 3, worker.log()
    job = inspector.jobs.get(job_id)
    assert (job.state, job.attempt) == (JobState.AVAILABLE, 0)  # type: ignore[union-attr]


def test_worker_with_an_unreachable_backend_exits_1_in_one_line(cli: Cli) -> None:
    env = {**cli.env, "CONVEYOR_URL": "sqlite:////no/such/folder/jobs.db"}
    result = cli("worker", "example_app:app", env=env)
    assert result.code == 1
    assert "Traceback" not in result.err
    assert result.err.splitlines() == [
        "conveyor: error: cannot open the backend at "
        "sqlite:////no/such/folder/jobs.db: cannot open SQLite database "
        "'/no/such/folder/jobs.db': unable to open database file"
    ]
