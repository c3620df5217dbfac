"""The grouped options of `@app.task(...)`: `retry=RetryOptions(...)`,
`limits=Limits(...)`, `payload=PayloadOptions(...)`. Each group is one frozen
dataclass; `conveyor.app.Conveyor._register` is the one place that turns them, with
the plain keywords, into the task's settings (`TaskDefaults`), checked there.

>>> @app.task(
...     queue="billing",
...     retry_on=(ConnectionError,),
...     retry=RetryOptions(backoff_base=2, backoff_cap=300, budget=RetryBudget(share=0.2)),
...     limits=Limits(concurrency_key="user:{user_id}", concurrency_limit=1, breaker="stripe"),
...     payload=PayloadOptions(redact=("card",), max_payload=64_000),
... )
... def charge(user_id: int, card: dict[str, str]) -> None: ...
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from conveyor.model.clock import Duration
from conveyor.rules.adaptive import Adaptive
from conveyor.rules.rate_limits import Limit
from conveyor.rules.retry_budget import RetryBudget


@dataclass(frozen=True, slots=True)
class RetryOptions:
    """How a task retries, beyond which errors do (`retry_on=`, `dead_on=`).

    `backoff_base`/`backoff_cap`: exponential backoff with full jitter, in seconds
    or a timedelta. `budget=RetryBudget(share=0.2)` caps the task's retries per
    window, fleet-wide, so that retries do not become the outage
    (docs/downstreams.md)."""

    backoff_base: Duration = 1.0
    backoff_cap: Duration = 600.0
    budget: RetryBudget | None = None


@dataclass(frozen=True, slots=True)
class Limits:
    """How many of a task's jobs run at once, how fast, and behind which breaker.

    At most N running: `concurrency_key="user:{user_id}", concurrency_limit=N` (per
    key, across every worker) or `max_running=N` (the whole task); `adaptive=True`
    (or `Adaptive(...)`) moves N by what the downstream says (docs/downstreams.md).
    Rate limits: `rate_limit="10/s"` (the task's own bucket), `rate_key="stripe"` (a
    bucket shared by name, `app.rate_limit`; docs/flow-control.md). Circuit
    breakers: `breaker="stripe"` (`app.breaker`)."""

    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    max_running: int | None = None
    adaptive: bool | Adaptive | None = None
    rate_limit: str | Limit | None = None
    rate_key: str | None = None
    breaker: str | None = None


@dataclass(frozen=True, slots=True)
class PayloadOptions:
    """A task's payloads, over the app's settings (docs/payloads.md): arguments
    bigger than `claim_check_threshold` bytes are stored apart, bigger than
    `max_payload` refused; `redact` names the arguments masked wherever jobs are
    shown; `hygiene` ("warn", "reject", "off") is the enqueue-time secret check."""

    claim_check_threshold: int | None = None
    max_payload: int | None = None
    redact: Sequence[str] = ()
    hygiene: str | None = None


# The keywords app.task took before the groups, each with its new home: the error
# for one says where it went (there is one way to give each option).
MOVED_OPTIONS = {
    "soft_time_limit": "timeout=",
    "backoff_base": "retry=RetryOptions(backoff_base=...)",
    "backoff_cap": "retry=RetryOptions(backoff_cap=...)",
    "retry_budget": "retry=RetryOptions(budget=...)",
    "concurrency_key": "limits=Limits(concurrency_key=...)",
    "concurrency_limit": "limits=Limits(concurrency_limit=...)",
    "max_running": "limits=Limits(max_running=...)",
    "adaptive": "limits=Limits(adaptive=...)",
    "rate_limit": "limits=Limits(rate_limit=...)",
    "rate_key": "limits=Limits(rate_key=...)",
    "breaker": "limits=Limits(breaker=...)",
    "claim_check_threshold": "payload=PayloadOptions(claim_check_threshold=...)",
    "max_payload": "payload=PayloadOptions(max_payload=...)",
    "redact": "payload=PayloadOptions(redact=...)",
    "payload_hygiene": "payload=PayloadOptions(hygiene=...)",
}
