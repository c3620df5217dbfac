"""Helpers the dashboard tests share (a module with its own name: `conftest` is
ambiguous when several test folders are collected together)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.testclient import TestClient

from conveyor import Conveyor
from conveyor.backends.claiming import strict_claim
from conveyor.backends.params import Settlement
from conveyor.model.job import AttemptError, JobState

LOCAL = ("127.0.0.1", 50123)
# What a browser on this machine sends as Host: a loopback name (the dashboard refuses
# other names when it has no authentication, so a DNS-rebound page cannot use it).
LOCAL_BASE_URL = "http://127.0.0.1:8080"


def local_client(asgi: Any, client: tuple[str, int] = LOCAL) -> TestClient:
    """A test client that comes from loopback and talks to the dashboard by a loopback name."""
    return TestClient(asgi, client=client, base_url=LOCAL_BASE_URL)


def make_app(path: Path, url: str | None = None) -> Conveyor:
    app = Conveyor(url or f"sqlite:///{path / 'jobs.db'}")

    @app.task(name="emails.send", queue="mail")
    def send(address: str, template: str = "welcome") -> None: ...

    @app.task(name="reports.build", queue="reports")
    def build(report_id: int) -> None: ...

    return app


async def kill(app: Conveyor, queue: str, error_type: str, message: str) -> list[str]:
    """Claim every available job of `queue` and dead-letter it with `error_type`."""
    backend = await app.backend()
    jobs = await backend.fetch_jobs(strict_claim([queue], 1000, "test-worker", 30.0))
    await backend.settle_jobs(
        [
            Settlement(
                j.id,
                j.lease_token,
                JobState.DEAD,
                error=AttemptError(
                    j.attempt,
                    app.clock(),
                    error_type,
                    message,
                    traceback=(
                        'Traceback (most recent call last):\n  File "tasks.py", line 9\n'
                        f"{error_type}: {message}\n"
                    ),
                    worker_id="test-worker",
                    host="h1",
                    version="0.1.0",
                    app_version="1.4.2",
                ),
            )
            for j in jobs
        ]
    )
    return [j.id for j in jobs]


def seed(app: Conveyor) -> dict[str, list[str]]:
    """Three dead emails (two KeyError), one waiting report, one waiting email."""
    send, build = app.tasks["emails.send"], app.tasks["reports.build"]

    async def go() -> dict[str, list[str]]:
        dead_key = [(await send.enqueue_async(f"user{i}@example.org")).id for i in range(2)]
        await kill(app, "mail", "KeyError", "'template'")
        dead_smtp = [(await send.enqueue_async("bounce@example.org")).id]
        await kill(app, "mail", "SMTPError", "mailbox full")
        waiting = [
            (await build.enqueue_async(7)).id,
            (await send.enqueue_async("new@example.org")).id,
        ]
        await app.aclose()
        return {"dead_key": dead_key, "dead_smtp": dead_smtp, "waiting": waiting}

    return asyncio.run(go())


def csrf(client: TestClient) -> str:
    """The CSRF token the pages put in their forms (signed for the client's session cookie)."""
    page = client.get("/")
    match = re.search(r'name="csrf_token" value="([^"]+)"', page.text) or re.search(
        r'"X-CSRF-Token": "([^"]+)"', page.text
    )
    assert match, "no CSRF token on the overview page"
    return match.group(1)


def job_url(job_id: str, action: str | None = None, root: str = "") -> str:
    """A job's page, or the URL of an action on it (ids go in the query string)."""
    return f"{root}/job{'/' + action if action else ''}?id={quote(job_id, safe='')}"


def queue_url(queue: str, action: str) -> str:
    return f"/queues/{action}?queue={quote(queue, safe='')}"
