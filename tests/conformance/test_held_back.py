"""Why a due job does not run (`app.admin.held_back`, shown by `conveyor jobs show` and
the job's dashboard page): its queue paused, its key's slots taken, its rate limit
bucket, its workflow parents; every reason that holds, on every backend."""

from __future__ import annotations

import asyncio

from helpers import complete

from conveyor import Conveyor, Limits
from conveyor.backends.claiming import QueuePlan
from conveyor.backends.contract import Backend
from conveyor.model.job import Job


async def claim_with_two_claimers(app: Conveyor, queue: str) -> list[Job]:
    backend = await app.backend()
    plan = QueuePlan([queue])
    claims = await asyncio.gather(
        *(
            backend.fetch_jobs(plan.request(5, f"w{n}", 30.0, rate_limits=app.rate_limits.declared))
            for n in range(2)
        )
    )
    return [job for jobs in claims for job in jobs]


async def reason(app: Conveyor, job_id: str) -> str | None:
    job = await app.admin.get(job_id)
    assert job is not None
    return await app.admin.held_back(job)


async def test_a_paused_queue_a_full_key_and_a_spent_bucket_each_say_so(app: Conveyor) -> None:
    @app.task(
        name="sync",
        queue="accounts",
        limits=Limits(concurrency_key="user:{user_id}", rate_limit="1/h"),
    )
    def sync(user_id: int) -> None: ...

    first, second, other = (
        await sync.enqueue_async(1),
        await sync.enqueue_async(1),
        await sync.enqueue_async(2),
    )
    claimed = await claim_with_two_claimers(app, "accounts")
    assert [job.id for job in claimed] == [first.id]  # one token an hour
    assert await reason(app, first.id) is None  # running
    assert await reason(app, second.id) == "waiting for a slot of key user:1: 1 of 1 running"
    assert await reason(app, other.id) == "waiting for a token of rate limit bucket task:sync"
    await app.admin.pause("accounts")
    backend: Backend = await app.backend()
    assert await backend.queue_paused("accounts") and not await backend.queue_paused("other")
    assert await reason(app, other.id) == (
        "its queue accounts is paused; waiting for a token of rate limit bucket task:sync"
    )
    await app.admin.resume("accounts")
    assert not await backend.queue_paused("accounts")
    assert await reason(app, other.id) == "waiting for a token of rate limit bucket task:sync"


async def test_a_workflow_member_says_how_many_of_its_parents_finished(app: Conveyor) -> None:
    @app.task(name="step", queue="flows")
    def step(n: int) -> None: ...

    a, b = await step.enqueue_async(1), await step.enqueue_async(2)
    child = await step.options(depends_on=[a, b]).enqueue_async(3)
    assert await reason(app, child.id) == "waiting for its workflow parents: 0 of 2 finished"
    claimed = await claim_with_two_claimers(app, "flows")
    assert sorted(job.id for job in claimed) == sorted([a.id, b.id])
    first = next(job for job in claimed if job.id == a.id)
    assert await (await app.backend()).settle_jobs([complete(first)]) == []
    assert await reason(app, child.id) == "waiting for its workflow parents: 1 of 2 finished"
    assert await reason(app, a.id) is None
