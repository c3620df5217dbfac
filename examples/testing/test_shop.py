"""The shop's tests: the route enqueues through Starlette's test client, the test
drains. No database, no Redis, no worker process."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
import shop
from starlette.testclient import TestClient

from conveyor import Conveyor, JobState
from conveyor.testing import TestClock, assert_enqueued, drain, inline, refute_enqueued


@pytest.fixture(autouse=True)
def empty_shop() -> Iterator[None]:
    yield
    shop.ORDERS.clear()
    shop.OUTBOX.clear()


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(shop.web) as client:
        yield client


def test_an_order_enqueues_its_receipt(client: TestClient, conveyor_app: Conveyor) -> None:
    assert conveyor_app is shop.app  # the shop's own app, on a memory backend for this test
    response = client.post("/orders", json={"id": 7, "email": "ada@example.org"})
    assert response.status_code == 201
    assert_enqueued(shop.send_receipt, 7, email="ada@example.org")
    assert_enqueued(shop.send_receipt, email="ada@example.org")  # partial match
    refute_enqueued(shop.thank_big_spender)
    assert shop.OUTBOX == []  # nothing runs until the test drains


def test_draining_runs_the_receipt_through_its_retries(
    client: TestClient, conveyor_app: Conveyor, conveyor_clock: TestClock
) -> None:
    client.post("/orders", json={"id": 120, "email": "bob@example.org"})
    start = conveyor_clock.now
    drained = drain(conveyor_app)
    assert [(a.task, a.attempt, a.outcome) for a in drained.attempts] == [
        ("shop.send_receipt", 1, JobState.RETRYABLE),
        ("shop.send_receipt", 2, JobState.RETRYABLE),
        ("shop.send_receipt", 3, JobState.COMPLETED),
        ("shop.thank_big_spender", 1, JobState.COMPLETED),
    ]
    assert drained.results(shop.send_receipt) == ["sent on attempt 3"]
    assert shop.OUTBOX == [
        "to bob@example.org: receipt for order 120",
        "to bob@example.org: thank you!",
    ]
    assert conveyor_clock.now - start <= 120  # the backoffs, skipped by the test clock


def test_a_receipt_waits_for_its_retry(client: TestClient, conveyor_app: Conveyor) -> None:
    client.post("/orders", json={"id": 8, "email": "eve@example.org"})
    first = drain(conveyor_app, advance=timedelta(seconds=0))  # what is due now, no waits
    assert [a.outcome for a in first.attempts] == [JobState.RETRYABLE]
    assert_enqueued(shop.send_receipt, 8)  # waiting for its retry
    assert drain(conveyor_app).states == {JobState.COMPLETED: 1}


def test_inline_mode_runs_the_job_inside_the_request(
    client: TestClient, conveyor_app: Conveyor
) -> None:
    with inline(conveyor_app):
        client.post("/orders", json={"id": 9, "email": "kim@example.org"})
    assert shop.OUTBOX == ["to kim@example.org: receipt for order 9"]
