"""Pages with corrupt jobs on them render, on every backend: the listing and the
dead-letter listing mark the job, its page says what cannot be read and shows the
rest, /metrics answers. A payload nested 100,000 deep (issue 10, item 6) is shown
cut, not decoded into a crash."""

from __future__ import annotations

import asyncio
import re

from conformance.raw_store import raw_store
from dashboard_fixtures import job_url, local_client

from conveyor import Conveyor
from conveyor.backends.claiming import strict_claim
from conveyor.backends.params import Settlement
from conveyor.model.job import AttemptError, JobState
from conveyor.web import create_dashboard

DEEP = "[" * 100_000 + "]" * 100_000


def seed_corrupt(app: Conveyor, backend_name: str) -> dict[str, str]:
    """A waiting job with a meta that is not an object, a dead one whose payload is
    nested 100,000 deep (killed as the worker kills it: CorruptPayload), and one in a
    state that does not exist, where the store can hold it."""
    send = app.tasks["emails.send"]

    async def go() -> dict[str, str]:
        deep = (await send.enqueue_async("deep@example.org")).id
        raw = raw_store(backend_name, app.url)
        try:
            assert await raw.write(deep, "payload", DEEP)
            backend = await app.backend()
            [claimed] = await backend.fetch_jobs(strict_claim(["mail"], 1, "w", 30))
            error = AttemptError(1, app.clock(), "CorruptPayload", "payload: nested too deeply")
            await backend.settle_jobs(
                [Settlement(deep, claimed.lease_token, JobState.DEAD, error=error)]
            )
            bad_meta = (await send.enqueue_async("meta@example.org")).id
            assert await raw.write(bad_meta, "meta", "[1, 2]")
            # A state no version wrote (PostgreSQL's schema refuses it: no such job there).
            odd = (await app.tasks["reports.build"].enqueue_async(1)).id
            stored = await raw.write(odd, "state", "paused")
        finally:
            await raw.close()
        await app.aclose()
        return {"bad_meta": bad_meta, "deep": deep, "odd": odd, "odd_stored": str(stored)}

    return asyncio.run(go())


def test_pages_show_corrupt_jobs_instead_of_failing(any_app: Conveyor) -> None:
    backend_name = {
        "sqlite": "sqlite",
        "postgresql": "postgres",
        "redis": "redis",
        "memory": "memory",
    }[any_app.url.split(":", 1)[0]]
    ids = seed_corrupt(any_app, backend_name)
    with local_client(create_dashboard(any_app)) as client:
        listing = client.get("/jobs")
        assert listing.status_code == 200
        rows = re.findall(
            r'<tr>\s*<td><input type="checkbox" name="ids" value="([^"]+)"', listing.text
        )
        odd_stored = ids.pop("odd_stored") == "True"
        assert sorted(rows) == sorted(ids.values())
        assert listing.text.count('class="badge corrupt"') == 1 + odd_stored
        dead = client.get("/jobs", params={"state": "dead"})  # the dead-letter listing
        assert dead.status_code == 200 and "CorruptPayload: payload: nested too deeply" in dead.text
        page = client.get(job_url(ids["bad_meta"]))
        assert page.status_code == 200
        assert "cannot be read in full:</strong> meta: not an object" in page.text
        deep = client.get(job_url(ids["deep"]))
        assert deep.status_code == 200
        [shown] = re.findall(r'<pre class="code" id="job-args">(.*?)</pre>', deep.text, re.S)
        assert shown == "[" * 10_000 + "… (190,000 more characters)"
        assert client.get("/redrive", params={"queue": "mail"}).status_code == 200
        assert client.get("/").status_code == 200
        metrics = client.get("/metrics")
        assert metrics.status_code == 200
        assert 'conveyor_queue_dead_letter_jobs{queue="mail"} 1.0' in metrics.text.splitlines()
