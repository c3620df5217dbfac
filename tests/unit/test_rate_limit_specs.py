"""Rate limit declarations (conveyor.rules.rate_limits): parsing, bad input, the bucket's
arithmetic."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import timedelta

import pytest

from conveyor import Conveyor, Limits
from conveyor.backends.claiming import ClaimBuckets
from conveyor.cli.render import job_detail
from conveyor.model.errors import ConfigurationError
from conveyor.model.job import Job, JobState
from conveyor.rules.rate_limits import (
    Limit,
    RateLimit,
    RateLimitRegistry,
    describe,
    parse_limit,
    refill,
)


@pytest.mark.parametrize(
    ("spec", "rate", "burst"),
    [
        ("100/s", 100.0, 100),
        ("10/m", 10 / 60, 10),
        ("1000/h", 1000 / 3600, 1000),
        ("5/10s", 0.5, 5),
        ("3 / min", 3 / 60, 3),
        ("2/hours", 2 / 3600, 2),
        ("1/d", 1 / 86400, 1),
    ],
)
def test_specs(spec: str, rate: float, burst: int) -> None:
    limit = RateLimitRegistry().declare("k", spec)
    assert (limit.rate, limit.burst) == (pytest.approx(rate), burst)


def test_a_limit_object_and_its_burst() -> None:
    registry = RateLimitRegistry()
    assert registry.declare("a", Limit(100, per=timedelta(seconds=1), burst=20)) == RateLimit(
        "a", 100.0, 20
    )
    assert registry.declare("b", "100/s", burst=5) == RateLimit("b", 100.0, 5)
    assert registry.declare("c", Limit(6, per=60)) == RateLimit("c", 0.1, 6)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("100", "count/unit"),
        ("100/week", "unit is s, m, h or d"),
        ("0/s", "above 0"),
        ("-1/s", "count/unit"),
        ("ten/s", "count/unit"),
        (100, "count/unit"),
        ("2000000/s", "at most 1000000 a second"),
        ("5/0s", "positive"),
    ],
)
def test_bad_specs_say_what_is_expected(spec: object, says: str) -> None:
    with pytest.raises(ConfigurationError, match=says):
        parse_limit(spec)  # type: ignore[arg-type]


def test_bad_bursts_and_names() -> None:
    with pytest.raises(ConfigurationError, match="burst is a whole number"):
        parse_limit("10/s", burst=0)
    with pytest.raises(ConfigurationError, match="burst is a whole number"):
        parse_limit(Limit(10, burst=2.5))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="rate_key"):
        RateLimitRegistry().declare("", "10/s")


def test_a_task_naming_an_undeclared_bucket_is_refused() -> None:
    app = Conveyor("memory://")
    with pytest.raises(ConfigurationError, match="rate_key 'stripe' is not declared"):

        @app.task(limits=Limits(rate_key="stripe"))
        def charge() -> None: ...

    # Declared with the task itself, the bucket is shared by name.
    @app.task(limits=Limits(rate_key="stripe", rate_limit="10/s"))
    def refund() -> None: ...

    assert app.rate_limits.get("stripe") == RateLimit("stripe", 10.0, 10)


def test_refill_and_the_claims_buckets() -> None:
    limit = RateLimit("k", rate=2.0, burst=5)
    assert refill(0.0, 100.0, 101.0, limit) == 2.0
    assert refill(4.0, 100.0, 110.0, limit) == 5.0  # capped at the burst
    assert refill(1.0, 100.0, 90.0, limit) == 1.0  # a clock that went back adds nothing
    buckets = ClaimBuckets([limit], {"k": (0.5, 100.0)}, now=100.0)
    assert buckets.allowed("k") == 0
    assert buckets.next_token_at(["k"]) == 100.25
    assert buckets.next_token_at([]) is None
    fresh = ClaimBuckets([limit], {}, now=100.0)  # never stored: full
    assert fresh.choose(10, [((i,), i, "k") for i in range(10)]) == [0, 1, 2, 3, 4]
    assert fresh.allowed("k") == 0


def test_jobs_show_says_what_holds_a_job_back() -> None:
    app = Conveyor("memory://")
    app.rate_limit("stripe", "20/s", burst=5)
    waiting = Job(
        id="j1",
        task="charge",
        queue="default",
        payload='{"args":[],"kwargs":{}}',
        state=JobState.AVAILABLE,
        rate_key="stripe",
    )
    fields = dict(
        re.split(r"  +", line, maxsplit=1)
        for line in job_detail(waiting, (), limits=app.rate_limits).split("\n\n")[0].splitlines()
    )
    assert fields["rate limit"].strip() == (
        "stripe: 20/s, burst 5; held back until the bucket has a token (jobs ahead of it in "
        "claim order take them first)"
    )
    done = replace(waiting, state=JobState.COMPLETED)
    assert re.search(
        r"\nrate limit +stripe: 20/s, burst 5\n", job_detail(done, (), limits=app.rate_limits)
    )
    unknown = job_detail(replace(waiting, rate_key="other"), (), limits=app.rate_limits)
    assert "other (not declared by this app" in unknown
    assert "rate limit" not in job_detail(replace(waiting, rate_key=None))
    assert describe(RateLimit("k", 10 / 60, 10)) == "10/m, burst 10"
    assert describe(RateLimit("k", 1 / 86400, 1)) == "0.0416667/h, burst 1"
