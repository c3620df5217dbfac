"""Control exceptions a handler raises to choose what happens to its job.

Any other exception is an error: it retries or dead-letters according to the
task's policy (see `conveyor.rules.retry.classify`).
"""

from __future__ import annotations

from datetime import timedelta  # noqa: F401  (used in the docstrings)

from conveyor.model.clock import Duration, to_seconds


class Outcome(Exception):
    """Base of the control exceptions; never an error in the job's history by itself."""


class Retry(Outcome):
    """Retry this job, after `after` if given (else the task's backoff). Uses an attempt.

    >>> raise Retry(after=timedelta(seconds=30))
    """

    def __init__(self, after: Duration | None = None, reason: str = "") -> None:
        self.after = None if after is None else to_seconds(after)
        self.reason = reason
        super().__init__(reason or f"retry requested (after={self.after})")


class Snooze(Outcome):
    """Run this job again after `delay` without using an attempt.

    >>> raise Snooze(timedelta(minutes=1))  # the rate-limited API said "later"
    """

    def __init__(self, delay: Duration) -> None:
        self.delay = to_seconds(delay)
        super().__init__(f"snoozed for {self.delay}s")


class Cancel(Outcome):
    """Stop this job for good: it goes to the dead-letter queue at once with `reason`
    (or to `cancelled` if an operator had asked for the cancel).

    >>> raise Cancel("account closed")
    """

    def __init__(self, reason: str = "") -> None:
        self.reason = reason
        super().__init__(reason or "cancelled by handler")


__all__ = ["Outcome", "Retry", "Snooze", "Cancel"]
