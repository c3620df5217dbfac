"""Operator actions through real `conveyor` subprocesses: short task names and any-case
error types in filters, jobs retry|delete, queue purge, redrive of cancelled jobs, the
audit trail with the OS user, job timelines, and paced redrive (rate, stop by itself,
pause, cancel, Ctrl-C)."""

from __future__ import annotations

import asyncio
import getpass
import signal
import socket
import subprocess

from cli_harness import HERE, Cli, wait_until
from test_admin_commands import make_dead, rows

from conveyor import Conveyor
from conveyor.admin.api import make_filter
from conveyor.backends.claiming import strict_claim
from conveyor.backends.params import Settlement
from conveyor.model.job import AttemptError, JobState

ME = f"{getpass.getuser()}@{socket.gethostname()}"


def kill_directly(url: str, task: str, n: int, error_type: str = "ValueError") -> list[str]:
    """Enqueue n jobs of `task` and dead-letter them with `error_type`, no worker."""

    async def go() -> list[str]:
        app = Conveyor(url)
        backend = await app.backend()
        from conveyor.model.job import NewJob

        ids = [f"{task}-{error_type}-{i}" for i in range(n)]
        await backend.enqueue_jobs(
            [
                NewJob(id=i, task=task, queue="default", payload='{"args":[1,2],"kwargs":{}}')
                for i in ids
            ]
        )
        jobs = await backend.fetch_jobs(strict_claim(["default"], n, "test", 30))
        await backend.settle_jobs(
            [
                Settlement(
                    j.id,
                    j.lease_token,
                    JobState.DEAD,
                    error=AttemptError(j.attempt, app.clock(), error_type, "boom"),
                )
                for j in jobs
            ]
        )
        await app.aclose()
        return ids

    return asyncio.run(go())


def test_filters_take_short_task_names_and_any_case_error_types(cli: Cli, db_url: str) -> None:
    parsed = kill_directly(db_url, "myapp.tasks.parse_amount", 2)
    kill_directly(db_url, "reports.build", 1, "KeyError")
    kill_directly(db_url, "exports.build", 1, "KeyError")
    listed = rows(cli("dead", "list", "--task", "parse_amount").ok().out)
    assert sorted(r[0] for r in listed) == parsed
    assert len(rows(cli("dead", "list", "--error-type", "keyerror").ok().out)) == 2
    assert len(rows(cli("jobs", "list", "-t", "parse_amount", "-e", "VALUEERROR").ok().out)) == 2
    ambiguous = cli("dead", "redrive", "--task", "build")
    assert ambiguous.code == 2
    assert "task name 'build' is ambiguous: exports.build, reports.build" in ambiguous.err
    out = cli("dead", "redrive", "--task", "parse_amount").ok().out
    assert out.startswith("redrove 2 job(s) back to available:")
    assert rows(cli("dead", "list").ok().out)[0][1].endswith(".build")
    # With the app loaded, its registry answers first; the same rule.
    assert cli("dead", "list", "--app", "example_app:app", "--task", "build").code == 2


def test_retry_delete_purge_and_the_audit_trail(cli: Cli, inspector: Conveyor, db_url: str) -> None:
    dead = kill_directly(db_url, "add", 3)
    waiting = [cli.enqueue("greet", f"user{i}") for i in range(4)]
    other = cli.enqueue("add", "1", "2")
    out = cli("jobs", "retry", dead[0], other, "nope")
    assert out.code == 1
    assert out.out.splitlines() == [
        f"job {dead[0]} sent back to its queue",
        f"job {other}: available, not dead or cancelled: not retried",
        "job nope: not found",
    ]
    refused = cli("jobs", "delete")
    assert refused.code == 2 and "refusing to delete every finished job" in refused.err
    assert cli("jobs", "delete", "--state", "available").code == 2
    preview = cli("jobs", "delete", "--state", "dead", "--dry-run").ok().out
    assert preview.splitlines()[0] == "would delete 2 job(s) (dry run, nothing deleted):"
    assert cli("jobs", "delete", dead[1]).ok().out.splitlines() == ["deleted 1 job(s):", dead[1]]

    dry = cli("queue", "purge", "emails", "--dry-run").ok().out
    assert (
        dry.splitlines()[0]
        == "would cancel 4 waiting job(s) of queue emails (dry run, nothing cancelled)"
    )
    assert inspector.jobs.count(make_filter(states=["available"], queues=["emails"])) == 4
    purged = cli("queue", "purge", "emails").ok().out
    assert purged.startswith("cancelled 4 waiting job(s) of queue emails; bring them back with")
    assert inspector.jobs.count(make_filter(states=["cancelled"])) == 4
    assert inspector.jobs.get(other).state is JobState.AVAILABLE  # type: ignore[union-attr]
    back = cli("dead", "redrive", "--state", "cancelled", "--queue", "emails").ok().out
    assert back.startswith("redrove 4 job(s) back to available:")
    cli("queue", "pause", "emails").ok()

    audit = rows(cli("audit").ok().out)
    assert [(r[1], r[2], r[3], r[4]) for r in audit] == [
        (ME, "cli", "pause", "0"),
        (ME, "cli", "redrive", "4"),
        (ME, "cli", "purge", "4"),
        (ME, "cli", "delete", "1"),
        (ME, "cli", "retry", "1"),
    ]
    assert audit[2][5] == ("queue emails; states=scheduled,available,retryable queues=emails")
    shown = cli("jobs", "show", waiting[0]).ok().out.split("\n\n")[1]
    assert [line.split("Z  ", 1)[1] for line in shown.splitlines()[1:]] == [
        "enqueued",
        f"purge by {getpass.getuser()} (cli): queue emails",
        f"redrive by {getpass.getuser()} (cli)",
    ]
    assert rows(cli("audit", "--job", waiting[0]).ok().out)[0][3] == "redrive"
    assert [r[3] for r in rows(cli("audit", "--action", "purge").ok().out)] == ["purge"]


