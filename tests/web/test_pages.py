"""Dashboard pages over the admin API (Starlette TestClient, SQLite backend)."""

from __future__ import annotations

import asyncio
import re

from dashboard_fixtures import LOCAL, LOCAL_BASE_URL, job_url
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from conveyor import Conveyor
from conveyor.admin.api import make_filter
from conveyor.backends.params import RecordWrite
from conveyor.web import create_dashboard


def rows(html: str) -> list[str]:
    """The job ids linked from a job table, in order."""
    return re.findall(r'name="ids" value="([^"]+)"', html)


def test_overview_shows_each_queue_with_counts_health_and_charts(
    client: TestClient, seeded: dict[str, list[str]]
) -> None:
    page = client.get("/")
    assert page.status_code == 200
    html = page.text
    mail = html[html.index('href="/jobs?queue=mail"') :]
    mail = mail[: mail.index("</tr>")]
    cells = re.findall(r'<td class="n[^"]*">(?:<a [^>]+>)?([^<]+)', mail)
    # waiting, oldest wait, scheduled, running, retry, dead, completed
    assert (
        cells[0] == "1"
        and re.fullmatch(r"[\d.]+ m?s", cells[1])
        and cells[2:7] == ["0", "0", "0", "3", "0"]
    )
    assert ">no workers</span>" in mail
    assert 'hx-get="/?partial=1"' in html and 'hx-trigger="every 5.0s"' in html
    assert html.count('<svg class="chart"') == 3
    partial = client.get("/?partial=1").text
    assert "<html" not in partial and 'href="/jobs?queue=reports"' in partial


def test_job_lists_filter_by_state_queue_task_error_and_argument_text(
    client: TestClient, seeded: dict[str, list[str]]
) -> None:
    dead = client.get("/jobs", params={"state": "dead"})
    assert sorted(rows(dead.text)) == sorted(seeded["dead_key"] + seeded["dead_smtp"])
    assert "3 matching" in dead.text
    by_error = client.get("/jobs", params={"state": "dead", "error_type": "KeyError"})
    assert sorted(rows(by_error.text)) == sorted(seeded["dead_key"])
    assert 'href="/redrive?state=dead&amp;error_type=KeyError">Redrive in batches' in by_error.text
    by_text = client.get("/jobs", params={"state": "dead", "q": "user1@"})
    assert rows(by_text.text) == [seeded["dead_key"][1]]
    by_queue = client.get("/jobs", params={"queue": "reports"})
    assert rows(by_queue.text) == [seeded["waiting"][0]]
    by_task = client.get("/jobs", params={"task": "emails.send", "state": "available"})
    assert rows(by_task.text) == [seeded["waiting"][1]]
    assert "No jobs match." in client.get("/jobs", params={"q": "nobody"}).text


def test_pages_follow_a_cursor_newest_first(app: Conveyor, client: TestClient) -> None:
    build = app.tasks["reports.build"]
    ids = [h.id for h in app.enqueue_many([build.message(i) for i in range(60)])]
    first = client.get("/jobs", params={"limit": "25"})
    assert rows(first.text) == list(reversed(ids))[:25]
    next_url = re.search(r'href="([^"]+)" id="next-page"', first.text)
    assert next_url is not None and "after=" in next_url.group(1)
    second = client.get(next_url.group(1).replace("&amp;", "&"))
    assert rows(second.text) == list(reversed(ids))[25:50]
    third_url = re.search(r'href="([^"]+)" id="next-page"', second.text)
    assert third_url is not None
    third = client.get(third_url.group(1).replace("&amp;", "&"))
    assert rows(third.text) == list(reversed(ids))[50:]
    assert 'id="next-page"' not in third.text
    gone = client.get("/jobs", params={"after": "no-such-job"})
    assert "first page" in gone.text and len(rows(gone.text)) == 50


def test_job_detail_shows_arguments_attempts_and_tracebacks(
    client: TestClient, seeded: dict[str, list[str]]
) -> None:
    job_id = seeded["dead_smtp"][0]
    html = client.get(job_url(job_id)).text
    assert '<span class="badge st-dead big" id="job-state">dead</span>' in html
    assert "&#34;bounce@example.org&#34;" in html  # escaped JSON arguments
    assert "attempt 1 failed, dead: <strong>SMTPError: mailbox full</strong>" in html
    assert "SMTPError: mailbox full\n</pre>" in html  # the traceback
    assert "· h1 · app 1.4.2 · conveyor 0.1.0</span>" in html  # which deploy failed
    assert 'id="action-retry"' in html and 'id="action-delete"' in html
    assert 'id="action-cancel"' not in html
    assert client.get(job_url("no-such-job")).status_code == 404


