"""Redis: each queue's waiting index (layout 2), what bounded queues count and shed
from, stays the set of its waiting jobs through every transition, and migrate()
builds it for a prefix written before it existed."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from conveyor.backends.claiming import strict_claim
from conveyor.backends.params import BulkAction, JobFilter, JobPage, Settlement
from conveyor.backends.redis.backend import RedisBackend
from conveyor.model.clock import ManualClock
from conveyor.model.job import JobState, NewJob

WAITING = (JobState.SCHEDULED, JobState.AVAILABLE, JobState.RETRYABLE)


def job(n: int, **fields: object) -> NewJob:
    return NewJob(id=f"job-{n}", task="t", queue="q", payload='{"args":[],"kwargs":{}}', **fields)  # type: ignore[arg-type]


@pytest.fixture
async def backend(redis_url: str, clock: ManualClock) -> AsyncIterator[RedisBackend]:
    b = RedisBackend(redis_url, clock=clock)
    await b.open()
    assert await b.migrate() == [1, 2]
    yield b
    await b.close()


async def indexed(backend: RedisBackend) -> list[str]:
    return sorted(await backend.client.zrange(backend.keys.waiting("q"), 0, -1))


async def waiting_ids(backend: RedisBackend) -> list[str]:
    return sorted(
        j.id for j in await backend.list_jobs(JobPage(where=JobFilter(states=WAITING), limit=100))
    )


async def test_the_index_follows_every_transition(
    backend: RedisBackend, clock: ManualClock
) -> None:
    await backend.enqueue_jobs([job(n) for n in range(6)] + [job(6, run_at=clock.now + 10)])
    claimed = await backend.fetch_jobs(strict_claim(["q"], 4, "w", 30))
    assert await indexed(backend) == await waiting_ids(backend)
    a, b, c, d = claimed
    await backend.settle_jobs(
        [
            Settlement(a.id, a.lease_token, JobState.RETRYABLE, run_at=clock.now + 5),
            Settlement(
                b.id, b.lease_token, JobState.SCHEDULED, run_at=clock.now + 1, refund_attempt=True
            ),
            Settlement(c.id, c.lease_token, JobState.COMPLETED, result="null"),
            Settlement(d.id, d.lease_token, JobState.DEAD),
        ]
    )
    assert await indexed(backend) == await waiting_ids(backend)
    await backend.redrive_jobs(BulkAction(where=JobFilter(ids=(d.id,)), limit=1, dry_run=False))
    await backend.cancel_job("job-5")
    clock.advance(20)
    await backend.fetch_jobs(strict_claim(["q"], 1, "w", 30))  # stages the due ones
    assert await indexed(backend) == await waiting_ids(backend)
    await backend.delete_jobs(
        BulkAction(where=JobFilter(states=(JobState.COMPLETED,)), limit=10, dry_run=False)
    )
    assert await indexed(backend) == await waiting_ids(backend)


async def test_migrate_builds_the_index_of_an_older_layout(
    backend: RedisBackend, clock: ManualClock
) -> None:
    await backend.enqueue_jobs([job(n) for n in range(3)] + [job(3, run_at=clock.now + 10)])
    await backend.fetch_jobs(strict_claim(["q"], 1, "w", 30))
    expected = await indexed(backend)
    await backend.client.delete(backend.keys.waiting("q"))
    await backend.client.set(backend.keys.schema, "1")
    assert await backend.migrate() == [2]
    assert await indexed(backend) == expected == await waiting_ids(backend)
    assert await backend.migrate() == []
