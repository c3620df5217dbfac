"""The dashboard's queue page (`/queue?queue=<name>`, docs/flow-control.md, Operations):
how live workers claim the queue, the app's declared limits, its counts, the busiest
concurrency keys and the buckets that hold jobs back; linked from the overview. Names
are data: escaped in the page, exact in links; a malformed request is a 400, an
unknown queue a 404."""

from __future__ import annotations

import asyncio
import html
import json
import re
from collections.abc import Iterator

import pytest
from dashboard_fixtures import local_client

from conveyor import Conveyor, Limits
from conveyor.backends.claiming import QueuePlan
from conveyor.backends.params import RecordWrite
from conveyor.model.workers import WORKERS_NAMESPACE
from conveyor.web import create_dashboard

HOSTILE = '<img src=x onerror=alert(1)>/../q?x=1&y="2"'
KEY = "k:<script>alert(1)</script>"


def declare(app: Conveyor) -> Conveyor:
    app.queue(HOSTILE, rate_limit="10/m", max_waiting=100, on_full="shed_oldest")

    @app.task(name="sync", queue=HOSTILE, limits=Limits(concurrency_key="k:{name}"))
    def sync(name: str) -> None: ...

    @app.task(name="ping", queue=HOSTILE, limits=Limits(rate_limit="1/h"))  # a bucket of its own
    def ping(n: int) -> None: ...

    return app


def fill(app: Conveyor) -> None:
    """Keys <script>... x2 and plain x3 (one slot each), three pings (one token), one
    claim that declares the app's buckets, and a live worker that weighs the queue 6."""

    async def go() -> None:
        sync, ping = app.tasks["sync"], app.tasks["ping"]
        for name in ("<script>alert(1)</script>",) * 2 + ("plain",) * 3:
            await sync.enqueue_async(name)
        for n in range(3):
            await ping.enqueue_async(n)
        backend = await app.backend()
        claimed = await backend.fetch_jobs(
            QueuePlan([HOSTILE]).request(10, "w1", 30.0, rate_limits=app.rate_limits.declared)
        )
        assert sorted(job.task for job in claimed) == ["ping", "sync", "sync"]
        await backend.put_record(
            RecordWrite(
                namespace=WORKERS_NAMESPACE,
                key="w1",
                value=json.dumps(
                    {
                        "id": "w1",
                        "host": "h",
                        "pid": 1,
                        "queues": [HOSTILE, "mail"],
                        "queue_weights": [6, 1],
                        "concurrency": 4,
                        "stopping": False,
                    }
                ),
                ttl=600,
            )
        )
        await app.aclose()

    asyncio.run(go())


def rows(page: str, table: str) -> list[list[str]]:
    body = page[page.index(f'<table id="{table}">') :]
    body = body[: body.index("</table>")]
    return [
        [html.unescape(cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        for row in re.findall(r"<tr>(.*?)</tr>", body, flags=re.S)
        if "<td" in row
    ]


@pytest.fixture
def app(any_app: Conveyor) -> Iterator[Conveyor]:
    declare(any_app)
    fill(any_app)
    yield any_app


def test_the_queue_page_shows_weights_limits_counts_keys_and_buckets(app: Conveyor) -> None:
    with local_client(create_dashboard(app, close_backend_on_shutdown=False)) as client:
        overview = client.get("/").text
        # The overview lists the queues with jobs: a link to each one's page.
        [link] = [
            html.unescape(m) for m in re.findall(r'class="queue-link" href="([^"]+)"', overview)
        ]
        page = client.get(link)
        assert page.status_code == 200
        text = page.text
        assert "<script>alert(1)" not in text and "<img src=x" not in text
        assert html.unescape(re.search(r'id="queue-name">(.*?)<', text).group(1)) == HOSTILE  # type: ignore[union-attr]
        assert re.search(r'id="queue-waiting">(\d+)<', text).group(1) == "5"  # type: ignore[union-attr]
        assert re.search(r'id="queue-throttled">(\d+)<', text).group(1) == "2"  # type: ignore[union-attr]
        assert re.search(r'id="queue-held">(\d+)<', text).group(1) == "3"  # type: ignore[union-attr]
        assert re.search(r'id="queue-running">(\d+)<', text).group(1) == "3"  # type: ignore[union-attr]
        assert "<li>weight 6 (1 worker)</li>" in text
        limits = text[text.index('<ul id="queue-limits">') :]
        assert "<li>rate limit 10/m, burst 10</li><li>max_waiting 100 (shed_oldest)</li>" in limits
        assert rows(text, "keys-by-running") == [[KEY, "1", "1"], ["k:plain", "1", "2"]]
        assert rows(text, "keys-by-held") == [["k:plain", "2", "1"], [KEY, "1", "1"]]
        assert rows(text, "buckets") == [["task:ping", "2", "1/h, burst 1"]]


def test_an_unknown_queue_is_a_404_and_a_malformed_request_a_400(app: Conveyor) -> None:
    with local_client(create_dashboard(app, close_backend_on_shutdown=False)) as client:
        unknown = client.get("/queue", params={"queue": "<nope>"})
        assert unknown.status_code == 404 and "&lt;nope&gt;" in unknown.text
        for query, status, says in (
            ("", 400, "which queue"),
            ("queue=", 400, "which queue"),
            ("queue=mail%00", 400, "NUL"),
            ("queue=%ff", 400, "UTF-8"),
            ("queue=a&queue=b", 400, "given 2 times"),
        ):
            response = client.get(f"/queue?{query}")
            assert (response.status_code, says in response.text) == (status, True), query
        mail = client.get("/queue", params={"queue": "mail"})
        assert mail.status_code == 200
        assert "No job waits for a rate limit." in mail.text
        assert "This dashboard's app declares nothing for this queue" in mail.text


def test_a_throttled_jobs_page_says_which_bucket_holds_it(app: Conveyor) -> None:
    waiting = [
        job
        for job in app.jobs.list(limit=50)
        if job.task == "ping" and job.state.value == "available"
    ]
    assert len(waiting) == 2
    with local_client(create_dashboard(app, close_backend_on_shutdown=False)) as client:
        page = client.get("/job", params={"id": waiting[0].id}).text
        assert (
            "<strong>Held back:</strong> waiting for a token of rate limit bucket "
            "task:ping. Waiting uses no attempt."
        ) in page
        assert '<dd id="job-rate-limit">task:ping: 1/h, burst 1</dd>' in page
