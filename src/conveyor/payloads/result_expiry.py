"""Result expiry (conveyor.rules.results) as a worker plug-in (conveyor.plugins): a
completed attempt that stores a result carries its task's `result_ttl`, and the prune
interval clears the results past it (`ClaimCheck.expire_results`)."""

from __future__ import annotations

import dataclasses
import logging

from conveyor.backends.contract import Backend
from conveyor.backends.params import Settlement
from conveyor.model.job import Job
from conveyor.payloads.claim_check import ClaimCheck
from conveyor.plugins import WorkerPlugin
from conveyor.rules.results import result_ttl_of

log = logging.getLogger("conveyor.worker")


class ResultExpiry(WorkerPlugin):
    name = "result-expiry"

    def __init__(self, claim_check: ClaimCheck, interval: float) -> None:
        self.claim_check = claim_check
        self.interval = interval

    def completed(self, job: Job, settlement: Settlement) -> Settlement:
        if settlement.result is None:  # a dropped result has no expiry to keep
            return settlement
        ttl = result_ttl_of(job)
        return settlement if ttl is None else dataclasses.replace(settlement, result_ttl=ttl)

    def tick_interval(self) -> float | None:
        return self.interval

    async def tick(self, backend: Backend, now: float) -> None:
        expired = await self.claim_check.expire_results(backend, now)
        if expired:
            log.info("cleared %d results past their result_ttl", expired)
