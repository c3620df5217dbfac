"""Circuit breakers (docs/downstreams.md): the state shared in the backend's records,
changed by compare-and-set from several workers at once, and the claim each worker's
view builds from it (several claimers on the injected clock)."""

from __future__ import annotations

import asyncio
import time

from helpers import RunningWorker, eventually, new_job, wait_finished

from conveyor import BreakerError, Conveyor, Limits, RetryOptions
from conveyor.backends.contract import Backend
from conveyor.backends.params import BucketHold, ClaimedJobs, ClaimRequest, QueueQuota
from conveyor.downstreams.breaker_client import BreakerClient
from conveyor.downstreams.breaker_records import close_by_hand, open_by_hand, read_breaker
from conveyor.model.clock import ManualClock
from conveyor.model.job import JobState
from conveyor.rules.breakers import CLOSED, HALF_OPEN, OPEN, Breaker
from conveyor.rules.rate_limits import RateLimit
from conveyor.worker import WorkerConfig

WORKERS = 4


def views(app: Conveyor, n: int = WORKERS) -> list[BreakerClient]:
    """One view per worker of a fleet sharing the app's declarations."""
    return [BreakerClient(app.breakers) for _ in range(n)]


def stripe(app: Conveyor, failures: int = 5) -> Breaker:
    return app.breaker("stripe", failures=failures, window=60, cooldown=30)


async def claim_round(backend: Backend, fleet: list[BreakerClient], limit: int = 10) -> list[str]:
    """Each worker claims at once with the buckets its view gives; the ids claimed."""
    claims = await asyncio.gather(
        *(
            backend.fetch_jobs(
                ClaimRequest(
                    (QueueQuota("default", limit),),
                    limit,
                    f"w{n}",
                    30.0,
                    rate_limits=view.claim_limits(),
                )
            )
            for n, view in enumerate(fleet)
        )
    )
    ids = [job.id for claim in claims for job in claim]
    assert len(ids) == len(set(ids))
    return ids


async def fill(
    backend: Backend, n: int, rate_key: str | None = "stripe", prefix: str = "s"
) -> list[str]:
    ids = [f"{prefix}-{i:03d}" for i in range(n)]
    await backend.enqueue_jobs([new_job(id=i, rate_key=rate_key) for i in ids])
    return ids


