"""The dashboard only talks to app.admin, so it works on every backend: the main
flows, against each backend of the conformance registry (the `any_app` fixture)."""

from __future__ import annotations

import re

from dashboard_fixtures import csrf, job_url, local_client, queue_url, seed

from conveyor import Conveyor, Limits
from conveyor.admin.api import make_filter
from conveyor.model.job import JobState
from conveyor.web import create_dashboard


def test_dashboard_flows_on_every_backend(any_app: Conveyor) -> None:
    app = any_app
    ids = seed(app)
    with local_client(create_dashboard(app)) as client:
        overview = client.get("/").text
        assert 'href="/jobs?queue=mail"' in overview and 'href="/jobs?queue=reports"' in overview
        dead = client.get(
            "/jobs", params={"state": "dead", "error_type": "KeyError", "q": "user1@"}
        ).text
        assert re.findall(r'name="ids" value="([^"]+)"', dead) == [ids["dead_key"][1]]
        first = client.get("/jobs", params={"limit": "25", "state": "dead"}).text
        assert "3 matching" in first and 'id="next-page"' not in first
        preview = client.get("/redrive", params={"queue": "mail", "batch": "2"}).text
        assert "<strong>3</strong> jobs match; the next batch moves <strong>2</strong>" in preview
        token = csrf(client)
        client.post(job_url(ids["dead_key"][0], "retry"), data={"csrf_token": token})
        assert app.jobs.get(ids["dead_key"][0]).state is JobState.AVAILABLE  # type: ignore[union-attr]
        form = {"csrf_token": token, "action": "delete", "scope": "filter", "state": "dead"}
        assert "Delete <strong>2</strong> jobs" in client.post("/jobs/bulk", data=form).text
        client.post("/jobs/bulk", data={**form, "confirmed": "yes", "expected": "2"})
        assert app.jobs.count(make_filter(states=["dead"])) == 0
        client.post(queue_url("mail", "pause"), data={"csrf_token": token})
        assert {s.queue: s.paused for s in app.jobs.stats()}["mail"] is True
        metrics = client.get("/metrics").text.splitlines()
        assert 'conveyor_queue_paused{queue="mail"} 1.0' in metrics


def test_a_job_held_back_by_its_key_says_why_on_its_page(any_app: Conveyor) -> None:
    app = any_app

    @app.task(limits=Limits(concurrency_key="user:{user_id}", concurrency_limit=1))
    def sync_user(user_id: int) -> None: ...

    first, second = sync_user.enqueue(42), sync_user.enqueue(42)
    claimed = app.portal.call(_claim_one(app))
    assert claimed == first.id
    with local_client(create_dashboard(app)) as client:
        page = client.get(job_url(second.id)).text
        assert (
            "<strong>Held back:</strong> waiting for a slot of key user:42: 1 of 1 running" in page
        )
        assert "user:42 (at most 1 running)" in page
        assert "Held back:" not in client.get(job_url(first.id)).text
        # The overview counts it under its queue's waiting jobs.
        assert '<small class="held">1 held by key</small>' in client.get("/").text


async def _claim_one(app: Conveyor) -> str:
    from conveyor.backends.claiming import strict_claim

    backend = await app.backend()
    [job] = await backend.fetch_jobs(strict_claim(["default"], 5, "w1", 30.0))
    return job.id
