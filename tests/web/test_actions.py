"""Actions: CSRF, read-only, auth, bulk with confirmation, redrive, pause, audit log."""

from __future__ import annotations

import base64
import logging
import re

import pytest
from starlette.requests import Request
from starlette.testclient import TestClient

from dashboard_fixtures import LOCAL, csrf
from conveyor import Conveyor
from conveyor.admin import make_filter
from conveyor.job import JobState
from conveyor.web import InsecureBind, check_bind, create_dashboard
from conveyor.web.security import AuthSettings

REMOTE = ("203.0.113.7", 40000)


def state(app: Conveyor, job_id: str) -> JobState:
    job = app.jobs.get(job_id)
    assert job is not None
    return job.state


# --- CSRF ------------------------------------------------------------------------------------
def test_actions_without_the_csrf_token_are_refused(app: Conveyor, client: TestClient,
                                                    seeded: dict[str, list[str]]) -> None:
    job_id = seeded["dead_key"][0]
    token = csrf(client)
    no_token = client.post(f"/jobs/{job_id}/retry", data={})
    wrong = client.post(f"/jobs/{job_id}/retry", data={"csrf_token": token[::-1]})
    # A cross-site form carries no cookie: the token alone is not enough either.
    foreign = TestClient(client.app, client=LOCAL).post(f"/jobs/{job_id}/retry",
                                                        data={"csrf_token": token})
    for response in (no_token, wrong, foreign):
        assert response.status_code == 403 and "CSRF" in response.text
    assert state(app, job_id) is JobState.DEAD
    ok = client.post(f"/jobs/{job_id}/retry", data={"csrf_token": token},
                     follow_redirects=False)
    assert ok.status_code == 303 and ok.headers["location"] == f"/jobs/{job_id}"
    assert state(app, job_id) is JobState.AVAILABLE
    # htmx requests send the token in a header instead.
    other = seeded["dead_key"][1]
    assert client.post(f"/jobs/{other}/retry", headers={"X-CSRF-Token": token},
                       follow_redirects=False).status_code == 303
    assert state(app, other) is JobState.AVAILABLE


def test_the_flash_message_says_what_happened(client: TestClient,
                                              seeded: dict[str, list[str]]) -> None:
    job_id = seeded["dead_key"][0]
    page = client.post(f"/jobs/{job_id}/retry", data={"csrf_token": csrf(client)})
    assert f"Job {job_id}: sent back to its queue." in page.text
    assert "sent back" not in client.get(f"/jobs/{job_id}").text  # shown once


# --- one job ---------------------------------------------------------------------------------
def test_cancel_and_delete_one_job(app: Conveyor, client: TestClient,
                                   seeded: dict[str, list[str]]) -> None:
    token = csrf(client)
    waiting = seeded["waiting"][0]
    client.post(f"/jobs/{waiting}/cancel", data={"csrf_token": token})
    assert state(app, waiting) is JobState.CANCELLED
    dead = seeded["dead_smtp"][0]
    response = client.post(f"/jobs/{dead}/delete", data={"csrf_token": token},
                           follow_redirects=False)
    assert response.headers["location"] == "/jobs"
    assert app.jobs.get(dead) is None
    # An active job is never deleted.
    active = seeded["waiting"][1]
    client.post(f"/jobs/{active}/delete", data={"csrf_token": token})
    assert state(app, active) is JobState.AVAILABLE


# --- bulk --------------------------------------------------------------------------------------
def test_bulk_on_a_selection_asks_first_with_the_count(app: Conveyor, client: TestClient,
                                                       seeded: dict[str, list[str]]) -> None:
    token = csrf(client)
    chosen = seeded["dead_key"] + seeded["waiting"][:1]  # the waiting one cannot be retried
    form = {"csrf_token": token, "action": "retry", "scope": "selected", "ids": chosen}
    confirm = client.post("/jobs/bulk", data=form)
    assert confirm.status_code == 200
    assert re.search(r'id="confirm-question">Retry <strong>2</strong> jobs \(3 selected\)',
                     confirm.text)
    assert all(state(app, i) is JobState.DEAD for i in seeded["dead_key"])  # nothing yet
    done = client.post("/jobs/bulk", data={**form, "confirmed": "yes", "expected": "2"})
    assert "Retried 2 of 2 job(s)." in done.text
    assert all(state(app, i) is JobState.AVAILABLE for i in seeded["dead_key"])
    assert state(app, seeded["dead_smtp"][0]) is JobState.DEAD


