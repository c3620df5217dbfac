"""`app.task`'s option groups (conveyor.rules.task_options): each option has one
spelling, and a keyword that moved into a group says where it went."""

from __future__ import annotations

from typing import Any

import pytest

from conveyor import Conveyor, Limits, PayloadOptions, RetryBudget, RetryOptions
from conveyor.model.errors import ConfigurationError


def test_the_groups_become_the_tasks_settings() -> None:
    app = Conveyor("memory://task-options")
    app.breaker("stripe")

    @app.task(
        timeout=5,
        retry_on=(ConnectionError,),
        retry=RetryOptions(backoff_base=2, backoff_cap=30, budget=RetryBudget(share=0.2)),
        limits=Limits(concurrency_key="user:{user_id}", concurrency_limit=2, breaker="stripe"),
        payload=PayloadOptions(max_payload=4096, redact=("card",), hygiene="off"),
    )
    def charge(user_id: int, card: str) -> None: ...

    d = charge.defaults
    assert (d.timeout, d.retry.base, d.retry.cap, d.retry.budget) == (
        5.0,
        2.0,
        30.0,
        RetryBudget(share=0.2),
    )
    assert d.retry.retry_on == (ConnectionError,)
    assert d.concurrency is not None and d.concurrency.limit == 2
    assert d.rate_key == "stripe"
    assert (d.max_payload, d.redact, d.payload_hygiene) == (4096, frozenset({"card"}), "off")


@pytest.mark.parametrize(
    ("option", "home"),
    [
        ("soft_time_limit", "timeout="),
        ("backoff_base", "retry=RetryOptions(backoff_base=...)"),
        ("max_running", "limits=Limits(max_running=...)"),
        ("redact", "payload=PayloadOptions(redact=...)"),
    ],
)
def test_a_moved_keyword_names_its_new_home(option: str, home: str) -> None:
    app = Conveyor("memory://task-options")
    options: dict[str, Any] = {option: 1}
    with pytest.raises(
        TypeError, match=f"{option}.*it is {home.replace('(', '.').replace(')', '.')}"
    ):
        app.task(name="t", **options)(lambda: None)


def test_a_group_of_the_wrong_kind_is_refused() -> None:
    app = Conveyor("memory://task-options")
    with pytest.raises(ConfigurationError, match="Limits"):
        app.task(name="t", limits=RetryOptions())(lambda: None)  # type: ignore[call-overload]
