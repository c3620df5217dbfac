"""Ids are data, never structure; a hostile request is a clear 4xx, never a 500.

On every backend: job ids with `/`, `%`, `?`, dots, newlines and non-ASCII text are
listed, linked, shown and acted on exactly (the page of one never reaches another);
the audit log escapes them; NUL bytes, bytes that are not UTF-8, unknown states and
out-of-range numbers are refused with a 400 that says what is wrong, and change nothing.
"""

from __future__ import annotations

import asyncio
import html
import logging
import re
from collections.abc import Iterator
from dataclasses import replace

import pytest
from dashboard_fixtures import csrf, local_client, seed
from starlette.testclient import TestClient

from conveyor import Conveyor
from conveyor.backends.params import JobFilter
from conveyor.model.job import JobState
from conveyor.web import create_dashboard

FORGED = "z\nlocal:127.0.0.1 delete job y: deleted"
HOSTILE_IDS = (
    "a/b",
    "x%2Fy",
    "x/../y",
    ".",
    "..",
    "q?x=1#y",
    "sp ace",
    "a/retry",
    "bulk",
    "back\\slash",
    "cr\rlf",
    "ü/é",
    "日本/🚀",
    FORGED,
)


def unescaped(pattern: str, text: str) -> list[str]:
    return [html.unescape(m) for m in re.findall(pattern, text, flags=re.S)]


def state(app: Conveyor, job_id: str) -> JobState | None:
    job = app.jobs.get(job_id)
    return None if job is None else job.state


def test_job_ids_are_data_on_every_backend(
    any_app: Conveyor, caplog: pytest.LogCaptureFixture
) -> None:
    app = any_app
    send = app.tasks["emails.send"]
    for job_id in (*HOSTILE_IDS, "y"):
        if any(ord(c) < 32 for c in job_id):
            # Enqueue refuses control characters in ids now (conveyor.model.validation);
            # a store written by an older version can still hold them.
            store_with_id(app, job_id)
        else:
            send.options(job_id=job_id).enqueue(f"{job_id}@example.org")
    with (
        local_client(create_dashboard(app)) as client,
        caplog.at_level(logging.INFO, logger="conveyor.dashboard.audit"),
    ):
        listing = client.get("/jobs", params={"limit": "50"})
        assert listing.status_code == 200
        links = unescaped(r'<a class="job-link" href="([^"]+)"', listing.text)
        assert len(links) == len(HOSTILE_IDS) + 1
        token = csrf(client)
        shown = []
        for link in links:
            page = client.get(link)
            assert page.status_code == 200, (link, page.text[:200])
            [job_id] = unescaped(r'id="job-id">(.*?)</span>', page.text)
            shown.append(job_id)
            if job_id == "y":
                continue
            [action] = unescaped(r'action="([^"]+)" id="form-cancel"', page.text)
            [back] = unescaped(r'name="next" value="([^"]+)"', page.text)
            done = client.post(
                action, data={"csrf_token": token, "next": back}, follow_redirects=False
            )
            assert done.status_code == 303 and done.headers["location"] == link
            assert state(app, job_id) is JobState.CANCELLED
            assert f"Job {html.escape(job_id)}: cancelled." in client.get(link).text
        assert sorted(shown) == sorted((*HOSTILE_IDS, "y"))
        assert state(app, "y") is JobState.AVAILABLE  # "x/../y" and the forged line are not y

        # The selection carries the ids exactly (a form would turn "\r" into "\r\n").
        listing = client.get("/jobs", params={"state": "cancelled", "limit": "50"})
        chosen = unescaped(r'name="ids" value="([^"]+)"', listing.text)
        [bulk] = unescaped(r'<form method="post" action="([^"]+)" id="selection"', listing.text)
        n = len(HOSTILE_IDS)
        done = client.post(
            bulk,
            data={
                "csrf_token": token,
                "action": "delete",
                "scope": "selected",
                "ids": chosen,
                "confirmed": "yes",
                "expected": str(n),
            },
        )
        assert f"Deleted {n} of {n} job(s)." in done.text
        assert all(state(app, job_id) is None for job_id in HOSTILE_IDS)
        assert state(app, "y") is JobState.AVAILABLE
    lines = [r.getMessage() for r in caplog.records if r.name == "conveyor.dashboard.audit"]
    assert len(lines) == n + 1
    assert not any("\n" in line or "\r" in line for line in lines)
    assert (
        "local:127.0.0.1 cancel job z\\nlocal:127.0.0.1 delete job y: deleted: cancelled" in lines
    )
    assert "local:127.0.0.1 cancel job cr\\rlf: cancelled" in lines
    assert "local:127.0.0.1 cancel job back\\\\slash: cancelled" in lines
    assert lines[-1] == f"local:127.0.0.1 bulk delete {n} selected: Deleted {n} of {n} job(s)"


def store_with_id(app: Conveyor, job_id: str) -> None:
    """Write a job with this id straight to the backend, as an older version could
    have (enqueue refuses NUL bytes and other control characters in ids now)."""

    async def go() -> None:
        backend = await app.backend()
        await backend.enqueue_jobs([replace(app.tasks["emails.send"].message("old"), id=job_id)])
        await app.aclose()

    asyncio.run(go())


def test_a_stored_id_with_a_nul_byte_is_listed_and_refused_clearly(
    app_storing_nul: Conveyor,
) -> None:
    store_with_id(app_storing_nul, "old\x00id")
    with local_client(create_dashboard(app_storing_nul)) as client:
        listing = client.get("/jobs")
        assert listing.status_code == 200 and "1 matching" in listing.text
        [link] = unescaped(r'<a class="job-link" href="([^"]+)"', listing.text)
        page = client.get(link)
        assert page.status_code == 400 and "NUL" in page.text


