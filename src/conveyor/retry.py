"""Backoff and error classification."""

from __future__ import annotations

import random
from dataclasses import dataclass

from .errors import ArgumentValidationError, CorruptJob, CorruptPayload
from .outcomes import Cancel

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

    def backoff(self, attempt: int, rng: random.Random | None = None) -> float:
        ceiling = min(self.cap, self.base * (2 ** min(attempt, 62)))
        return (rng or random).uniform(0.0, ceiling)

    def is_transient(self, error: BaseException) -> bool:
        """True if `error` deserves another attempt (attempts permitting)."""
        if isinstance(error, (Cancel, CorruptJob)):  # whatever the policy says
            return False
        if self.dead_on and isinstance(error, self.dead_on):
            return False
        if self.retry_on is not None:
            return isinstance(error, self.retry_on)
        return not isinstance(error, DETERMINISTIC_ERRORS)
