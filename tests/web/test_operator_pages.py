"""What a new operator saw wrong, and the operator features: labels and buttons that fit
the jobs shown, draining workers, tracebacks without the worker's frames, the audit
page and timelines, and paced redrive runs started, steered and adopted from the
dashboard (on every backend)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import replace

from dashboard_fixtures import csrf, job_url, kill, local_client, seed
from starlette.testclient import TestClient

from conveyor import Conveyor
from conveyor.admin.api import make_filter
from conveyor.backends.claiming import strict_claim
from conveyor.backends.params import RecordWrite, ResultSweep, Settlement
from conveyor.model.job import AttemptError, JobState
from conveyor.model.workers import WORKERS_NAMESPACE
from conveyor.ops.redrive_runs import RedriveRun, Runs, RunStatus
from conveyor.web import create_dashboard

EXECUTOR_TRACEBACK = """Traceback (most recent call last):
  File "/srv/app/.venv/lib/python3.11/site-packages/conveyor/worker/executor.py", line 101, in _run
    result = await run_sync_limited(
             ^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/lib/python3.11/concurrent/futures/thread.py", line 58, in run
    result = self.fn(*self.args, **self.kwargs)
  File "/srv/app/myapp/tasks.py", line 26, in parse_total
    return float(text)
ValueError: could not convert string to float: 'xx'
"""


def run(app: Conveyor, coro_fn):  # type: ignore[no-untyped-def]
    async def go():  # type: ignore[no-untyped-def]
        try:
            return await coro_fn(await app.backend())
        finally:
            await app.aclose()

    return asyncio.run(go())


def test_job_list_fits_the_state_shown(
    client: TestClient, app: Conveyor, seeded: dict[str, list[str]]
) -> None:
    async def complete_after_a_failure(backend):  # type: ignore[no-untyped-def]
        [claimed] = await backend.fetch_jobs(strict_claim(["reports"], 1, "w", 30))
        await backend.settle_jobs(
            [
                Settlement(
                    claimed.id,
                    claimed.lease_token,
                    JobState.RETRYABLE,
                    run_at=app.clock() - 1,
                    error=AttemptError(1, app.clock(), "Timeout", "slow"),
                )
            ]
        )
        [again] = await backend.fetch_jobs(strict_claim(["reports"], 10, "w", 30))
        await backend.settle_jobs([Settlement(again.id, again.lease_token, JobState.COMPLETED)])
        return again.id

    done = run(app, complete_after_a_failure)
    completed = client.get("/jobs", params={"state": "completed"}).text
    assert re.search(r'<td class="err"></td>', completed)
    assert "Timeout: slow" not in completed  # history, not an error: on the job's page
    assert "Timeout: slow" in client.get(job_url(done)).text

    dead = client.get("/jobs", params={"state": "dead"}).text
    assert '<th id="time-column">Died</th>' in dead and "Enqueued" not in dead
    buttons = re.findall(r'name="action" value="(\w+)">(\w+ all)…', dead)
    assert buttons == [("retry", "Retry all"), ("delete", "Delete all")]  # no "Cancel all"
    waiting = client.get("/jobs", params={"state": "available"}).text
    assert re.findall(r'value="(\w+)">\w+ all…', waiting) == ["cancel"]
    assert '<th id="time-column">Enqueued</th>' in waiting
    everything = client.get("/jobs").text
    assert re.findall(r'value="(\w+)">\w+ all…', everything) == ["retry", "cancel", "delete"]


def test_job_page_says_none_for_no_timeout_and_hides_the_workers_frames(
    client: TestClient, app: Conveyor
) -> None:
    async def die(backend):  # type: ignore[no-untyped-def]
        job = (await app.tasks["reports.build"].enqueue_async(3)).id
        [claimed] = await backend.fetch_jobs(strict_claim(["reports"], 1, "w", 30))
        await backend.settle_jobs(
            [
                Settlement(
                    claimed.id,
                    claimed.lease_token,
                    JobState.DEAD,
                    error=AttemptError(
                        1,
                        app.clock(),
                        "ValueError",
                        "could not convert",
                        traceback=EXECUTOR_TRACEBACK,
                    ),
                )
            ]
        )
        return job

    job_id = run(app, die)
    page = client.get(job_url(job_id)).text
    assert '<dd id="job-timeout">none</dd>' in page and "task default" not in page
    [shown] = re.findall(r'<pre class="code tb">(.*?)</pre>', page, flags=re.S)
    assert shown.splitlines() == [
        "Traceback (most recent call last):",
        "  (2 frames of Conveyor&#39;s worker hidden)",
        "  File &#34;/srv/app/myapp/tasks.py&#34;, line 26, in parse_total",
        "    return float(text)",
        "ValueError: could not convert string to float: &#39;xx&#39;",
    ]
    timed = app.tasks["reports.build"].options(timeout=90).enqueue(4)
    assert '<dd id="job-timeout">1 min 30 s</dd>' in client.get(job_url(timed.id)).text


def test_a_draining_worker_shows_as_draining(
    client: TestClient, app: Conveyor, seeded: dict[str, list[str]]
) -> None:
    record = {
        "id": "w1",
        "host": "h1",
        "pid": 7,
        "queues": ["mail"],
        "concurrency": 4,
        "in_flight": 1,
        "started_at": app.clock(),
        "last_heartbeat": app.clock(),
        "version": "0.1.0",
        "stopping": True,
    }

    async def announce(backend):  # type: ignore[no-untyped-def]
        await backend.put_record(
            RecordWrite(namespace=WORKERS_NAMESPACE, key="w1", value=json.dumps(record), ttl=60)
        )

    run(app, announce)
    page = client.get("/workers").text
    assert "No live worker" not in page
    assert '<span class="count" id="worker-count">1 live (1 draining)</span>' in page
    assert '<span class="badge h-slow">draining</span>' in page
    overview = client.get("/").text
    assert "0 workers · 1 draining" in overview
    assert re.search(
        r'class="badge h-draining" title="jobs wait and the workers that serve '
        r'this queue are draining[^"]*">draining</span>',
        overview,
    )


def test_actions_are_on_the_audit_page_and_the_jobs_timeline(
    client: TestClient, app: Conveyor, seeded: dict[str, list[str]]
) -> None:
    token = csrf(client)
    job_id = seeded["dead_key"][0]
    client.post(job_url(job_id, "retry"), data={"csrf_token": token})
    client.post(
        "/jobs/bulk",
        data={
            "csrf_token": token,
            "action": "cancel",
            "scope": "filter",
            "state": "available",
            "confirmed": "yes",
            "expected": "3",
        },
    )
    client.post("/queues/pause?queue=mail", data={"csrf_token": token})
    audit = client.get("/audit").text
    rows = re.findall(
        r"<tr>\s*<td[^>]*>[^<]*</td>\s*<td>([^<]*)<small>[^<]*</small></td>\s*"
        r"<td>(\w+)</td>\s*<td>([^<]*)</td>\s*<td class=\"n\">(\d+)</td>",
        audit,
    )
    assert [(by.strip(), via, action, n) for by, via, action, n in rows] == [
        ("local:127.0.0.1", "dashboard", "pause", "0"),
        ("local:127.0.0.1", "dashboard", "cancel", "3"),
        ("local:127.0.0.1", "dashboard", "retry", "1"),
    ]
    assert "every job matching state=available" in audit
    only = client.get("/audit", params={"action": "retry"}).text
    assert '<span class="count" id="audit-count">1 action</span>' in only
    timeline = client.get(job_url(job_id)).text
    events = [
        (tone, text.strip().rstrip(":"))
        for tone, text in re.findall(
            r'<li class="t-(\w*)"><span class="when">[^<]*</span> ([^<]*)', timeline
        )
    ]
    assert events == [
        ("", "enqueued"),
        ("", "last attempt started"),
        ("bad", "attempt 1 failed, dead"),
        ("op", "retry by local:127.0.0.1 (dashboard)"),
        ("op", "cancel by local:127.0.0.1 (dashboard)"),
        ("bad", "cancelled"),
    ]
    assert client.get("/audit", params={"action": "nope"}).status_code == 400


def wait_for(check, what: str, timeout: float = 15.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def play_worker(app: Conveyor, queue: str) -> int:
    """Complete every available job of `queue`, as a worker would."""

    async def go(backend):  # type: ignore[no-untyped-def]
        jobs = await backend.fetch_jobs(strict_claim([queue], 100, "w", 30))
        await backend.settle_jobs(
            [Settlement(j.id, j.lease_token, JobState.COMPLETED) for j in jobs]
        )
        return len(jobs)

    return int(run(app, go))


def test_paced_redrive_from_the_dashboard_on_every_backend(any_app: Conveyor) -> None:
    app = any_app
    ids = seed(app)
    runs = Runs(app)
    with local_client(create_dashboard(app, close_backend_on_shutdown=False)) as client:
        token = csrf(client)
        page = client.get("/redrive", params={"queue": "mail"}).text
        assert 'id="paced-form"' in page and "Or all 3, paced:" in page
        started = client.post(
            "/redrive/runs",
            data={
                "csrf_token": token,
                "state": "dead",
                "queue": "mail",
                "rate": "100/s",
                "stop_if_failing": "50%",
                "min_sample": "2",
            },
        )
        assert started.status_code == 200 and "Redrive run r" in started.text
        [run_id] = re.findall(r'<tr id="run-(\w+)">', started.text)
        wait_for(lambda: app.jobs.count(make_filter(states=["dead"])) == 0, "the run's batch")
        assert play_worker(app, "mail") == 4  # the three redriven and the waiting email
        done = wait_for(
            lambda: (r := app.portal.call(runs.get(run_id))) and r.status is RunStatus.DONE and r,
            "the run to finish",
        )
        assert (done.redriven, done.succeeded, done.failed, done.by, done.via) == (
            3,
            3,
            0,
            "local:127.0.0.1",
            "dashboard",
        )
        # The run's record says done first, its audit entry follows (redrive_driver._save).
        entries = wait_for(
            lambda: (
                (found := [(e.action, e.count) for e in app.jobs.audit(limit=2)])
                and found[0][0] != "redrive run started"
                and found
            ),
            "the run's end",
        )
        assert entries == [("redrive run done", 3), ("redrive run started", 0)]
        assert [e.action for e in app.jobs.actions_on(ids["dead_key"][0])] == [
            "redrive run started"
        ]

        # A slow run, paused, resumed and cancelled from its buttons.
        asyncio.run(kill_again(app))
        client.post(
            "/redrive/runs",
            data={"csrf_token": token, "state": "dead", "queue": "mail", "rate": "1/h"},
        )
        slow = next(r for r in app.portal.call(runs.all()) if r.status is RunStatus.RUNNING)
        dead = make_filter(states=["dead"])
        wait_for(lambda: app.jobs.count(dead) == 2, "the first job (a full bucket holds one)")
        paused = client.post(f"/redrive/runs/pause?id={slow.id}", data={"csrf_token": token})
        assert f"Redrive run {slow.id}: paused." in paused.text
        assert f'id="run-resume-{slow.id}"' in paused.text
        assert (
            f"Redrive run {slow.id}: running."
            in client.post(f"/redrive/runs/resume?id={slow.id}", data={"csrf_token": token}).text
        )
        cancelled = client.post(f"/redrive/runs/cancel?id={slow.id}", data={"csrf_token": token})
        assert f"Redrive run {slow.id}: cancelled." in cancelled.text
        assert f'id="run-cancel-{slow.id}"' not in cancelled.text
        # 1/h: one job at the start; resumed, it goes on at its pace (no new burst).
        assert app.jobs.count(dead) == 2
        stopped = app.portal.call(runs.get(slow.id))
        assert stopped is not None and (stopped.status, stopped.redriven) == (
            RunStatus.CANCELLED,
            1,
        )


async def kill_again(app: Conveyor) -> None:
    """Three new dead emails."""
    try:
        for i in range(3):
            await app.tasks["emails.send"].enqueue_async(f"again{i}@example.org")
        await kill(app, "mail", "KeyError", "'template'")
    finally:
        await app.aclose()


def test_a_run_left_by_a_stopped_process_is_adopted_by_the_next_dashboard(
    app: Conveyor, seeded: dict[str, list[str]]
) -> None:
    runs = Runs(app)
    orphan = app.portal.call(runs.start(make_filter(states=["dead"]), 50.0, by="ops"))
    assert orphan.driver is None  # as if its process died before driving it
    with local_client(create_dashboard(app, close_backend_on_shutdown=False)):
        # The run's record counts a step after the step's jobs moved: wait for the record.
        def adopted_run() -> RedriveRun | None:
            run = app.portal.call(runs.get(orphan.id))
            return run if run is not None and run.redriven == 3 else None

        adopted = wait_for(adopted_run, "the adopted run to count its 3 redriven jobs")
        assert adopted.driver is not None
        assert app.jobs.count(make_filter(states=["dead"])) == 0


def test_job_page_draws_its_workflow_by_level_with_each_members_state(
    client: TestClient, app: Conveyor
) -> None:
    from conveyor import chord, group

    build = app.tasks["reports.build"]
    handle = chord(group(build.si(1), build.si(2)), build.si(3)).enqueue()
    first, second, callback = (h.id for h in handle.jobs)
    for shown_from in (first, callback):  # the same graph from any member
        page = client.get(job_url(shown_from)).text
        [drawn] = re.findall(r'<ol class="workflow" id="job-workflow">(.*?)</ol>', page, re.S)
        levels = [
            re.findall(r'href="/job\?id=([^"]+)"[^>]*>([^<]+)</a>', level)
            for level in re.findall(r"<li>(.*?)</li>", drawn, re.S)
        ]
        assert levels == [
            [(first, "reports.build · available"), (second, "reports.build · available")],
            [(callback, "reports.build · blocked")],
        ]
    plain = build.enqueue(4)  # outside any workflow: no section
    assert 'id="job-workflow"' not in client.get(job_url(plain.id)).text
    # Parents given by hand, on a job whose meta says nothing of them: drawn the same.
    [by_hand] = app.enqueue_many([replace(build.message(5), depends_on=(plain.id,))])
    page = client.get(job_url(by_hand.id)).text
    [drawn] = re.findall(r'<ol class="workflow" id="job-workflow">(.*?)</ol>', page, re.S)
    assert [
        re.findall(r'href="/job\?id=([^"]+)"', level)
        for level in re.findall(r"<li>(.*?)</li>", drawn, re.S)
    ] == [[plain.id], [by_hand.id]]


def test_job_page_says_how_long_a_result_is_kept_and_when_it_expired(
    client: TestClient, app: Conveyor
) -> None:
    build = app.tasks["reports.build"]

    async def complete_both(backend):  # type: ignore[no-untyped-def]
        ids = [
            (await build.options(result_ttl=ttl).enqueue_async(n)).id
            for n, ttl in ((1, 3600), (2, 1))
        ]
        claimed = await backend.fetch_jobs(strict_claim(["reports"], 2, "w", 30))
        await backend.settle_jobs(
            [
                Settlement(
                    j.id,
                    j.lease_token,
                    JobState.COMPLETED,
                    result="7",
                    result_ttl=3600.0 if j.id == ids[0] else 1.0,
                )
                for j in claimed
            ]
        )
        assert await backend.expire_results(ResultSweep(now=app.clock() + 60, limit=10)) == [ids[1]]
        return ids

    kept, expired = run(app, complete_both)
    page = client.get(job_url(kept)).text
    assert 'id="job-result-kept"' in page and 'id="job-result-expired"' not in page
    page = client.get(job_url(expired)).text
    assert 'id="job-result-expired"' in page and "result_ttl" in page