# --- hostile requests: a parametrised table, on every backend --------------------------------
# (method, target, form or None, status, what the answer says)
HOSTILE = [
    ("GET", "/jobs?q=a%00b", None, 400, "NUL"),
    ("GET", "/jobs?queue=mail%00", None, 400, "NUL"),
    ("GET", "/jobs?task=emails.send%00", None, 400, "NUL"),
    ("GET", "/jobs?error_type=Key%00Error", None, 400, "NUL"),
    ("GET", "/jobs?state=dead%00", None, 400, "NUL"),
    ("GET", "/jobs?after=a%00b", None, 400, "NUL"),
    ("GET", "/jobs?%00=1", None, 400, "NUL"),
    ("GET", "/job?id=a%00b", None, 400, "NUL"),
    ("GET", "/jobs/a%00b", None, 400, "NUL"),
    ("GET", "/redrive?q=a%00b", None, 400, "NUL"),
    ("GET", "/redrive?queue=mail%00", None, 400, "NUL"),
    ("GET", "/jobs?q=%ff%fe", None, 400, "UTF-8"),
    ("GET", "/job?id=%c3", None, 400, "UTF-8"),
    ("GET", "/jobs/%ff", None, 400, "UTF-8"),
    ("GET", "/jobs?limit=99999999999999999999", None, 400, "limit"),
    ("GET", "/jobs?limit=-1", None, 400, "limit"),
    ("GET", "/jobs?limit=ten", None, 400, "limit"),
    ("GET", "/jobs?limit=7", None, 400, "limit"),
    ("GET", "/jobs?state=exploded", None, 400, "state"),
    ("GET", "/jobs?state=dead&state=available", None, 400, "once"),
    ("GET", "/redrive?state=running", None, 400, "dead or cancelled"),
    ("GET", "/redrive?batch=-5", None, 400, "batch"),
    ("GET", "/redrive?batch=0", None, 400, "batch"),
    ("GET", "/redrive?batch=10001", None, 400, "batch"),
    ("GET", "/redrive?batch=1e400", None, 400, "batch"),
    ("GET", "/job", None, 400, "id"),
    (
        "POST",
        "/jobs/bulk",
        {"action": "delete", "scope": "filter", "queue": "mail\x00"},
        400,
        "NUL",
    ),
    (
        "POST",
        "/jobs/bulk",
        {"action": "delete", "scope": "selected", "ids": ["a\x00b"]},
        400,
        "NUL",
    ),
    ("POST", "/jobs/bulk", {"action": "delete", "scope": "selected", "ids": ["%ff"]}, 400, "UTF-8"),
    ("POST", "/jobs/bulk", {"action": "delete", "scope": "everything"}, 400, "scope"),
    (
        "POST",
        "/jobs/bulk",
        {"action": "delete", "scope": "filter", "state": "exploded"},
        400,
        "state",
    ),
    (
        "POST",
        "/jobs/bulk",
        {
            "action": "delete",
            "scope": "filter",
            "state": "dead",
            "confirmed": "yes",
            "expected": "-5",
        },
        400,
        "expected",
    ),
    (
        "POST",
        "/jobs/bulk",
        {
            "action": "delete",
            "scope": "filter",
            "state": "dead",
            "confirmed": "yes",
            "expected": "all",
        },
        400,
        "expected",
    ),
    ("POST", "/jobs/bulk", {"action": "explode", "scope": "filter"}, 400, "action"),
    ("POST", "/jobs/bulk", b"action=delete&scope=filter&queue=%ff", 400, "UTF-8"),
    (
        "POST",
        "/jobs/bulk",
        {"action": "delete", "scope": "selected", "ids": [f"id{i}" for i in range(1500)]},
        400,
        "fields",
    ),
    ("POST", "/redrive", {"batch": "-1"}, 400, "batch"),
    ("POST", "/redrive", {"q": "\x00"}, 400, "NUL"),
    ("POST", "/queues/pause?queue=mail%00", {}, 400, "NUL"),
    ("POST", "/job/delete?id=a%00b", {}, 400, "NUL"),
    ("POST", "/job/explode?id=x", {}, 404, "unknown action"),
]


@pytest.fixture(scope="module")
def seeded_app(shared_app: Conveyor) -> Iterator[Conveyor]:
    seed(shared_app)
    yield shared_app


def snapshot(app: Conveyor) -> tuple[dict[str, int], list[bool]]:
    counts = {s.value: app.jobs.count(JobFilter(states=(s,))) for s in JobState}
    return counts, [s.paused for s in app.jobs.stats()]


@pytest.mark.parametrize(
    ("method", "target", "form", "status", "says"),
    HOSTILE,
    ids=[f"{m} {t} {f!r}"[:80] for m, t, f, *_ in HOSTILE],
)
def test_hostile_requests_are_refused_clearly(
    seeded_app: Conveyor,
    method: str,
    target: str,
    form: dict[str, object] | bytes | None,
    status: int,
    says: str,
) -> None:
    before = snapshot(seeded_app)
    client: TestClient
    with local_client(create_dashboard(seeded_app)) as client:
        if method == "GET":
            response = client.get(target)
        else:
            token = csrf(client)
            if isinstance(form, bytes):
                response = client.post(
                    target,
                    content=b"csrf_token=" + token.encode() + b"&" + form,
                    headers={"content-type": "application/x-www-form-urlencoded"},
                )
            else:
                response = client.post(target, data={"csrf_token": token, **(form or {})})
    assert response.status_code == status, response.text[:300]
    assert says in response.text
    assert response.headers["content-type"].startswith("text/plain")
    assert snapshot(seeded_app) == before
