"""Actions: CSRF, read-only, auth, bulk with confirmation, redrive, pause, audit log."""

from __future__ import annotations

import base64
import logging
import re

import pytest
from dashboard_fixtures import LOCAL, LOCAL_BASE_URL, csrf, job_url, local_client, queue_url
from starlette.requests import Request
from starlette.testclient import TestClient

from conveyor import Conveyor
from conveyor.admin.api import make_filter
from conveyor.model.job import JobState
from conveyor.web import InsecureBind, check_bind, create_dashboard
from conveyor.web.security import AuthSettings

REMOTE = ("203.0.113.7", 40000)


def state(app: Conveyor, job_id: str) -> JobState:
    job = app.jobs.get(job_id)
    assert job is not None
    return job.state


# --- CSRF ------------------------------------------------------------------------------------
OWN_ORIGIN = LOCAL_BASE_URL


def test_actions_without_the_csrf_token_are_refused(
    app: Conveyor, client: TestClient, seeded: dict[str, list[str]]
) -> None:
    job_id = seeded["dead_key"][0]
    token = csrf(client)
    no_token = client.post(job_url(job_id, "retry"), data={})
    wrong = client.post(job_url(job_id, "retry"), data={"csrf_token": token[::-1]})
    # A cross-site form carries no cookie: the token alone is not enough either.
    foreign = local_client(client.app).post(job_url(job_id, "retry"), data={"csrf_token": token})
    for response in (no_token, wrong, foreign):
        assert response.status_code == 403 and "CSRF" in response.text
    assert state(app, job_id) is JobState.DEAD
    ok = client.post(job_url(job_id, "retry"), data={"csrf_token": token}, follow_redirects=False)
    assert ok.status_code == 303
    assert state(app, job_id) is JobState.AVAILABLE
    # htmx requests send the token in a header instead.
    other = seeded["dead_key"][1]
    assert (
        client.post(
            job_url(other, "retry"), headers={"X-CSRF-Token": token}, follow_redirects=False
        ).status_code
        == 303
    )
    assert state(app, other) is JobState.AVAILABLE


def test_a_script_takes_the_cookie_and_token_from_any_page(
    app: Conveyor, client: TestClient, seeded: dict[str, list[str]]
) -> None:
    page = client.get("/workers")
    token = page.headers["x-csrf-token"]
    assert f'name="csrf_token" value="{token}"' not in page.text  # no form on that page...
    assert f'"X-CSRF-Token": "{token}"' in page.text  # ...but the same token
    job_id = seeded["dead_key"][0]
    done = client.post(
        job_url(job_id, "retry"), headers={"X-CSRF-Token": token}, follow_redirects=False
    )
    assert done.status_code == 303 and state(app, job_id) is JobState.AVAILABLE


def test_a_token_is_good_only_for_the_user_it_was_made_for(
    app: Conveyor, seeded: dict[str, list[str]]
) -> None:
    def staff(request: Request) -> str | None:
        return request.headers.get("x-staff") or None

    job_id = seeded["dead_key"][0]
    with TestClient(create_dashboard(app, auth=staff), client=REMOTE) as client:
        token = csrf_as(client, "alice")
        client.headers["x-staff"] = "bob"
        refused = client.post(job_url(job_id, "retry"), data={"csrf_token": token})
        assert refused.status_code == 403 and "CSRF" in refused.text
        assert state(app, job_id) is JobState.DEAD
        client.headers["x-staff"] = "alice"
        assert (
            client.post(
                job_url(job_id, "retry"), data={"csrf_token": token}, follow_redirects=False
            ).status_code
            == 303
        )
    assert state(app, job_id) is JobState.AVAILABLE


def csrf_as(client: TestClient, user: str) -> str:
    client.headers["x-staff"] = user
    return csrf(client)


