"""enqueue, jobs, stats, dead, queue and migrate through real `conveyor` subprocesses."""

from __future__ import annotations

import re
import signal

from cli_harness import Cli, wait_until

from conveyor import Conveyor
from conveyor.admin.api import make_filter
from conveyor.backends.sqlfiles import load_migrations


def rows(table: str) -> list[list[str]]:
    """Data rows of a printed table, split on runs of spaces (cells hold no double spaces
    in these tests)."""
    lines = [line for line in table.splitlines() if line and not line.startswith("(")]
    return [[cell.strip() for cell in line.split("  ") if cell.strip()] for line in lines[1:]]


def make_dead(cli: Cli, inspector: Conveyor, *totals: str) -> list[str]:
    """Enqueue poison pills and let a worker process kill them."""
    ids = [cli.enqueue("parse_total", total) for total in totals]
    worker = cli.start_worker("--poll", "0.1")
    wait_until(
        lambda: inspector.jobs.count(make_filter(states=["dead"], ids=ids)) == len(ids),
        f"{len(ids)} dead jobs",
    )
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.log()
    return ids


def test_enqueue_arguments_and_options_round_trip(cli: Cli) -> None:
    job_id = cli.enqueue("greet", "Ada", "--kw", "punctuation=?!")
    job = cli.job(job_id)
    assert (job["task"], job["queue"], job["state"], job["attempt"]) == (
        "greet",
        "emails",
        "available",
        0,
    )
    assert (job["args"], job["kwargs"]) == (["Ada"], {"punctuation": "?!"})

    # Each ARG is JSON when it parses as JSON, else a string.
    for raw, value in [
        ("42", 42),
        ('"42"', "42"),
        ("hello", "hello"),
        ("[1, 2]", [1, 2]),
        ("null", None),
        ('{"a": 1}', {"a": 1}),
    ]:
        assert cli.job(cli.enqueue("greet", raw))["args"] == [value], raw

    delayed = cli.job(
        cli.enqueue("add", "1", "2", "--delay", "60", "--priority", "5", "--queue", "slow")
    )
    assert (delayed["state"], delayed["priority"], delayed["queue"]) == ("scheduled", 5, "slow")
    assert 59 <= delayed["run_at"] - delayed["created_at"] <= 61

    first = cli.enqueue("add", "1", "2", "--job-id", "nightly-2026-11-30")
    again = cli.enqueue("add", "3", "4", "--job-id", "nightly-2026-11-30")
    assert first == again == "nightly-2026-11-30"
    assert cli.job(first)["args"] == [1, 2]  # the second enqueue returned the existing job
    # The suffix of a dotted task name is enough when it is unique.
    assert cli.job(cli.enqueue("reports.build", "q4"))["task"] == "reports.build"


def test_jobs_show_prints_every_field_and_the_traceback(cli: Cli, inspector: Conveyor) -> None:
    [job_id] = make_dead(cli, inspector, "twelve")
    out = cli("jobs", "show", job_id).ok().out
    fields = dict(
        line.split(None, 1)
        for line in out.split("\n\n")[0].splitlines()
        if not line.startswith(("run at", "unique key"))
    )
    assert fields["id"] == job_id
    assert fields["task"] == "parse_total"
    assert fields["state"] == "dead"
    assert fields["attempt"] == "1 of 20"
    assert fields["args"] == '["twelve"]'
    timeline = out.split("\n\n")[1].splitlines()
    assert [line.split("Z  ", 1)[1] for line in timeline[1:]] == [
        "enqueued",
        "attempt 1 started",
        "attempt 1 failed, dead: ValueError: could not convert string to float: 'twelve'",
    ]
    errors = out.split("\n\n")[2]
    assert errors.startswith("errors (1)\n  attempt 1 at ")
    assert "    ValueError: could not convert string to float: 'twelve'" in errors
    assert "Traceback (most recent call last):" in errors
    assert 'example_app.py", line' in errors  # the handler's own frame is there


def test_jobs_list_filters_and_limits(cli: Cli) -> None:
    adds = [cli.enqueue("add", str(n), "1") for n in range(3)]
    greeting = cli.enqueue("greet", "Ada")
    listed = rows(cli("jobs", "list", "--task", "add").ok().out)
    assert [r[0] for r in listed] == adds[::-1]  # newest first
    assert {(r[1], r[2], r[3], r[4]) for r in listed} == {("add", "default", "available", "0/20")}

    limited = cli("jobs", "list", "--limit", "2").ok().out
    assert len(rows(limited)) == 2
    assert limited.splitlines()[-1].startswith("(2 of 4 shown;")

    assert [r[0] for r in rows(cli("jobs", "list", "-q", "emails").ok().out)] == [greeting]
    assert cli("jobs", "list", "--state", "dead").ok().out == "no jobs match\n"
    as_json = cli.json("jobs", "list", "--state", "available,scheduled", "-n", "1")
    assert as_json["id"] == greeting  # one JSON object per line; one line here


