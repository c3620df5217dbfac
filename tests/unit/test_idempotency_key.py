"""A task's idempotency key template: checked against the signature when the task is
registered, rendered into the job's meta at enqueue."""

from __future__ import annotations

from pathlib import Path

import pytest

from conveyor import Conveyor
from conveyor.model.errors import ConfigurationError, InvalidJob
from conveyor.rules.idempotency_key import IDEMPOTENCY_META_KEY, key_of


@pytest.fixture
def app(tmp_path: Path) -> Conveyor:
    return Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}")


def test_fields_render_from_positional_keyword_and_default_arguments(app: Conveyor) -> None:
    @app.task(idempotency_key="charge:{order_id}:{currency}:{amount:.2f}")
    def charge(order_id: int, amount: float, currency: str = "EUR") -> None: ...

    assert charge.message(42, 5).meta == {IDEMPOTENCY_META_KEY: "charge:42:EUR:5.00"}
    assert (
        charge.message(amount=5, order_id=42, currency="USD").meta[IDEMPOTENCY_META_KEY]
        == "charge:42:USD:5.00"
    )


def test_fields_may_index_into_json_arguments(app: Conveyor) -> None:
    @app.task(idempotency_key="mail:{message[id]}:{recipients[0]}")
    def send(message: dict[str, object], recipients: list[str]) -> None: ...

    job = send.message({"id": "m-7", "body": "hi"}, ["ana@example.org"])
    assert job.meta[IDEMPOTENCY_META_KEY] == "mail:m-7:ana@example.org"
    with pytest.raises(InvalidJob, match="idempotency_key.*KeyError"):
        send.message({"body": "no id"}, ["ana@example.org"])
    with pytest.raises(InvalidJob, match="idempotency_key.*IndexError"):
        send.message({"id": "m-8"}, [])


@pytest.mark.parametrize(
    ("template", "says"),
    [
        ("charge:{order}", "names no parameter of the task; its parameters: order_id"),
        ("charge:{order_id.pk}", "reads an attribute"),
        ("charge", "names no argument"),
        ("charge:{}", "names no parameter"),
        ("charge:{order_id", "not a format template"),
        ("", "non-empty template"),
    ],
)
def test_a_template_the_signature_cannot_fill_is_refused_at_registration(
    app: Conveyor, template: str, says: str
) -> None:
    def charge(order_id: int) -> None: ...

    with pytest.raises(ConfigurationError, match=f"task .*charge: .*{says}"):
        app.task(idempotency_key=template)(charge)
    assert app.tasks == {}


def test_a_rendered_key_that_cannot_be_stored_fails_the_enqueue(app: Conveyor) -> None:
    @app.task(idempotency_key="charge:{note}")
    def charge(note: str) -> None: ...

    with pytest.raises(InvalidJob, match="idempotency_key"):
        charge.message("x" * 300)
    with pytest.raises(InvalidJob, match="idempotency_key"):
        charge.message("two\nlines")


def test_the_template_wins_over_meta_given_at_enqueue_and_keeps_the_rest(app: Conveyor) -> None:
    @app.task(idempotency_key="charge:{order_id}")
    def charge(order_id: int) -> None: ...

    job = charge.options(meta={IDEMPOTENCY_META_KEY: "forged", "source": "api"}).message(1)
    assert job.meta == {IDEMPOTENCY_META_KEY: "charge:1", "source": "api"}


def test_without_a_template_the_key_is_the_job_id(app: Conveyor) -> None:
    @app.task
    def ping() -> None: ...

    job = ping.message()
    assert job.meta == {} and key_of(job.id, job.meta) == job.id
    assert key_of("j1", {IDEMPOTENCY_META_KEY: 7}) == "j1"  # not text: not a key