def test_a_cookie_planted_by_another_page_makes_no_valid_token(
    app: Conveyor, seeded: dict[str, list[str]]
) -> None:
    """A page on another port of this host can set cookies for it (cookies ignore ports):
    whatever it plants, it cannot compute a token the dashboard signed."""
    dashboard = create_dashboard(app)
    dead = seeded["dead_key"] + seeded["dead_smtp"]
    form = {
        "action": "delete",
        "scope": "filter",
        "state": "dead",
        "confirmed": "yes",
        "expected": "3",
    }
    planted = [
        ("conveyor_csrf", "x1", "x1"),  # the old double-submit cookie
        ("conveyor_session", "s" * 43, "x1"),  # a session id of its choosing
        ("conveyor_session", "s" * 43, "s" * 43),
    ]
    for name, value, token in planted:
        with local_client(dashboard) as attacker:
            attacker.cookies.set(name, value)
            refused = attacker.post("/jobs/bulk", data={**form, "csrf_token": token})
            assert refused.status_code == 403 and "CSRF" in refused.text
    assert [state(app, i) for i in dead] == [JobState.DEAD] * 3


def test_a_token_is_good_only_for_its_own_session(
    app: Conveyor, seeded: dict[str, list[str]]
) -> None:
    dashboard = create_dashboard(app)
    job_id = seeded["dead_key"][0]
    with local_client(dashboard) as mine, local_client(dashboard) as theirs:
        their_token = csrf(theirs)
        csrf(mine)  # a session of my own
        refused = mine.post(job_url(job_id, "retry"), data={"csrf_token": their_token})
        assert refused.status_code == 403
        assert state(app, job_id) is JobState.DEAD
        assert (
            theirs.post(
                job_url(job_id, "retry"), data={"csrf_token": their_token}, follow_redirects=False
            ).status_code
            == 303
        )
    assert state(app, job_id) is JobState.AVAILABLE


def test_replicas_that_share_a_secret_accept_each_others_tokens(
    app: Conveyor, seeded: dict[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = seeded["waiting"][0]

    def cancel_on(second: object, first: object) -> int:
        with local_client(first) as one:
            token = csrf(one)
            with local_client(second) as two:
                two.cookies = one.cookies
                return two.post(
                    job_url(job_id, "cancel"), data={"csrf_token": token}, follow_redirects=False
                ).status_code

    # Each process has its own random secret unless told: a token from one is refused.
    assert cancel_on(create_dashboard(app), create_dashboard(app)) == 403
    assert state(app, job_id) is JobState.AVAILABLE
    monkeypatch.setenv("CONVEYOR_DASHBOARD_SECRET", "a-secret-for-every-replica")
    assert cancel_on(create_dashboard(app), create_dashboard(app)) == 303
    assert state(app, job_id) is JobState.CANCELLED
    other = seeded["waiting"][1]
    job_id = other
    assert (
        cancel_on(
            create_dashboard(app, secret="another-shared-secret"),
            create_dashboard(app, secret="another-shared-secret"),
        )
        == 303
    )
    assert state(app, other) is JobState.CANCELLED
    with pytest.raises(ValueError, match="at least 16"):
        create_dashboard(app, secret="short")


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://127.0.0.1:9999"},  # another port: another origin
        {"Origin": "http://localhost:8080"},  # another host name
        {"Origin": "https://127.0.0.1:8080"},  # another scheme
        {"Origin": "null"},  # sandboxed or opaque
        {"Sec-Fetch-Site": "same-site"},  # what a sibling port is
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "none"},
        {"Origin": OWN_ORIGIN, "Sec-Fetch-Site": "same-site"},
    ],
    ids=lambda h: " ".join(f"{k}={v}" for k, v in h.items()),
)
def test_cross_origin_actions_are_refused_even_with_a_valid_token(
    app: Conveyor, client: TestClient, seeded: dict[str, list[str]], headers: dict[str, str]
) -> None:
    job_id = seeded["dead_key"][0]
    refused = client.post(
        job_url(job_id, "retry"), data={"csrf_token": csrf(client)}, headers=headers
    )
    assert refused.status_code == 403 and "cross-origin" in refused.text
    assert state(app, job_id) is JobState.DEAD


