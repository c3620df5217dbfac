"""Claim details specific to this backend's SQL."""

from __future__ import annotations

import psycopg
import pytest

from conveyor import Conveyor
from conveyor.backends.claiming import strict_claim
from conveyor.backends.params import Settlement
from conveyor.backends.postgres.backend import PostgresBackend
from conveyor.backends.postgres.rows import Positional, positional
from conveyor.model.clock import ManualClock
from conveyor.model.job import AttemptError, JobState, NewJob


async def test_claimed_jobs_carry_meta_and_error_history(
    manual_app: tuple[Conveyor, ManualClock],
) -> None:
    app, clock = manual_app
    backend = await app.backend()
    await backend.enqueue_jobs(
        [NewJob(id="m", task="t", queue="q", payload="{}", meta={"tenant": "acme", "n": [1, 2]})]
    )
    [job] = await backend.fetch_jobs(strict_claim(["q"], 5, "w", 30))
    assert job.meta == {"tenant": "acme", "n": [1, 2]} and job.errors == ()
    error = AttemptError(attempt=1, at=clock.now, type="OSError", message="disk", worker_id="w")
    assert (
        await backend.settle_jobs(
            [
                Settlement(
                    "m", job.lease_token, JobState.RETRYABLE, error=error, run_at=clock.now + 5
                )
            ]
        )
        == []
    )
    clock.advance(5)
    [again] = await backend.fetch_jobs(
        strict_claim(["q"], 5, "w", 30)
    )  # staged and claimed in one call
    assert (again.attempt, again.lease_token) == (2, job.lease_token + 1)
    assert again.errors == (error,) and again.meta == job.meta


def test_claims_are_sent_in_the_servers_placeholders() -> None:
    """rows.positional: one $n per name, numbered as first seen, and %% a literal %."""
    assert positional("SELECT %(a)s, %(b)s, %(a)s, 7 %% 2") == Positional(
        "SELECT $1, $2, $1, 7 % 2", ("a", "b")
    )
    assert Positional("$1 $2", ("a", "b")).args({"b": 2, "a": 1, "c": 3}) == [1, 2]


FILL_QUEUES = """INSERT INTO "{schema}".jobs (id, queue, task, payload, state, max_attempts,
 run_at, created_at, attempt)
SELECT q || g, q, 't', '{{}}', 'available', 20, g, 0, 0
FROM unnest(%(queues)s::text[], %(sizes)s::int[]) AS s(q, n), generate_series(1, s.n) AS g"""


@pytest.mark.parametrize(
    ("sizes", "locked"),
    [
        ([100, 100, 100], 10),  # every queue gives its quota: nothing more is locked
        ([100, 100, 0], 11),  # c gives none; a and b may each fill the room of 1: 1 more each
    ],
)
async def test_a_weighted_claim_locks_the_jobs_it_takes_and_no_more_than_the_room(
    pg_url: str,
    schema: str,
    admin_conn: psycopg.Connection[tuple[object, ...]],
    sizes: list[int],
    locked: int,
) -> None:
    """A claim of 10 from three weighted queues (quotas 6, 3, 1, ceilings 8) locks each
    queue's quota, and a second pass's lane only the room the first pass left. Counted
    from another connection while the claim's transaction is open: the available jobs
    its SKIP LOCKED cannot take."""
    backend = PostgresBackend(pg_url)
    try:
        await backend.migrate()
        admin_conn.execute(
            FILL_QUEUES.format(schema=schema), {"queues": ["a", "b", "c"], "sizes": sizes}
        )
        admin_conn.execute(f'ANALYZE "{schema}".jobs')
        claim = backend._state.claims["claim_jobs"]
        params = {
            "queues": ["a", "b", "c"],
            "quotas": [6, 3, 1],
            "ceilings": [8, 8, 8],
            "limit": 10,
            "now": 1e9,
            "worker_id": "w",
            "lease_expires_at": 2e9,
        }
        with psycopg.connect(backend._state.config.conninfo) as claimer:
            rows = psycopg.RawCursor(claimer).execute(claim.sql, claim.args(params)).fetchall()
            assert len(rows) == 10
            with admin_conn.transaction(force_rollback=True):
                free = admin_conn.execute(
                    f"""SELECT count(*) FROM (SELECT 1 FROM "{schema}".jobs
                        WHERE state = 'available' FOR UPDATE SKIP LOCKED) AS s"""
                ).fetchone()
            assert free == (sum(sizes) - locked,)
            claimer.rollback()
    finally:
        await backend.close()
