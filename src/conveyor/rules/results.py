"""Results kept for a while: `result_ttl` (docs/workflows.md#results).

A task (`@app.task(result_ttl=timedelta(hours=1))`) or one enqueue
(`.options(result_ttl=...)`) may keep its result for a set time after the job
completed, instead of as long as the completed job is retained (the default: no
TTL, the result goes when `conveyor prune`'s retention deletes the job). The TTL
rides in the job's meta (`meta["result_ttl"]`, seconds) to the worker, which hands
it to the backend with the completion; the backend stores the expiry,
`finished_at + result_ttl`, with the job, indexed. From then on:

* reading the result (`JobHandle.result()`, a workflow member's parents' results)
  refuses it with `ResultExpired` once the app's clock reaches the expiry, and
  `Job.result_value` once the prune loop removed it: never a silent None;
* the worker's result-expiry plug-in (conveyor.payloads.result_expiry), every
  prune interval, clears expired results by the index (`ClaimCheck.expire_results`),
  and deletes those kept apart in the blob store;
* the job row stays, listed as completed, until retention prunes it.
"""

from __future__ import annotations

from typing import Any

from conveyor.model import validation as valid
from conveyor.model.job import Job

RESULT_TTL_META_KEY = "result_ttl"


def result_ttl_seconds(value: Any, where: str = "") -> float:
    """A result_ttl option (a timedelta or seconds, more than 0) as float seconds."""
    return valid.seconds("result_ttl", value, positive=True, where=where)


def result_ttl_of(job: Job) -> float | None:
    """The TTL the job's result is kept for, from its meta; None: kept with the job. A
    value that is not a positive number (meta written by hand) counts as none."""
    ttl = job.meta.get(RESULT_TTL_META_KEY) if job.meta else None
    if isinstance(ttl, (int, float)) and not isinstance(ttl, bool) and ttl > 0:
        return float(ttl)
    return None