def test_same_origin_and_trusted_origins_are_served(
    app: Conveyor, client: TestClient, seeded: dict[str, list[str]]
) -> None:
    first, second = seeded["dead_key"]
    own = {"Origin": OWN_ORIGIN, "Sec-Fetch-Site": "same-origin"}
    assert (
        client.post(
            job_url(first, "retry"),
            data={"csrf_token": csrf(client)},
            headers=own,
            follow_redirects=False,
        ).status_code
        == 303
    )
    assert state(app, first) is JobState.AVAILABLE
    # Behind a proxy that ends TLS, the browser's origin is not the one the app sees.
    proxied = create_dashboard(app, trusted_origins=["https://ops.example.org"])
    with local_client(proxied) as behind:
        headers = {"Origin": "https://ops.example.org", "Sec-Fetch-Site": "same-origin"}
        assert (
            behind.post(
                job_url(second, "retry"),
                data={"csrf_token": csrf(behind)},
                headers=headers,
                follow_redirects=False,
            ).status_code
            == 303
        )
        assert (
            behind.post(
                job_url(second, "retry"),
                data={"csrf_token": csrf(behind)},
                headers={"Origin": "https://evil.example.org"},
            ).status_code
            == 403
        )
    assert state(app, second) is JobState.AVAILABLE
    with pytest.raises(ValueError, match="origin"):
        create_dashboard(app, trusted_origins=["ops.example.org/jobs"])


def test_without_auth_only_loopback_host_names_are_served(app: Conveyor) -> None:
    """A page whose DNS name was rebound to 127.0.0.1 is same-origin with itself, so
    Origin checks cannot stop it; the name it uses (Host) can."""
    with TestClient(
        create_dashboard(app), client=LOCAL, base_url="http://rebound.example:8080"
    ) as rebound:
        refused = rebound.get("/")
        assert refused.status_code == 403 and "loopback" in refused.text
    for base in ("http://localhost:8080", "http://127.0.0.1", "http://[::1]:8080"):
        with TestClient(create_dashboard(app), client=LOCAL, base_url=base) as local:
            assert local.get("/").status_code == 200
    token = "a-long-enough-token-value"
    with TestClient(
        create_dashboard(app, token=token), client=REMOTE, base_url="http://jobs.example.org"
    ) as named:
        assert named.get("/", headers={"Authorization": f"Bearer {token}"}).status_code == 200


def test_the_flash_message_says_what_happened(
    client: TestClient, seeded: dict[str, list[str]]
) -> None:
    job_id = seeded["dead_key"][0]
    page = client.post(job_url(job_id, "retry"), data={"csrf_token": csrf(client)})
    assert f"Job {job_id}: sent back to its queue." in page.text
    assert "sent back" not in client.get(job_url(job_id)).text  # shown once


def test_a_planted_flash_cookie_puts_no_words_on_the_page(client: TestClient) -> None:
    client.cookies.set("conveyor_flash", "Session expired: log in again at evil.example")
    page = client.get("/")
    assert page.status_code == 200 and "evil.example" not in page.text
    assert 'class="flash"' not in page.text


# --- one job ---------------------------------------------------------------------------------
def test_cancel_and_delete_one_job(
    app: Conveyor, client: TestClient, seeded: dict[str, list[str]]
) -> None:
    token = csrf(client)
    waiting = seeded["waiting"][0]
    client.post(job_url(waiting, "cancel"), data={"csrf_token": token})
    assert state(app, waiting) is JobState.CANCELLED
    dead = seeded["dead_smtp"][0]
    response = client.post(
        job_url(dead, "delete"), data={"csrf_token": token}, follow_redirects=False
    )
    assert response.headers["location"] == "/jobs"
    assert app.jobs.get(dead) is None
    # An active job is never deleted.
    active = seeded["waiting"][1]
    client.post(job_url(active, "delete"), data={"csrf_token": token})
    assert state(app, active) is JobState.AVAILABLE