def test_jobs_cancel(cli: Cli) -> None:
    job_id = cli.enqueue("add", "1", "2")
    assert cli("jobs", "cancel", job_id).ok().out == f"job {job_id} cancelled\n"
    assert cli.job(job_id)["state"] == "cancelled"
    again = cli("jobs", "cancel", job_id).ok().out
    assert again == f"job {job_id} is already cancelled; nothing to cancel\n"


def test_stats_and_queue_pause(cli: Cli) -> None:
    assert cli("stats").ok().out == "no queues yet\n"
    for n in range(2):
        cli.enqueue("add", str(n), "1")
    cli.enqueue("greet", "Ada")
    cli.enqueue("add", "9", "9", "--delay", "3600")
    cli("queue", "pause", "emails").ok()
    table = cli("stats").ok().out
    assert table.splitlines()[0].split() == [
        "QUEUE",
        "PAUSED",
        "AVAILABLE",
        "SCHEDULED",
        "RETRYABLE",
        "THROTTLED",
        "HELD",
        "BY",
        "KEY",
        "IN",
        "FLIGHT",
        "COMPLETED",
        "CANCELLED",
        "DEAD",
        "OLDEST",
        "AVAILABLE",
    ]
    by_queue = {r[0]: r for r in (line.split() for line in table.splitlines()[1:])}
    assert by_queue["default"][1:11] == ["no", "2", "1", "0", "0", "0", "0", "0", "0", "0"]
    assert by_queue["emails"][1:11] == ["yes", "1", "0", "0", "0", "0", "0", "0", "0", "0"]
    assert by_queue["default"][11].endswith(("ms", "s"))  # an age, not "-"
    cli("queue", "resume", "emails").ok()
    assert "emails   no" in cli("stats").ok().out


def test_dead_letters_show_the_app_version_of_the_worker_that_failed(
    cli: Cli, inspector: Conveyor
) -> None:
    cli.env["CONVEYOR_APP_VERSION"] = "1.4.2"  # the worker's deploy
    [dead_id] = make_dead(cli, inspector, "twelve")
    [listed] = rows(cli("dead", "list").ok().out)
    assert listed[0] == dead_id and listed[-2:] == ["1.4.2", listed[-1]]
    assert listed[-1].startswith("ValueError:")
    shown = cli("jobs", "show", dead_id).ok().out
    assert re.search(r"attempt 1 at .* worker .* app 1\.4\.2, conveyor \S+\n", shown), shown
    assert cli.job(dead_id)["errors"][0]["app_version"] == "1.4.2"


def test_dead_list_redrive_dry_run_then_redrive(cli: Cli, inspector: Conveyor) -> None:
    dead_ids = make_dead(cli, inspector, "twelve", "eleven")
    cli.enqueue("add", "1", "1")

    listed = rows(cli("dead", "list").ok().out)
    assert sorted(r[0] for r in listed) == sorted(dead_ids)
    assert all(r[1] == "parse_total" and r[-1].startswith("ValueError:") for r in listed)
    assert cli("dead", "list", "--error-type", "ConnectionError").ok().out == "no dead jobs match\n"

    dry = cli("dead", "redrive", "--dry-run").ok().out
    assert dry.splitlines()[0] == "would redrive 2 job(s) (dry run, nothing moved):"
    assert sorted(r[0] for r in rows(dry.split("\n", 1)[1])) == sorted(dead_ids)
    assert [cli.job(i)["state"] for i in dead_ids] == ["dead", "dead"]

    one = cli("dead", "redrive", "--batch", "1").ok().out.splitlines()
    assert one[0] == "redrove 1 job(s) back to available:"
    assert one[-1] == "(1 more match; run again or raise --batch to redrive them)"
    [[moved, task, queue, state]] = rows("\n".join(one[1:-1]))
    assert (task, queue, state) == ("parse_total", "default", "available")
    [left] = set(dead_ids) - {moved}
    redriven = cli.job(moved)
    assert (redriven["state"], redriven["attempt"]) == ("available", 0)
    assert cli.job(left)["state"] == "dead"

    by_id = cli("dead", "redrive", left).ok().out
    assert left in by_id and cli.job(left)["state"] == "available"
    assert cli("dead", "redrive").ok().out == "no dead jobs match; nothing to redrive\n"


