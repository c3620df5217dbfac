"""The dashboard's Breakers page: state, failures, transitions; open and close by hand
behind the CSRF check, refused when read-only, recorded in the audit trail."""

from __future__ import annotations

from dashboard_fixtures import csrf, local_client
from starlette.testclient import TestClient

from conveyor import Conveyor
from conveyor.web import create_dashboard


def test_open_and_close_a_breaker_from_the_page(app: Conveyor, client: TestClient) -> None:
    app.breaker("stripe", failures=5, window=60, cooldown=30)
    page = client.get("/breakers").text
    assert '<span class="badge h-ok">closed</span>' in page and ">Open</button>" in page
    assert 'aria-current="page">Breakers</a>' in page
    token = csrf(client)
    refused = client.post("/breakers/open?breaker=stripe", data={})
    assert refused.status_code == 403 and "CSRF" in refused.text
    opened = client.post(
        "/breakers/open?breaker=stripe", data={"csrf_token": token}, follow_redirects=False
    )
    assert opened.status_code == 303 and opened.headers["location"].endswith("/breakers")
    page = client.get("/breakers").text
    assert '<span class="badge st-dead">open (by hand)</span>' in page
    assert "closed &rarr; open (opened by hand)" in page and "when closed by hand" in page
    client.post("/breakers/close?breaker=stripe", data={"csrf_token": token})
    assert '<span class="badge h-ok">closed</span>' in client.get("/breakers").text
    audit = client.get("/audit").text
    assert audit.count("breaker stripe") == 2
    unknown = client.post("/breakers/open?breaker=nope", data={"csrf_token": token})
    assert unknown.status_code == 400
    assert (
        client.post("/breakers/smash?breaker=stripe", data={"csrf_token": token}).status_code == 404
    )


def test_read_only_shows_breakers_and_refuses_their_actions(app: Conveyor) -> None:
    app.breaker("stripe")
    with local_client(create_dashboard(app, read_only=True)) as client:
        token = csrf(client)
        page = client.get("/breakers").text
        assert "stripe" in page and ">Open</button>" not in page
        response = client.post("/breakers/open?breaker=stripe", data={"csrf_token": token})
        assert response.status_code == 403 and "read-only" in response.text


def test_no_breaker(client: TestClient) -> None:
    assert "No circuit breaker." in client.get("/breakers").text