# --- bulk --------------------------------------------------------------------------------------
def test_bulk_on_a_selection_asks_first_with_the_count(
    app: Conveyor, client: TestClient, seeded: dict[str, list[str]]
) -> None:
    token = csrf(client)
    chosen = seeded["dead_key"] + seeded["waiting"][:1]  # the waiting one cannot be retried
    form = {"csrf_token": token, "action": "retry", "scope": "selected", "ids": chosen}
    confirm = client.post("/jobs/bulk", data=form)
    assert confirm.status_code == 200
    assert re.search(
        r'id="confirm-question">Retry <strong>2</strong> jobs \(3 selected\)', confirm.text
    )
    assert all(state(app, i) is JobState.DEAD for i in seeded["dead_key"])  # nothing yet
    done = client.post("/jobs/bulk", data={**form, "confirmed": "yes", "expected": "2"})
    assert "Retried 2 of 2 job(s)." in done.text
    assert all(state(app, i) is JobState.AVAILABLE for i in seeded["dead_key"])
    assert state(app, seeded["dead_smtp"][0]) is JobState.DEAD


def test_bulk_on_everything_matching_a_filter(
    app: Conveyor, client: TestClient, seeded: dict[str, list[str]]
) -> None:
    token = csrf(client)
    form = {
        "csrf_token": token,
        "action": "delete",
        "scope": "filter",
        "state": "dead",
        "error_type": "KeyError",
    }
    confirm = client.post("/jobs/bulk", data=form)
    assert re.search(
        r"Delete <strong>2</strong> jobs \(every job matching state=dead, "
        r"error type=KeyError\)",
        confirm.text,
    )
    client.post("/jobs/bulk", data={**form, "confirmed": "yes", "expected": "2"})
    assert app.jobs.count(make_filter(states=["dead"])) == 1
    assert all(app.jobs.get(i) is None for i in seeded["dead_key"])
    # Cancel every waiting job in a queue, by filter.
    cancel = {"csrf_token": token, "action": "cancel", "scope": "filter", "queue": "reports"}
    assert "Cancel <strong>1</strong> job " in client.post("/jobs/bulk", data=cancel).text
    client.post("/jobs/bulk", data={**cancel, "confirmed": "yes", "expected": "1"})
    assert state(app, seeded["waiting"][0]) is JobState.CANCELLED
    assert state(app, seeded["waiting"][1]) is JobState.AVAILABLE


def test_bulk_never_goes_beyond_what_was_confirmed(
    app: Conveyor, client: TestClient, seeded: dict[str, list[str]]
) -> None:
    form = {
        "csrf_token": csrf(client),
        "action": "retry",
        "scope": "filter",
        "state": "dead",
        "confirmed": "yes",
        "expected": "1",
    }
    assert "Retried 1 of 3 job(s)." in client.post("/jobs/bulk", data=form).text
    assert app.jobs.count(make_filter(states=["dead"])) == 2


# --- redrive -----------------------------------------------------------------------------------
def test_redrive_previews_then_moves_one_batch(
    app: Conveyor, client: TestClient, seeded: dict[str, list[str]]
) -> None:
    preview = client.get("/redrive", params={"queue": "mail", "batch": "2"})
    assert re.search(
        r"<strong>3</strong> jobs match; the next batch moves <strong>2</strong>", preview.text
    )
    assert app.jobs.count(make_filter(states=["dead"])) == 3  # a preview moves nothing
    response = client.post(
        "/redrive", data={"csrf_token": csrf(client), "queue": "mail", "batch": "2"}
    )
    assert "Redrove 2 job(s) (batch of 2)." in response.text
    assert app.jobs.count(make_filter(states=["dead"])) == 1
    # Oldest failure first: the KeyError pair died before the SMTP one.
    assert state(app, seeded["dead_smtp"][0]) is JobState.DEAD


