"""Adaptive concurrency against a downstream of fixed capacity (docs/downstreams.md):
two workers, each with more slots than the downstream takes, find its capacity
through the backend's shared limit. The downstream refuses (a 429) every call past
`CAPACITY` in flight; after the warm-up the fleet's throughput is within 20 % of the
capacity and fewer than 5 % of its calls are refused.

The window is the default 1 s and the calls take 0.3 s; the warm-up is cut from the
rule's 30 s to 10 s by starting at 12 (the climb to 20 takes eight windows), then 8 s
are measured."""

from __future__ import annotations

import asyncio
import time

from downstream_bounds import assert_near_capacity
from helpers import RunningWorker

from conveyor import Adaptive, Conveyor, Limits, RetryOptions
from conveyor.worker import WorkerConfig

CAPACITY = 20
SERVICE = 0.5  # seconds a call takes: the capacity is CAPACITY / SERVICE calls a second
WARM_UP, MEASURED = 10.0, 8.0


class Throttled(Exception):
    """What an HTTP client raises for a 429 (its status on the error)."""

    status_code = 429


class Downstream:
    """A service that takes CAPACITY calls at once and refuses the rest."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.served: list[float] = []
        self.refused: list[float] = []

    async def call(self) -> None:
        if self.in_flight >= CAPACITY:
            self.refused.append(time.monotonic())
            raise Throttled("429 Too Many Requests")
        self.in_flight += 1
        try:
            await asyncio.sleep(SERVICE)
        finally:
            self.in_flight -= 1
        self.served.append(time.monotonic())


async def test_the_fleet_settles_near_the_downstreams_capacity(live_app: Conveyor) -> None:
    downstream = Downstream()

    @live_app.task(
        name="calls",
        queue="calls",
        max_attempts=1000,
        retry=RetryOptions(backoff_base=0.01, backoff_cap=0.05),
        limits=Limits(adaptive=Adaptive(min=1, max=40, window=1.0, start=12)),
    )
    async def calls(i: int) -> None:
        await downstream.call()

    await live_app.enqueue_many_async([calls.message(i) for i in range(2500)])
    config = WorkerConfig(queues=("calls",), concurrency=16, poll_interval=0.02)
    start = time.monotonic()
    async with RunningWorker(live_app, config), RunningWorker(live_app, config):
        await asyncio.sleep(WARM_UP + MEASURED)  # the test's span, not a synchronisation
    assert_near_capacity(
        downstream.served, downstream.refused, start + WARM_UP, MEASURED, CAPACITY / SERVICE
    )