def test_paced_redrive_stops_by_itself_when_the_jobs_die_again(
    cli: Cli, inspector: Conveyor
) -> None:
    make_dead(cli, inspector, *[f"bad{i}" for i in range(40)])
    worker = cli.start_worker("--poll", "0.05")
    out = cli("dead", "redrive", "--rate", "10/s", "--min-sample", "5", "--stop-if-failing", "50%")
    assert out.code == 1, out.err
    summary = out.out.splitlines()
    assert summary[0].startswith("run r") and "redriving 40 job(s) at 10/s" in summary[0]
    last = summary[-1]
    assert " stopped  " in last and "failed again" in last
    failed = int(last.split("redriven jobs failed again")[0].split("(")[-1].split(" of ")[0])
    assert failed >= 5
    assert "stopped by itself" in out.err
    # Every redriven job dies again (the last ones once the worker has run them); the
    # others never left.
    wait_until(
        lambda: inspector.jobs.count(make_filter(states=["dead"])) == 40,
        "the redriven jobs to die again",
    )
    run_id = summary[0].split()[1].rstrip(":")
    status = rows(cli("dead", "redrive", "--status", run_id).ok().out)
    assert status[0][:2] == [run_id, "stopped"]
    redriven = int(status[0][2].split("/")[0])
    assert 5 <= redriven < 40  # it stopped before the end
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_paced_redrive_finishes_and_can_be_paused_and_cancelled(
    cli: Cli, inspector: Conveyor, db_url: str
) -> None:
    kill_directly(db_url, "add", 6)
    worker = cli.start_worker("--poll", "0.05")
    done = cli("dead", "redrive", "--rate", "20/s").ok().out.splitlines()
    assert done[-1].endswith(
        "done  6/6 redriven, 6 ok, 0 failing (0%), 0 waiting  (nothing left to redrive)"
    )
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0

    kill_directly(db_url, "add", 20, "KeyError")
    slow = subprocess.Popen(
        [*cli.command(), "dead", "redrive", "--rate", "2/s"],
        cwd=HERE,
        env=cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert slow.stdout is not None
    run_id = slow.stdout.readline().split()[1].rstrip(":")
    wait_until(
        lambda: inspector.jobs.count(make_filter(states=["available"])) >= 2,
        "the run's first batch",
    )
    assert cli("dead", "redrive", "--pause", run_id).ok().out.startswith(f"run {run_id} paused")
    assert slow.wait(20) == 0
    assert f"run {run_id} paused" in slow.stdout.read()
    moved = inspector.jobs.count(make_filter(states=["available"]))
    assert rows(cli("dead", "redrive", "--status").ok().out)[0][:2] == [run_id, "paused"]

    resumed = subprocess.Popen(
        [*cli.command(), "dead", "redrive", "--resume", run_id],
        cwd=HERE,
        env=cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_until(
        lambda: inspector.jobs.count(make_filter(states=["available"])) > moved,
        "the resumed run's next batch",
    )
    resumed.send_signal(signal.SIGINT)  # no terminal to ask on: left paused
    out, err = resumed.communicate(timeout=20)
    assert resumed.returncode == 130, err
    assert f"run {run_id} left paused; resume with `conveyor dead redrive --resume {run_id}`" in out
    cancelled = cli("dead", "redrive", "--cancel", run_id).ok().out
    assert cancelled.startswith(f"run {run_id} cancelled: cancelled")
    again = cli("dead", "redrive", "--resume", run_id)
    assert again.code == 1 and "is cancelled; start a new one" in again.err
    actions = [r[3] for r in rows(cli("audit", "--limit", "7").ok().out)]
    assert actions == [
        "redrive run cancelled",
        "redrive run paused",
        "redrive run resumed",
        "redrive run paused",
        "redrive run started",
        "redrive run done",
        "redrive run started",
    ]
