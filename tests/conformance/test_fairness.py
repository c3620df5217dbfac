"""Tenant fairness (docs/flow-control.md): within a queue, claims rotate across the
jobs' fairness keys by virtual time assigned at enqueue, so a key with a backlog delays
a newcomer by a bounded number of claims, on every backend, with several claimers."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from helpers import claim_one, new_job

from conveyor import Conveyor
from conveyor.backends.claiming import strict_claim
from conveyor.backends.contract import Backend
from conveyor.backends.params import Settlement
from conveyor.model.clock import ManualClock
from conveyor.model.errors import ConfigurationError, InvalidJob
from conveyor.model.job import JobState
from conveyor.rules.fairness import FAIRNESS_META_KEY

CLAIMERS = 4


async def flood(backend: Backend, key: str, n: int, **fields: Any) -> None:
    for start in range(0, n, 1000):
        await backend.enqueue_jobs(
            [
                new_job(id=f"{key}-{i:06d}", fairness_key=key, **fields)
                for i in range(start, min(n, start + 1000))
            ]
        )


async def claim_rounds(backend: Backend, rounds: int, limit: int = 1) -> list[list[str]]:
    """`rounds` times, CLAIMERS claims of `limit` at once; the ids each round took."""
    out = []
    for _ in range(rounds):
        batches = await asyncio.gather(
            *(
                backend.fetch_jobs(strict_claim(["default"], limit, f"w{n}", 30))
                for n in range(CLAIMERS)
            )
        )
        out.append([job.id for batch in batches for job in batch])
    return out


def key_of(job_id: str) -> str:
    return job_id.split("-")[0]


@pytest.mark.parametrize("backlog", [1000, pytest.param(100_000, marks=pytest.mark.slow)])
async def test_a_newcomer_alternates_with_a_backlog(backend: Backend, backlog: int) -> None:
    """The bound of the docs: with K keys waiting (equal weights), the m-th job of a
    key that arrives is claimed within the first m * K claims after its enqueue. Here
    K = 2: the m-th of the small key's 10 jobs is claimed by claim 2m, wherever the big
    key's backlog of `backlog` stood, with four claimers at once."""
    await flood(backend, "big", backlog)
    await claim_rounds(backend, 25)  # 100 of big's jobs claimed: the queue's vtime moved on
    await backend.enqueue_jobs([new_job(id=f"small-{i}", fairness_key="small") for i in range(10)])
    rounds = await claim_rounds(backend, 5)  # 20 claims
    claimed = [job_id for ids in rounds for job_id in ids]
    assert len(claimed) == len(set(claimed)) == 20
    # Each round of four claims took exactly two of each key (the rotation, exact), so
    # after claim 2m the small key has had m turns: all 10 by claim 20.
    assert [Counter(map(key_of, ids)) for ids in rounds] == [{"big": 2, "small": 2}] * 5
    assert sorted(i for i in claimed if key_of(i) == "small") == [f"small-{i}" for i in range(10)]


async def test_weights_share_the_claims(backend: Backend) -> None:
    """A weight w gives a key w turns to a weight-1 key's one: over 200 claims of two
    backlogs, weight 3 against 1 takes exactly 150 and 50."""
    await flood(backend, "heavy", 300, fairness_weight=3.0)
    await flood(backend, "light", 300)
    rounds = await claim_rounds(backend, 10, limit=5)
    assert Counter(key_of(i) for ids in rounds for i in ids) == {"heavy": 150, "light": 50}


async def test_keys_rotate_within_a_priority_level_and_unkeyed_jobs_go_first(
    backend: Backend,
) -> None:
    await flood(backend, "a", 3)
    await flood(backend, "b", 3)
    await backend.enqueue_jobs(
        [new_job(id="plain-0"), new_job(id="urgent-0", priority=5, fairness_key="a")]
    )
    order = [(await claim_one(backend)).id for _ in range(8)]
    assert order == [
        "urgent-0",
        "plain-0",
        "a-000000",
        "b-000000",
        "a-000001",
        "b-000001",
        "a-000002",
        "b-000002",
    ]


async def test_a_retried_job_keeps_its_turn(backend: Backend, clock: ManualClock) -> None:
    """A retry keeps the vtime it got at enqueue: when due again it goes before the
    jobs of every key that were enqueued after it (its turn was already its own)."""
    await flood(backend, "a", 3)
    await flood(backend, "b", 3)
    first = await claim_one(backend)
    assert first.id == "a-000000"
    await backend.settle_jobs(
        [Settlement(first.id, first.lease_token, JobState.RETRYABLE, run_at=clock.now + 10)]
    )
    assert (await claim_one(backend)).id == "b-000000"
    clock.advance(10)
    order = [(await claim_one(backend)).id for _ in range(5)]
    assert order == ["a-000000", "a-000001", "b-000001", "a-000002", "b-000002"]


async def test_an_idle_key_gets_no_credit(backend: Backend) -> None:
    """A key that had no jobs while the others were claimed starts at the queue's
    present: one turn, not a burst for the turns it did not use."""
    await flood(backend, "a", 50)
    await claim_rounds(backend, 10)  # 40 claims: the queue's vtime is 40 turns on
    await backend.enqueue_jobs([new_job(id=f"b-{i}", fairness_key="b") for i in range(3)])
    order = [(await claim_one(backend)).id for _ in range(6)]
    assert list(map(key_of, order)) == ["a", "b", "a", "b", "a", "b"]


async def test_the_task_renders_its_fairness_key(app: Conveyor, backend: Backend) -> None:
    @app.task(name="report", fairness_key="tenant:{tenant_id}")
    def report(tenant_id: int, day: str) -> None: ...

    handle = await report.enqueue_async(7, "monday")
    assert (await backend.get_job(handle.id)).meta[FAIRNESS_META_KEY] == "tenant:7"  # type: ignore[union-attr]
    message = report.options(fairness_key="tenant:vip", fairness_weight=4).message(7, "x")
    assert (message.fairness_key, message.fairness_weight) == ("tenant:vip", 4.0)
    assert report.message(8, "x").fairness_key == "tenant:8"
    with pytest.raises(ConfigurationError, match="fairness_key 'tenant:{account}'"):
        app.task(name="bad", fairness_key="tenant:{account}")(lambda tenant_id: None)
    with pytest.raises(InvalidJob, match="fairness_weight"):
        report.options(fairness_weight=0)
    with pytest.raises(InvalidJob, match="fairness_weight"):
        await app.enqueue_many_async([new_job(fairness_weight=1e6)])


async def test_claimers_of_two_fair_queues_in_either_order_each_get_their_own_jobs(
    backend: Backend,
) -> None:
    """Claims move each fair queue's vtime (PostgreSQL: a row per queue, locked in name
    order): four claimers naming the queues in both orders all get through, and every
    job goes to exactly one of them."""
    for queue in ("a", "b"):
        await backend.enqueue_jobs(
            [
                new_job(id=f"{queue}-{i:03d}", queue=queue, fairness_key=f"t{i % 4}")
                for i in range(200)
            ]
        )

    async def claimer(n: int) -> list[str]:
        order = ["a", "b"] if n % 2 else ["b", "a"]
        got: list[str] = []
        while jobs := await backend.fetch_jobs(strict_claim(order, 5, f"w{n}", 30)):
            got += [job.id for job in jobs]
        return got

    claimed = [
        i for ids in await asyncio.gather(*(claimer(n) for n in range(CLAIMERS))) for i in ids
    ]
    assert len(claimed) == len(set(claimed)) == 400