def test_links_from_before_ids_moved_to_the_query_string_still_work(
    client: TestClient, seeded: dict[str, list[str]]
) -> None:
    job_id = seeded["dead_smtp"][0]
    old = client.get(f"/jobs/{job_id}", follow_redirects=False)
    assert old.status_code == 308 and old.headers["location"] == job_url(job_id)
    assert 'id="job-state">dead</span>' in client.get(f"/jobs/{job_id}").text
    missing = client.get(job_url("gone/../job"))
    assert missing.status_code == 404 and '<span class="mono">gone/../job</span>' in missing.text


def test_html_in_job_data_is_escaped(app: Conveyor, client: TestClient) -> None:
    handle = app.tasks["emails.send"].enqueue("<script>alert(1)</script>")
    html = client.get(f"/jobs/{handle.id}").text
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    listing = client.get("/jobs").text
    assert "<script>alert" not in listing


def test_workers_page_lists_live_workers(app: Conveyor, client: TestClient) -> None:
    async def announce() -> None:
        backend = await app.backend()
        await backend.put_record(
            RecordWrite(
                namespace="workers",
                key="w-1",
                value='{"id": "w-1", "host": "box", "pid": 4242, '
                '"queues": ["mail"], "concurrency": 8, "in_flight": 3, '
                '"started_at": 0, "last_heartbeat": 0, "version": "9.9", '
                '"stopping": false}',
                ttl=60,
            )
        )
        await app.aclose()

    asyncio.run(announce())
    html = client.get("/workers").text
    assert "1 live" in html and ">4242<" in html and ">3/8<" in html and "9.9" in html


def test_metrics_endpoint_has_queue_state(client: TestClient, seeded: dict[str, list[str]]) -> None:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    lines = response.text.splitlines()
    assert 'conveyor_queue_dead_letter_jobs{queue="mail"} 3.0' in lines
    assert 'conveyor_queue_jobs{queue="reports",state="available"} 1.0' in lines


def test_mounted_under_a_prefix_every_link_keeps_it(
    app: Conveyor, seeded: dict[str, list[str]]
) -> None:
    parent = Starlette(routes=[Mount("/ops/jobs", create_dashboard(app))])
    with TestClient(parent, client=LOCAL, base_url=LOCAL_BASE_URL) as client:
        html = client.get("/ops/jobs/").text
        assert 'href="/ops/jobs/static/dashboard.css"' in html
        assert 'href="/ops/jobs/jobs?state=dead"' in html
        assert client.get("/ops/jobs/static/htmx.min.js").status_code == 200
        job_id = seeded["dead_key"][0]
        detail = client.get(job_url(job_id, root="/ops/jobs")).text
        assert f'action="{job_url(job_id, "retry", root="/ops/jobs")}"' in detail
        # The session cookie is scoped to the prefix, and an action works under it.
        token = re.search(r'name="csrf_token" value="([^"]+)"', detail)
        assert token is not None
        assert [c.path for c in client.cookies.jar if c.name == "conveyor_session"] == ["/ops/jobs"]
        done = client.post(
            job_url(job_id, "retry", root="/ops/jobs"),
            data={"csrf_token": token.group(1)},
            follow_redirects=False,
        )
        assert done.status_code == 303
        assert done.headers["location"] == job_url(job_id, root="/ops/jobs")
        assert app.jobs.get(job_id).state.value == "available"  # type: ignore[union-attr]


def test_count_is_the_same_as_the_admin_api(
    app: Conveyor, client: TestClient, seeded: dict[str, list[str]]
) -> None:
    html = client.get("/jobs", params={"state": "dead", "queue": "mail"}).text
    expected = app.jobs.count(make_filter(states=["dead"], queues=["mail"]))
    assert f"{expected} matching" in html


def test_a_fresh_install_renders_every_page_empty(client: TestClient) -> None:
    assert "No queues yet" in client.get("/").text
    assert "No jobs match." in client.get("/jobs").text
    assert "No live worker." in client.get("/workers").text
    assert "<strong>0</strong> jobs match" in client.get("/redrive").text
    assert 'id="redrive-button"' not in client.get("/redrive").text
