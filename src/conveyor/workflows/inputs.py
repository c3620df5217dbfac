"""What a workflow member receives from its parents, read when it runs.

A member's meta names its parents, those whose results are its input, and how it
takes them (conveyor.workflows.canvas): one parent's result, or the list of their results
in order. A job given `depends_on` by hand has parents and no input. A parent that ended dead or
cancelled (the member runs anyway only with `allow_failure`) gives a `Failure`. A
parent pruned, or whose result expired (result_ttl), makes the member a CorruptPayload.
Results are read here, at run time, rather than copied into the member when its
parents end: the settle statement stays a write of a few columns, and a big result
kept in the blob store (conveyor.payloads.claim_check) is read once, by the one who needs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from conveyor.backends.params import JobFilter, JobPage
from conveyor.model.errors import CorruptPayload, ResultExpired
from conveyor.model.job import Job, JobState
from conveyor.rules.dependencies import parents_of

if TYPE_CHECKING:
    from conveyor.backends.contract import Backend
    from conveyor.payloads.claim_check import ClaimCheck

WORKFLOW_META_KEY = "workflow"
ONE_RESULT = "result"
ALL_RESULTS = "results"


@dataclass(frozen=True, slots=True)
class Failure:
    """A parent that did not complete, as its dependant's input (allow_failure)."""

    job_id: str
    state: str  # dead or cancelled
    type: str  # the last error's type, "" if none was recorded
    message: str


def input_mode(job: Job) -> tuple[str | None, list[str]]:
    """(what the job takes from its parents, its parents in order); (None, []) for a
    job outside a workflow or one that takes nothing."""
    flow = job.meta.get(WORKFLOW_META_KEY) if job.meta else None
    if not isinstance(flow, dict) or flow.get("input") not in (ONE_RESULT, ALL_RESULTS):
        return None, []
    parents = flow.get("inputs")
    if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
        raise CorruptPayload(f"job {job.id}: meta.workflow.inputs is not a list of ids")
    return str(flow["input"]), parents


async def parent_inputs(backend: Backend, claim_check: ClaimCheck, job: Job) -> list[Any]:
    """The arguments to put before the job's own: [] or [input]."""
    mode, parents = input_mode(job)
    if mode is None:
        return []
    # One read for every parent (a chord's callback may have thousands).
    found = {
        p.id: p
        for p in await backend.list_jobs(
            JobPage(where=JobFilter(ids=parents_of(parents)), limit=len(parents))
        )
    }
    values = [await _value_of(claim_check, job, parent, found.get(parent)) for parent in parents]
    return [values[0] if mode == ONE_RESULT and values else values]


async def _value_of(claim_check: ClaimCheck, job: Job, parent_id: str, parent: Job | None) -> Any:
    if parent is None:
        raise CorruptPayload(
            f"job {job.id}: its parent {parent_id} no longer exists "
            "(pruned or deleted) and its result with it"
        )
    if parent.state is JobState.COMPLETED:
        try:
            return await claim_check.result_value(parent)
        except ValueError:
            raise CorruptPayload(
                f"job {job.id}: the result of its parent {parent_id} cannot be read"
            ) from None
        except ResultExpired as gone:  # kept for less than the workflow took: dead at once
            raise CorruptPayload(
                f"job {job.id}: the result of its parent {parent_id} "
                f"expired at {gone.expired_at:.3f} (result_ttl) before "
                "it ran"
            ) from None
    last = parent.errors[-1] if parent.errors else None
    return Failure(
        parent.id, parent.state.value, last.type if last else "", last.message if last else ""
    )
