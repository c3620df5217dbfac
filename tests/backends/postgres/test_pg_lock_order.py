"""A worker's heartbeat and outcome writes run on separate connections and touch the
same rows; they must lock them in one order, or PostgreSQL aborts one of them as a
deadlock (seen as BackendUnavailable, a stalled second)."""

from __future__ import annotations

import asyncio
import random

from conveyor.backends.claiming import strict_claim
from conveyor.backends.params import Heartbeat, JobFilter, Lease, Settlement
from conveyor.backends.postgres.backend import PostgresBackend
from conveyor.model.job import JobState, NewJob


async def test_concurrent_heartbeats_and_settles_in_any_order_do_not_deadlock(pg_url: str) -> None:
    backends = [PostgresBackend(pg_url) for _ in range(6)]
    try:
        await backends[0].migrate()
        await backends[0].enqueue_jobs(
            [NewJob(id=f"j{i:04d}", task="t", queue="q", payload="{}") for i in range(600)]
        )
        jobs = await backends[0].fetch_jobs(strict_claim(["q"], 600, "w", 60))
        assert len(jobs) == 600
        leases = [Lease(j.id, j.lease_token) for j in jobs]
        rng = random.Random(7)
        for _ in range(5):
            orders = [rng.sample(leases, len(leases)) for _ in backends]
            replies = await asyncio.gather(
                *(
                    b.heartbeat_jobs(Heartbeat(leases=o, lease_seconds=60))
                    for b, o in zip(backends, orders, strict=True)
                )
            )
            assert all(not r.lost for r in replies)
        # Outcome writes racing heartbeats, each in its own order.
        halves = [leases[:300], leases[300:]]
        settles = [
            b.settle_jobs(
                [
                    Settlement(lease.job_id, lease.token, JobState.COMPLETED, result="1")
                    for lease in rng.sample(h, len(h))
                ]
            )
            for b, h in zip(backends[:2], halves, strict=True)
        ]
        beats = [
            b.heartbeat_jobs(Heartbeat(leases=rng.sample(leases, len(leases)), lease_seconds=60))
            for b in backends[2:]
        ]
        results = await asyncio.gather(*settles, *beats)
        assert results[0] == [] and results[1] == []  # nothing stale
        assert await backends[0].count_jobs(JobFilter(states=(JobState.COMPLETED,))) == 600
    finally:
        await asyncio.gather(*(b.close() for b in backends))