def test_bulk_on_everything_matching_a_filter(app: Conveyor, client: TestClient,
                                              seeded: dict[str, list[str]]) -> None:
    token = csrf(client)
    form = {"csrf_token": token, "action": "delete", "scope": "filter", "state": "dead",
            "error_type": "KeyError"}
    confirm = client.post("/jobs/bulk", data=form)
    assert re.search(r"Delete <strong>2</strong> jobs \(every job matching state=dead, "
                     r"error type=KeyError\)", confirm.text)
    client.post("/jobs/bulk", data={**form, "confirmed": "yes", "expected": "2"})
    assert app.jobs.count(make_filter(states=["dead"])) == 1
    assert all(app.jobs.get(i) is None for i in seeded["dead_key"])
    # Cancel every waiting job in a queue, by filter.
    cancel = {"csrf_token": token, "action": "cancel", "scope": "filter", "queue": "reports"}
    assert "Cancel <strong>1</strong> job " in client.post("/jobs/bulk", data=cancel).text
    client.post("/jobs/bulk", data={**cancel, "confirmed": "yes", "expected": "1"})
    assert state(app, seeded["waiting"][0]) is JobState.CANCELLED
    assert state(app, seeded["waiting"][1]) is JobState.AVAILABLE


def test_bulk_never_goes_beyond_what_was_confirmed(app: Conveyor, client: TestClient,
                                                   seeded: dict[str, list[str]]) -> None:
    form = {"csrf_token": csrf(client), "action": "retry", "scope": "filter", "state": "dead",
            "confirmed": "yes", "expected": "1"}
    assert "Retried 1 of 3 job(s)." in client.post("/jobs/bulk", data=form).text
    assert app.jobs.count(make_filter(states=["dead"])) == 2


# --- redrive -----------------------------------------------------------------------------------
def test_redrive_previews_then_moves_one_batch(app: Conveyor, client: TestClient,
                                               seeded: dict[str, list[str]]) -> None:
    preview = client.get("/redrive", params={"queue": "mail", "batch": "2"})
    assert re.search(r"<strong>3</strong> jobs match; the next batch moves <strong>2</strong>",
                     preview.text)
    assert app.jobs.count(make_filter(states=["dead"])) == 3  # a preview moves nothing
    response = client.post("/redrive", data={"csrf_token": csrf(client), "queue": "mail",
                                             "batch": "2"})
    assert "Redrove 2 job(s) (batch of 2)." in response.text
    assert app.jobs.count(make_filter(states=["dead"])) == 1
    # Oldest failure first: the KeyError pair died before the SMTP one.
    assert state(app, seeded["dead_smtp"][0]) is JobState.DEAD


# --- queues ------------------------------------------------------------------------------------
def test_pause_and_resume_a_queue(app: Conveyor, client: TestClient,
                                  seeded: dict[str, list[str]]) -> None:
    token = csrf(client)
    client.post("/queues/mail/pause", data={"csrf_token": token})
    stats = {s.queue: s for s in app.jobs.stats()}
    assert stats["mail"].paused
    assert ">paused</span>" in client.get("/").text
    client.post("/queues/mail/resume", data={"csrf_token": token})
    assert not {s.queue: s for s in app.jobs.stats()}["mail"].paused


# --- read-only ---------------------------------------------------------------------------------
def test_read_only_hides_and_refuses_every_action(app: Conveyor,
                                                  seeded: dict[str, list[str]]) -> None:
    with TestClient(create_dashboard(app, read_only=True), client=LOCAL) as client:
        token = csrf(client)
        job_id = seeded["dead_key"][0]
        detail = client.get(f"/jobs/{job_id}").text
        assert 'id="action-retry"' not in detail and "read-only" in detail
        assert 'name="ids"' not in client.get("/jobs?state=dead").text
        assert ">Pause</button>" not in client.get("/").text
        for path, data in [(f"/jobs/{job_id}/retry", {}), ("/jobs/bulk", {"action": "delete"}),
                           ("/redrive", {}), ("/queues/mail/pause", {})]:
            response = client.post(path, data={"csrf_token": token, **data})
            assert response.status_code == 403 and "read-only" in response.text
        assert state(app, job_id) is JobState.DEAD


