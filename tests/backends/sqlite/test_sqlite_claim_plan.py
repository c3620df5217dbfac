"""SQLite: the claim walks the claim index in claim order, without sorting, whatever
mix of jobs with and without priority aging a queue holds (migration 4 and the
claim_order fragment of queries.sql must say the same, word for word)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from conveyor.backends.claiming import strict_claim
from conveyor.backends.params import Settlement
from conveyor.backends.sqlite.connection import Q, SqliteConnection
from conveyor.backends.sqlite.enqueue import enqueue_jobs
from conveyor.backends.sqlite.lifecycle import fetch_jobs, settle_jobs
from conveyor.model.job import JobState, NewJob


def test_the_claim_reads_its_index_in_order(tmp_path: Path) -> None:
    connection = SqliteConnection(str(tmp_path / "jobs.db"), lambda: 1000.0)
    connection.migrate()
    enqueue_jobs(
        connection,
        [
            NewJob(
                id=f"j{n}",
                task="t",
                queue="q",
                payload="{}",
                priority=n % 3,
                aging=60.0 if n % 2 else None,
            )
            for n in range(200)
        ],
    )
    connection.conn.execute("ANALYZE")
    plan = [
        row[-1]
        for row in connection.conn.execute(
            "EXPLAIN QUERY PLAN " + Q["claim_jobs"],
            {
                "queue": "q",
                "limit": 10,
                "now": 1000.0,
                "lease_expires_at": 1030.0,
                "worker_id": "w",
            },
        )
    ]
    assert any("USING INDEX conveyor_jobs_claim" in step for step in plan), plan
    assert not any("TEMP B-TREE" in step for step in plan), plan  # no sort of the queue
    connection.close()


def _vm_steps(connection: SqliteConnection, action: Callable[[], object]) -> int:
    """SQLite virtual-machine steps (in hundreds) that `action` takes on the
    connection: a count that does not depend on the machine's speed."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    connection.conn.set_progress_handler(count, 100)
    try:
        action()
    finally:
        connection.conn.set_progress_handler(None, 100)
    return steps


def _hot_key_steps(tmp_path: Path, parked: int) -> tuple[int, int]:
    """Steps of a claim and of the completion that frees a hot key's one slot, with
    `parked` jobs of that key waiting behind it."""
    connection = SqliteConnection(str(tmp_path / f"hot-{parked}.db"), lambda: 1000.0)
    connection.migrate()
    for start in range(0, parked + 1, 5000):
        enqueue_jobs(
            connection,
            [
                NewJob(
                    id=f"h{n}",
                    task="t",
                    queue="q",
                    payload="{}",
                    concurrency_key="hot",
                    concurrency_limit=1,
                )
                for n in range(start, min(parked + 1, start + 5000))
            ],
        )
    enqueue_jobs(
        connection, [NewJob(id=f"free{n}", task="t", queue="q", payload="{}") for n in range(20)]
    )
    [held] = [job for job in fetch_jobs(connection, strict_claim(["q"], 1, "w", 30.0))]
    claim_steps = _vm_steps(
        connection, lambda: fetch_jobs(connection, strict_claim(["q"], 10, "w", 30.0))
    )
    settle_steps = _vm_steps(
        connection,
        lambda: settle_jobs(
            connection, [Settlement(held.id, held.lease_token, JobState.COMPLETED, result="null")]
        ),
    )
    assert [j.id for j in fetch_jobs(connection, strict_claim(["q"], 10, "w", 30.0))][:1] == ["h1"]
    connection.close()
    return claim_steps, settle_steps


def test_a_hot_keys_backlog_costs_the_claim_and_the_settle_nothing(tmp_path: Path) -> None:
    """A key at its limit with 20,000 parked jobs: a claim reads none of them, and
    freeing the slot reads the first one, not the rest (steps do not grow with them)."""
    small_claim, small_settle = _hot_key_steps(tmp_path, 200)
    big_claim, big_settle = _hot_key_steps(tmp_path, 20_000)
    assert big_claim <= small_claim * 1.5 + 2, (small_claim, big_claim)
    assert big_settle <= small_settle * 1.5 + 2, (small_settle, big_settle)


def test_the_rated_claim_reads_each_lane_from_its_index(tmp_path: Path) -> None:
    """A claim that carries rate limits reads the first entries of each lane's index:
    a throttled bucket's backlog (here 2,000 jobs ahead of the others) is not walked."""
    from conveyor.backends.sqlite.lifecycle import _rated_claim_sql

    connection = SqliteConnection(str(tmp_path / "jobs.db"), lambda: 1000.0)
    connection.migrate()
    enqueue_jobs(
        connection,
        [
            NewJob(id=f"t{n}", task="t", queue="q", payload="{}", rate_key="slow")
            for n in range(2000)
        ],
    )
    enqueue_jobs(
        connection,
        [NewJob(id=f"f{n}", task="t", queue="q", payload="{}", priority=n % 3) for n in range(200)],
    )
    connection.conn.execute("ANALYZE")
    plan = [
        row[-1]
        for row in connection.conn.execute(
            "EXPLAIN QUERY PLAN " + _rated_claim_sql(2),
            {
                "queue": "q",
                "limit": 10,
                "now": 1000.0,
                "lease_expires_at": 1030.0,
                "worker_id": "w",
                "rate_key_0": "slow",
                "allowed_0": 0,
                "rate_key_1": "other",
                "allowed_1": 5,
            },
        )
    ]
    assert any("USING INDEX conveyor_jobs_claim " in step for step in plan), plan
    assert sum("USING INDEX conveyor_jobs_rate_claim " in step for step in plan) == 2, plan
    assert not any(step.startswith("SCAN conveyor_jobs") for step in plan), plan
    # One sort: the merge of the lanes' few candidates, not a sort of a lane.
    assert sum("TEMP B-TREE" in step for step in plan) <= 1, plan
    connection.close()
