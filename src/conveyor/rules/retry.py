"""Backoff and error classification."""

from __future__ import annotations

import random
from dataclasses import dataclass

from conveyor.model.clock import Duration, to_seconds
from conveyor.model.errors import ArgumentValidationError, CorruptJob, CorruptPayload
from conveyor.model.outcomes import Cancel
from conveyor.rules.retry_budget import RetryBudget, checked_budget

# Errors that fail the same way every time: retrying only delays the dead letter.
DETERMINISTIC_ERRORS: tuple[type[BaseException], ...] = (
    TypeError,
    ValueError,
    LookupError,
    ArgumentValidationError,
    CorruptPayload,
    Cancel,
)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with full jitter: uniform(0, min(cap, base * 2**attempt)).

    `attempt` is the attempt that just failed (1 for the first run).
    """

    base: float = 1.0
    cap: float = 600.0
    retry_on: tuple[type[BaseException], ...] | None = None
    dead_on: tuple[type[BaseException], ...] = ()
    budget: RetryBudget | None = None  # most retries per window (conveyor.rules.retry_budget)

    def backoff(self, attempt: int, rng: random.Random | None = None) -> float:
        ceiling = min(self.cap, self.base * (2 ** min(attempt, 62)))
        return (rng or random).uniform(0.0, ceiling)

    def worst_case_window(self, max_attempts: int) -> float:
        """The longest a job can spend waiting between its first attempt and its last
        (each of its `max_attempts - 1` backoffs at its ceiling): how long something
        keyed to the job must be remembered for a retry to still find it. A
        `Retry(after=)` longer than the backoff is the handler's own to account for.

        >>> RetryPolicy(base=1.0, cap=600.0).worst_case_window(5)  # 2 + 4 + 8 + 16
        30.0
        """
        ceilings = [
            min(self.cap, self.base * 2**attempt) for attempt in range(1, min(max_attempts, 63))
        ]
        # From attempt 62 on the ceiling no longer grows (see backoff).
        beyond = max(0, max_attempts - 63) * min(self.cap, self.base * 2**62)
        return float(sum(ceilings) + beyond)

    def is_transient(self, error: BaseException) -> bool:
        """True if `error` deserves another attempt (attempts permitting)."""
        if isinstance(error, (Cancel, CorruptJob)):  # whatever the policy says
            return False
        if self.dead_on and isinstance(error, self.dead_on):
            return False
        if self.retry_on is not None:
            return isinstance(error, self.retry_on)
        return not isinstance(error, DETERMINISTIC_ERRORS)


def task_retry_policy(
    task_name: str,
    *,
    retry_on: tuple[type[BaseException], ...] | None = None,
    dead_on: tuple[type[BaseException], ...] = (),
    backoff_base: Duration = 1.0,
    backoff_cap: Duration = 600.0,
    retry_budget: RetryBudget | None = None,
) -> RetryPolicy:
    """The retry policy `@app.task(...)`'s options describe (`retry_on=`, `dead_on=`,
    `retry=RetryOptions(...)`), checked."""
    return RetryPolicy(
        base=to_seconds(backoff_base),
        cap=to_seconds(backoff_cap),
        retry_on=tuple(retry_on) if retry_on is not None else None,
        dead_on=tuple(dead_on),
        budget=checked_budget(f"task {task_name}", retry_budget),
    )
