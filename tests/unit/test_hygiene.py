"""Payload hygiene (conveyor.rules.hygiene): which keys and values look like secrets,
warn once per task and argument, reject on demand, and mask wherever jobs are shown."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor, PayloadOptions
from conveyor.cli.render import job_detail, job_json
from conveyor.model.errors import ConfigurationError, SecretInPayload
from conveyor.rules.hygiene import credential_kind, secret_key
from conveyor.web.views import args_preview, payload_json

JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
    "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
)
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow...\n-----END RSA PRIVATE KEY-----"


@pytest.mark.parametrize(
    "key",
    [
        "password",
        "db_password",
        "apiKey",
        "API_KEY",
        "api-key",
        "auth_token",
        "client_secret",
        "Authorization",
        "private_key",
        "accessKey",
        "refresh_tokens",
    ],
)
def test_secret_keys(key: str) -> None:
    assert secret_key(key)


@pytest.mark.parametrize(
    "key",
    [
        "user_id",
        "tokenizer",
        "token_count",
        "token_type",
        "password_length",
        "secret_name",
        "token_id",
        "keyword",
        "api_version",
        "key",
        "monkey",
        "passage",
        "author",
        "token_expires_at",
        "secretary",
    ],
)
def test_ordinary_keys(key: str) -> None:
    assert not secret_key(key)


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (JWT, "a JWT"),
        (f"Bearer {JWT}", "a JWT"),
        (PEM, "a PEM private key"),
        ("4111 1111 1111 1111", "a card number (Luhn)"),
        ("5500-0000-0000-0004", "a card number (Luhn)"),
        ("378282246310005", "a card number (Luhn)"),
        ("AKIAIOSFODNN7EXAMPLE", "an AWS access key id"),
    ],
)
def test_credential_values(value: str, kind: str) -> None:
    assert credential_kind(value) == kind


@pytest.mark.parametrize(
    "value",
    [
        "4111 1111 1111 1112",  # fails Luhn
        "9111111111111119",  # passes Luhn, no card network starts with 9
        "2024-01-01",
        "hello world",
        "eyJ",
        "0123456789",
        "order 4111111111111111 shipped",
        "-----BEGIN PUBLIC KEY-----",
    ],
)
def test_ordinary_values(value: str) -> None:
    assert credential_kind(value) is None


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Conveyor]:
    app = Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}")
    yield app
    app.close()


def test_warns_once_per_task_and_argument_never_showing_the_value(
    app: Conveyor, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(name="login")
    def login(user_id: int, password: str, note: str = "", tokenizer: str = "") -> None: ...

    with caplog.at_level(logging.WARNING, logger="conveyor.hygiene"):
        for i in range(5):
            login.enqueue(i, "hunter2", tokenizer="bpe")
        login.enqueue(9, "hunter2", note=JWT)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "'password'" in lines[0] and "its name 'password'" in lines[0]
    assert "'note'" in lines[1] and "a JWT" in lines[1]
    assert not any("hunter2" in line or JWT in line for line in lines)
    assert not any("user_id" in line or "tokenizer" in line for line in lines)
    assert app.jobs.count() == 6  # warn mode stores them


def test_reject_mode_refuses_and_stores_nothing(tmp_path: Path) -> None:
    app = Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}", payload_hygiene="reject")
    try:

        @app.task(name="pay")
        def pay(order: dict[str, object]) -> None: ...

        @app.task(name="relaxed", payload=PayloadOptions(hygiene="off"))
        def relaxed(token: str) -> None: ...

        with pytest.raises(SecretInPayload) as caught:
            app.enqueue_many([pay.message({"id": 1}), pay.message({"card": "4111111111111111"})])
        assert "'order.card'" in str(caught.value) and "card number" in str(caught.value)
        assert "4111" not in str(caught.value)
        assert app.jobs.count() == 0
        pay.enqueue({"id": 1, "user_id": 7})
        relaxed.enqueue("abc")
        assert app.jobs.count() == 2
    finally:
        app.close()


def test_bad_hygiene_options(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="payload_hygiene='loud'"):
        Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}", payload_hygiene="loud")
    app = Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}")
    with pytest.raises(ConfigurationError, match="redact= takes a tuple"):
        app.task(name="x", payload=PayloadOptions(redact="password"))(lambda password: None)


def test_redacted_and_flagged_arguments_are_masked_in_every_view(app: Conveyor) -> None:
    @app.task(name="charge", payload=PayloadOptions(redact=("card_ref", "pin")))
    def charge(
        card_ref: str,
        amount: int,
        pin: str = "",
        profile: dict[str, object] | None = None,
        token_count: int = 0,
    ) -> None: ...

    handle = charge.enqueue(
        "tok_visa_4242",
        1200,
        pin="1234",
        token_count=3,
        profile={"user_id": 7, "api_key": "k-123", "jwt": JWT},
    )
    job = app.jobs.get(handle.id)
    assert (
        job is not None and job.args[0] == "tok_visa_4242"
    )  # stored as given: the worker needs it
    for shown in (
        job_detail(job),
        str(job_json(job)),
        payload_json(job),
        args_preview(job, 10_000),
    ):
        assert "tok_visa_4242" not in shown and "1234" not in shown
        assert "k-123" not in shown and JWT not in shown
        assert "1200" in shown and "***" in shown
    data = job_json(job)
    assert data["args"] == ["***", 1200]
    assert data["kwargs"] == {
        "pin": "***",
        "token_count": 3,
        "profile": {"user_id": 7, "api_key": "***", "jwt": "***"},
    }
