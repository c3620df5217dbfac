"""Claim details specific to this backend's SQL."""

from __future__ import annotations

from conveyor import Conveyor
from conveyor.backends.base import Settlement
from conveyor.job import AttemptError, JobState, NewJob
from conveyor.timeutil import ManualClock
from conveyor.claiming import strict_claim


async def test_claimed_jobs_carry_meta_and_error_history(
    manual_app: tuple[Conveyor, ManualClock]
) -> None:
    app, clock = manual_app
    backend = await app.backend()
    await backend.enqueue_jobs([NewJob(id="m", task="t", queue="q", payload="{}",
                                       meta={"tenant": "acme", "n": [1, 2]})])
    [job] = await backend.fetch_jobs(strict_claim(["q"], 5, "w", 30))
    assert job.meta == {"tenant": "acme", "n": [1, 2]} and job.errors == ()
    error = AttemptError(attempt=1, at=clock.now, type="OSError", message="disk", worker_id="w")
    assert await backend.settle_jobs([Settlement("m", job.lease_token, JobState.RETRYABLE,
                                                 error=error, run_at=clock.now + 5)]) == []
    clock.advance(5)
    [again] = await backend.fetch_jobs(strict_claim(["q"], 5, "w", 30))  # staged and claimed in one call
    assert (again.attempt, again.lease_token) == (2, job.lease_token + 1)
    assert again.errors == (error,) and again.meta == job.meta