def test_dead_purge(cli: Cli, inspector: Conveyor) -> None:
    dead_ids = make_dead(cli, inspector, "twelve", "eleven")
    done = cli.enqueue("add", "1", "1")

    dry = cli("dead", "purge", "--all", "--dry-run").ok().out
    assert dry.splitlines()[0] == "would delete 2 dead job(s) (dry run, nothing deleted):"
    assert sorted(r[0] for r in rows(dry.split("\n", 1)[1])) == sorted(dead_ids)
    assert inspector.jobs.count(make_filter(states=["dead"])) == 2

    assert (
        cli("dead", "purge", "--task", "add").ok().out == "no dead jobs match; nothing to purge\n"
    )
    purged = cli("dead", "purge", "--task", "parse_total", "--limit", "1").ok().out
    first, gone, hint = purged.splitlines()
    assert (first, hint) == (
        "deleted 1 dead job(s):",
        "(1 more match; run again or raise --batch to purge them)",
    )
    assert gone in dead_ids and inspector.jobs.get(gone) is None
    cli("dead", "purge", "--all").ok()
    assert inspector.jobs.count(make_filter(states=["dead"])) == 0
    assert inspector.jobs.get(done) is not None  # active jobs are never purged


def test_migrate_reports_what_it_applied(cli: Cli) -> None:
    versions = [m.version for m in load_migrations("conveyor.backends.sqlite")]
    assert versions[:2] == [1, 2]
    assert (
        cli("migrate").ok().out
        == f"applied migrations: {', '.join(f'{v:04d}' for v in versions)}\n"
    )
    assert cli("migrate").ok().out == "schema up to date: no migrations to apply\n"
    assert (
        cli("migrate", "--app", "example_app:app").ok().out
        == "schema up to date: no migrations to apply\n"
    )


def test_jobs_show_lists_parents_and_children(cli: Cli, inspector: Conveyor) -> None:
    from conveyor import chord, group

    @inspector.task(name="add")  # the example app's task, to enqueue a workflow of it
    def add(a: int, b: int) -> int:
        return a + b

    handle = chord(group(add.s(1, 2), add.s(3, 4)), add.s(10)).enqueue()
    first, second, callback = (h.id for h in handle.jobs)
    out = cli("jobs", "show", first).ok().out
    assert f"children (1)\n  {callback}  add  blocked" in out
    assert "parents (" not in out
    out = cli("jobs", "show", callback).ok().out
    assert f"parents (2)\n  {first}  add  available\n  {second}  add  available" in out
    data = cli.json("jobs", "show", callback, "--json")
    assert [(p["id"], p["state"]) for p in data["parents"]] == [
        (first, "available"),
        (second, "available"),
    ]
    assert data["children"] == []


def test_jobs_show_lists_the_stored_parents_of_a_job_given_them_by_hand(
    cli: Cli, inspector: Conveyor
) -> None:
    from dataclasses import replace

    @inspector.task(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    first = add.enqueue(1, 2)
    # Parents given on a job built without the task's options: nothing in its meta.
    [by_hand] = inspector.enqueue_many([replace(add.message(3, 4), depends_on=(first.id,))])
    assert "workflow" not in by_hand.job.meta
    out = cli("jobs", "show", by_hand.id).ok().out
    assert f"parents (1)\n  {first.id}  add  available" in out
    assert f"children (1)\n  {by_hand.id}  add  blocked" in cli("jobs", "show", first.id).ok().out


def test_jobs_show_says_why_a_job_is_held_back(cli: Cli, inspector: Conveyor) -> None:
    from conveyor.backends.claiming import strict_claim
    from conveyor.model.job import NewJob

    async def claim_first() -> None:
        backend = await inspector.backend()
        await backend.enqueue_jobs(
            [
                NewJob(
                    id=f"sync-{n}",
                    task="add",
                    queue="default",
                    payload='{"args":[1,2]}',
                    concurrency_key="user:42",
                    concurrency_limit=1,
                )
                for n in (1, 2)
            ]
        )
        [job] = await backend.fetch_jobs(strict_claim(["default"], 5, "w1", 300.0))
        assert job.id == "sync-1"

    inspector.portal.call(claim_first())
    out = cli("jobs", "show", "sync-2").ok().out
    fields = dict(
        re.split(r"\s{2,}", line, maxsplit=1)
        for line in out.split("\n\n")[0].splitlines()
        if line.startswith(("state", "held back", "concurrency"))
    )
    assert fields["state"] == "available"
    assert fields["held back"] == "waiting for a slot of key user:42: 1 of 1 running"
    assert fields["concurrency"] == "key user:42, at most 1 running"
    held = cli.job("sync-2")
    assert held["held_back"] == "waiting for a slot of key user:42: 1 of 1 running"
    assert "held back" not in cli("jobs", "show", "sync-1").ok().out