# --- queues ------------------------------------------------------------------------------------
def test_pause_and_resume_a_queue(
    app: Conveyor, client: TestClient, seeded: dict[str, list[str]]
) -> None:
    token = csrf(client)
    client.post(queue_url("mail", "pause"), data={"csrf_token": token})
    stats = {s.queue: s for s in app.jobs.stats()}
    assert stats["mail"].paused
    assert ">paused</span>" in client.get("/").text
    client.post(queue_url("mail", "resume"), data={"csrf_token": token})
    assert not {s.queue: s for s in app.jobs.stats()}["mail"].paused


# --- read-only ---------------------------------------------------------------------------------
def test_read_only_hides_and_refuses_every_action(
    app: Conveyor, seeded: dict[str, list[str]]
) -> None:
    with local_client(create_dashboard(app, read_only=True)) as client:
        token = csrf(client)
        job_id = seeded["dead_key"][0]
        detail = client.get(job_url(job_id)).text
        assert 'id="action-retry"' not in detail and "read-only" in detail
        assert 'name="ids"' not in client.get("/jobs?state=dead").text
        assert ">Pause</button>" not in client.get("/").text
        for path, data in [
            (job_url(job_id, "retry"), {}),
            ("/jobs/bulk", {"action": "delete"}),
            ("/redrive", {}),
            (queue_url("mail", "pause"), {}),
        ]:
            response = client.post(path, data={"csrf_token": token, **data})
            assert response.status_code == 403 and "read-only" in response.text
        assert state(app, job_id) is JobState.DEAD


# --- authentication ----------------------------------------------------------------------------
def test_without_auth_only_loopback_clients_are_served(app: Conveyor) -> None:
    with TestClient(create_dashboard(app), client=REMOTE) as remote:
        response = remote.get("/")
        assert response.status_code == 403 and "only serves localhost" in response.text
        assert remote.get("/metrics").status_code == 403
    with TestClient(create_dashboard(app), client=("::1", 1), base_url="http://[::1]") as local6:
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
        return {
            "Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        }

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
        assert (
            client.get("/metrics", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        )


def test_auth_hook_when_mounted(
    app: Conveyor, seeded: dict[str, list[str]], caplog: pytest.LogCaptureFixture
) -> None:
    async def staff_only(request: Request) -> str | None:
        return "alice" if request.headers.get("x-staff") == "alice" else None

    with TestClient(create_dashboard(app, auth=staff_only), client=REMOTE) as client:
        assert client.get("/").status_code == 401
        client.headers["x-staff"] = "alice"
        token = csrf(client)
        job_id = seeded["dead_key"][0]
        with caplog.at_level(logging.INFO, logger="conveyor.dashboard.audit"):
            client.post(
                "/jobs/bulk",
                data={
                    "csrf_token": token,
                    "action": "retry",
                    "scope": "filter",
                    "state": "dead",
                    "q": "user0@example.org",
                    "confirmed": "yes",
                    "expected": "1",
                },
            )
            client.post(job_url(job_id, "delete"), data={"csrf_token": token})
    assert state(app, job_id) is JobState.AVAILABLE
    messages = [r.getMessage() for r in caplog.records if r.name == "conveyor.dashboard.audit"]
    assert messages == [
        "alice bulk retry every job matching state=dead, args contain=<17 chars>: "
        "Retried 1 of 1 job(s)",
        f"alice delete job {job_id}: not deleted (only finished jobs can be)",
    ]
    assert not any("user0@" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "target", ["//evil.example/x", "/\\evil.example", "https://evil.example/", "/jobs\\..\\x"]
)
def test_actions_never_redirect_off_the_dashboard(
    client: TestClient, seeded: dict[str, list[str]], target: str
) -> None:
    job_id = seeded["waiting"][0]
    response = client.post(
        job_url(job_id, "cancel"),
        data={"csrf_token": csrf(client), "next": target},
        follow_redirects=False,
    )
    assert response.status_code == 303 and response.headers["location"] == job_url(job_id)
