"""A workflow member's inputs as a worker plug-in (conveyor.plugins): its parents'
results go before its own arguments (conveyor.workflows.inputs)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from conveyor.backends.contract import Backend
from conveyor.model.job import Job
from conveyor.payloads.claim_check import ClaimCheck
from conveyor.plugins import WorkerPlugin
from conveyor.workflows.inputs import WORKFLOW_META_KEY, parent_inputs


class WorkflowInputs(WorkerPlugin):
    name = "workflow-inputs"

    def __init__(
        self, get_backend: Callable[[], Awaitable[Backend]], claim_check: ClaimCheck
    ) -> None:
        self._backend = get_backend
        self.claim_check = claim_check

    def leading_args(self, job: Job) -> Awaitable[list[Any]] | None:
        if WORKFLOW_META_KEY not in job.meta:  # not a workflow member: no coroutine
            return None
        return self._inputs(job)

    async def _inputs(self, job: Job) -> list[Any]:
        return await parent_inputs(await self._backend(), self.claim_check, job)