# --- authentication ----------------------------------------------------------------------------
def test_without_auth_only_loopback_clients_are_served(app: Conveyor) -> None:
    with TestClient(create_dashboard(app), client=REMOTE) as remote:
        response = remote.get("/")
        assert response.status_code == 403 and "only serves localhost" in response.text
        assert remote.get("/metrics").status_code == 403
    with TestClient(create_dashboard(app), client=("::1", 1)) as local6:
        assert local6.get("/").status_code == 200


def test_refuses_to_listen_off_localhost_without_auth() -> None:
    with pytest.raises(InsecureBind, match="0.0.0.0 without authentication"):
        check_bind("0.0.0.0", AuthSettings())
    check_bind("127.0.0.1", AuthSettings())
    check_bind("::1", AuthSettings())
    check_bind("0.0.0.0", AuthSettings.from_strings(token="a-long-enough-token"))
    with pytest.raises(ValueError):
        AuthSettings.from_strings(token="short")
    with pytest.raises(ValueError):
        AuthSettings.from_strings(basic="nopassword")


def test_basic_auth(app: Conveyor) -> None:
    dashboard = create_dashboard(app, basic_auth="ops:s3cret-pass")

    def basic(user: str, password: str) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}

    with TestClient(dashboard, client=REMOTE) as client:
        anonymous = client.get("/")
        assert anonymous.status_code == 401
        assert anonymous.headers["www-authenticate"].startswith('Basic realm="Conveyor"')
        assert client.get("/", headers=basic("ops", "wrong")).status_code == 401
        assert client.get("/", headers=basic("root", "s3cret-pass")).status_code == 401
        page = client.get("/", headers=basic("ops", "s3cret-pass"))
        assert page.status_code == 200 and '<span class="who"> ops</span>' in page.text


def test_bearer_token(app: Conveyor) -> None:
    token = "t0ken-of-sufficient-length"
    with TestClient(create_dashboard(app, token=token), client=REMOTE) as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert client.get("/metrics", headers={"Authorization": f"Bearer {token}"}).status_code == 200


def test_auth_hook_when_mounted(app: Conveyor, seeded: dict[str, list[str]],
                                caplog: pytest.LogCaptureFixture) -> None:
    async def staff_only(request: Request) -> str | None:
        return "alice" if request.headers.get("x-staff") == "alice" else None

    with TestClient(create_dashboard(app, auth=staff_only), client=REMOTE) as client:
        assert client.get("/").status_code == 401
        client.headers["x-staff"] = "alice"
        token = csrf(client)
        job_id = seeded["dead_key"][0]
        with caplog.at_level(logging.INFO, logger="conveyor.dashboard.audit"):
            client.post("/jobs/bulk", data={"csrf_token": token, "action": "retry",
                                            "scope": "filter", "state": "dead",
                                            "q": "user0@example.org", "confirmed": "yes",
                                            "expected": "1"})
            client.post(f"/jobs/{job_id}/delete", data={"csrf_token": token})
    assert state(app, job_id) is JobState.AVAILABLE
    messages = [r.getMessage() for r in caplog.records if r.name == "conveyor.dashboard.audit"]
    assert messages == [
        "alice bulk retry every job matching state=dead, args contain=<17 chars>: "
        "Retried 1 of 1 job(s)",
        f"alice delete job {job_id}: not deleted (only finished jobs can be)",
    ]
    assert not any("user0@" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("target", ["//evil.example/x", "/\\evil.example", "https://evil.example/",
                                    "/jobs\\..\\x"])
def test_actions_never_redirect_off_the_dashboard(client: TestClient, seeded: dict[str, list[str]],
                                                  target: str) -> None:
    job_id = seeded["waiting"][0]
    response = client.post(f"/jobs/{job_id}/cancel", data={"csrf_token": csrf(client),
                                                           "next": target},
                           follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == f"/jobs/{job_id}"