async def test_concurrent_failures_open_the_breaker_once(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    breaker = stripe(app)
    fleet = views(app, 8)
    # Eight workers count a failure each at once: the fifth opens it, once.
    await asyncio.gather(*(view.report(backend, breaker, True, clock()) for view in fleet))
    state = await read_breaker(backend, "stripe")
    assert state.state == OPEN and state.opened_at == clock()
    assert state.transitions == {OPEN: 1}
    assert [(t.source, t.target) for t in state.history] == [(CLOSED, OPEN)]
    assert state.failures == ()


async def test_only_failures_within_the_window_count(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    breaker = stripe(app, failures=3)
    [view] = views(app, 1)
    for _ in range(2):
        await view.report(backend, breaker, True, clock())
    clock.advance(61)  # those two are out of the window now
    await view.report(backend, breaker, True, clock())
    await view.report(backend, breaker, False, clock())  # a success erases nothing
    await view.report(backend, breaker, True, clock())
    assert (await read_breaker(backend, "stripe")).state == CLOSED
    clock.advance(59)
    await view.report(backend, breaker, True, clock())
    assert (await read_breaker(backend, "stripe")).state == OPEN


async def test_an_open_breaker_holds_its_jobs_without_using_an_attempt(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    breaker = stripe(app, failures=1)
    fleet = views(app)
    held = await fill(backend, 20)
    free = await fill(backend, 6, rate_key=None, prefix="f")
    await fleet[0].report(backend, breaker, True, clock())  # this worker learns at once
    for view in fleet[1:]:
        await view.refresh(backend, clock())  # the others at their next refresh
    assert sorted(await claim_round(backend, fleet)) == free  # other jobs never wait
    assert await claim_round(backend, fleet) == []
    clock.advance(29)
    for view in fleet:
        await view.refresh(backend, clock())
    assert await claim_round(backend, fleet) == []
    for job_id in held:
        job = await backend.get_job(job_id)
        assert job is not None
        assert (job.state, job.attempt, job.worker_id) == (JobState.AVAILABLE, 0, None)


async def test_opening_stops_every_workers_claims_at_once(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    """The other workers have not refreshed their view (it says closed): the bucket
    the opening held gives their claims nothing, and tells them when to look again."""
    breaker = stripe(app, failures=1)
    fleet = views(app)
    held = await fill(backend, 20)
    free = await fill(backend, 4, rate_key=None, prefix="f")
    await fleet[0].report(backend, breaker, True, clock())
    assert [view.state("stripe") for view in fleet] == [OPEN, CLOSED, CLOSED, CLOSED]
    assert sorted(await claim_round(backend, fleet)) == free
    stale = await backend.fetch_jobs(
        ClaimRequest(
            (QueueQuota("default", 10),), 10, "w9", 30.0, rate_limits=fleet[1].claim_limits()
        )
    )
    assert stale == [] and stale.next_token_at is not None
    assert clock() + 30 - 1e-3 <= stale.next_token_at <= clock() + 30 + 1e-3  # the hold's end
    clock.advance(29.9)  # (the view of a worker that never refreshed)
    assert await claim_round(backend, fleet) == []
    for job_id in held:
        job = await backend.get_job(job_id)
        assert job is not None and (job.state, job.attempt) == (JobState.AVAILABLE, 0)


async def test_a_held_bucket_refills_from_the_end_of_its_hold(
    backend: Backend, clock: ManualClock
) -> None:
    limits = (RateLimit("stripe", rate=10.0, burst=5),)
    await fill(backend, 20)

    async def claim() -> int:
        return len(
            await backend.fetch_jobs(
                ClaimRequest((QueueQuota("default", 20),), 20, "w1", 30.0, rate_limits=limits)
            )
        )

    await backend.hold_rate_bucket(BucketHold(key="stripe", tokens=0.5, until=clock() + 10))
    assert await claim() == 0
    clock.advance(10)
    assert await claim() == 0  # half a token at the end of the hold
    clock.advance(0.05)
    assert await claim() == 1  # a twentieth of a second at 10 a second: half a token more
    clock.advance(60)
    assert await claim() == 5  # then as any bucket: at most its burst


async def refresh_all(backend: Backend, fleet: list[BreakerClient], clock: ManualClock) -> None:
    await asyncio.gather(*(view.refresh(backend, clock()) for view in fleet))


async def half_open(
    app: Conveyor, backend: Backend, clock: ManualClock, jobs: int
) -> tuple[Breaker, list[BreakerClient], list[str]]:
    """`jobs` waiting behind a breaker that one failure opened and whose cooldown is over,
    seen by a fleet of refreshed views: (the breaker, the views, the waiting ids)."""
    breaker = stripe(app, failures=1)
    fleet = views(app)
    held = await fill(backend, jobs)
    await fleet[0].report(backend, breaker, True, clock())
    clock.advance(30.01)  # just past the cooldown: the held bucket has its token
    await refresh_all(backend, fleet, clock)
    return breaker, fleet, held


async def test_after_the_cooldown_one_probe_goes_through_fleet_wide(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    breaker, fleet, held = await half_open(app, backend, clock, 20)
    state = await read_breaker(backend, "stripe")
    assert state.state == HALF_OPEN and state.transitions == {OPEN: 1, HALF_OPEN: 1}
    assert all(view.state("stripe") == HALF_OPEN for view in fleet)
    probe = await claim_round(backend, fleet)
    assert probe == held[:1]
    clock.advance(1)
    assert await claim_round(backend, fleet) == []  # the probe's outcome is not in yet
    # Its success closes the breaker: the backlog is claimed again.
    await fleet[2].report(backend, breaker, False, clock())
    assert (await read_breaker(backend, "stripe")).state == CLOSED
    for view in fleet:
        await view.refresh(backend, clock())
    clock.advance(0.01)  # an unlimited bucket (a million a second) has refilled by then
    assert sorted(await claim_round(backend, fleet)) == held[1:]


async def test_a_failed_probe_opens_the_breaker_for_a_new_cooldown(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    breaker, fleet, held = await half_open(app, backend, clock, 5)
    assert await claim_round(backend, fleet) == held[:1]
    clock.advance(5)
    await fleet[1].report(backend, breaker, True, clock())
    state = await read_breaker(backend, "stripe")
    assert state.state == OPEN and state.opened_at == clock()
    for view in fleet:
        await view.refresh(backend, clock())
    clock.advance(29)  # the new cooldown is counted from the failed probe
    await refresh_all(backend, fleet, clock)
    assert await claim_round(backend, fleet) == []
    clock.advance(1.01)
    await refresh_all(backend, fleet, clock)
    assert await claim_round(backend, fleet) == held[1:2]
    state = await read_breaker(backend, "stripe")
    assert [t.target for t in state.history] == [OPEN, HALF_OPEN, OPEN, HALF_OPEN]


async def test_opened_by_hand_it_stays_open_until_closed_by_hand(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    stripe(app)
    fleet = views(app)
    held = await fill(backend, 3)
    await open_by_hand(backend, "stripe", clock())
    clock.advance(3600)  # no cooldown ends it
    await refresh_all(backend, fleet, clock)
    assert await claim_round(backend, fleet) == []
    assert (await read_breaker(backend, "stripe")).state == OPEN
    await close_by_hand(backend, "stripe", clock())
    await refresh_all(backend, fleet, clock)
    assert sorted(await claim_round(backend, fleet)) == held
    state = await read_breaker(backend, "stripe")
    assert [(t.target, t.reason) for t in state.history] == [
        (OPEN, "opened by hand"),
        (CLOSED, "closed by hand"),
    ]


# --- the worker ---------------------------------------------------------------------------
async def test_a_worker_holds_a_failing_downstreams_jobs_and_drains_them_after(
    live_app: Conveyor,
) -> None:
    """One worker, one slot, so that every start is in order: while the breaker is
    open no job of its task starts, one probe starts per half-open spell, the other
    task's jobs run meanwhile, and after the downstream is back the backlog drains."""
    live_app.breaker("downstream", failures=3, window=60, cooldown=0.5)
    down = asyncio.Event()
    down.set()
    starts: list[float] = []
    others: list[float] = []

    @live_app.task(
        name="tests.call",
        limits=Limits(breaker="downstream"),
        retry=RetryOptions(backoff_base=0.01, backoff_cap=0.05),
    )
    async def call() -> None:
        starts.append(live_app.clock())
        if down.is_set():
            raise BreakerError("the downstream answered 503")

    @live_app.task(name="tests.other")
    async def other() -> None:
        others.append(live_app.clock())

    calls = await live_app.enqueue_many_async([call.message() for _ in range(10)])
    backend = await live_app.backend()
    claims: list[int] = []
    fetch = backend.fetch_jobs

    async def counted(request: ClaimRequest) -> ClaimedJobs:
        jobs = await fetch(request)
        claims.append(len(jobs))
        return jobs

    backend.fetch_jobs = counted  # type: ignore[method-assign]
    began = time.monotonic()

    async def probes_failed(n: int) -> bool:
        history = (await read_breaker(backend, "downstream")).history
        return sum(t.reason == "probe failed" for t in history) >= n

    config = WorkerConfig(queues=("default",), concurrency=1, scheduler=False)
    async with RunningWorker(live_app, config):
        await eventually(lambda: probes_failed(1), timeout=20)
        await live_app.enqueue_many_async([other.message() for _ in range(10)])

        async def others_ran() -> bool:
            return len(others) == 10

        # They run while the breaker is open or half-open (the downstream is still down,
        # so it cannot close): they never wait for it. Not bounded by the cooldown,
        # which a loaded machine's 10 claim-run-settle rounds can outlast.
        await eventually(others_ran, timeout=20)
        assert (await read_breaker(backend, "downstream")).state != CLOSED
        await eventually(lambda: probes_failed(2), timeout=20)
        down.clear()
        await wait_finished(live_app, [h.id for h in calls], timeout=20)
    # While its only work waited behind the breaker the worker claimed once per poll
    # interval or wake-up, not in a loop (a spinning one makes thousands of claims).
    assert len(claims) <= 2 * sum(claims) + 4 * (time.monotonic() - began), claims
    state = await read_breaker(backend, "downstream")
    assert state.state == CLOSED
    # Open -> half-open -> open (probe failed) ... -> half-open -> closed.
    spells = list(zip(state.history, state.history[1:], strict=False))
    for entered, left in spells:
        within = [t for t in starts if entered.at <= t < left.at]
        if entered.target == OPEN:
            assert within == [], (entered, left, starts)
        if entered.target == HALF_OPEN:
            assert len(within) == 1, (entered, left, starts)  # the one probe
    probes = sum(t.target == HALF_OPEN for t in state.history)
    # Three failures opened it, each half-open spell had one probe, the last one
    # succeeded and the other nine calls ran after it.
    assert len(starts) == 3 + probes + 9
    assert state.history[-1].reason == "probe succeeded"
