"""A workflow as it is stored now, found from any of its members: what `conveyor jobs
show` and the dashboard draw (docs/workflows.md).

Parents are read from each member's meta (`workflow.parents`), children from the
backend (`dependants_of`); the walk follows both ways, so it finds every member
connected to the one it starts from, up to `limit` of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from .job import Job
from .workflow_inputs import WORKFLOW_META_KEY


class GraphReads(Protocol):
    """What the walk reads: a Backend has both."""

    async def get_job(self, job_id: str) -> Job | None: ...
    async def dependants_of(self, job_id: str) -> list[str]: ...


def parents_in_meta(job: Job) -> list[str]:
    flow = job.meta.get(WORKFLOW_META_KEY) if isinstance(job.meta, dict) else None
    parents = flow.get("parents") if isinstance(flow, dict) else None
    return [p for p in parents if isinstance(p, str)] if isinstance(parents, list) else []


@dataclass(frozen=True, slots=True)
class Member:
    id: str
    job: Job | None  # None: gone (pruned or deleted)
    parents: tuple[str, ...]


async def workflow_levels(reads: GraphReads, job: Job, limit: int = 200
                          ) -> tuple[list[list[Member]], bool]:
    """The members connected to `job`, by level (0: those with no parent among them;
    a member sits one level below its deepest parent), and whether the walk stopped
    at `limit`. A job outside any workflow gives ([[its member]], False)."""
    members: dict[str, Member] = {}
    queue: list[tuple[str, Job | None]] = [(job.id, job)]
    while queue and len(members) < limit:
        job_id, found = queue.pop(0)
        if job_id in members:
            continue
        if found is None:
            found = await reads.get_job(job_id)
        parents = tuple(parents_in_meta(found)) if found is not None else ()
        members[job_id] = Member(job_id, found, parents)
        for other in (*parents, *(await reads.dependants_of(job_id))):
            if other not in members:
                queue.append((other, None))
    return _levels(members), bool(queue)


def _levels(members: dict[str, Member]) -> list[list[Member]]:
    depth: dict[str, int] = {}

    def depth_of(job_id: str, seen: Sequence[str] = ()) -> int:
        if job_id not in depth:
            inside = [p for p in members[job_id].parents if p in members and p not in seen]
            depth[job_id] = 1 + max((depth_of(p, (*seen, job_id)) for p in inside), default=-1)
        return depth[job_id]

    levels: dict[int, list[Member]] = {}
    for job_id, member in members.items():
        levels.setdefault(depth_of(job_id), []).append(member)
    return [levels[n] for n in sorted(levels)]
