"""A workflow as it is stored now, found from any of its members: what `conveyor jobs
show` and the dashboard draw (docs/workflows.md).

Parents and children are read as the backend stored them (`parents_of`,
`dependants_of`), so parents given by hand (`depends_on=`, or a `NewJob` built
without a task) show as a workflow's do; the walk follows both ways, so it finds
every member connected to the one it starts from, up to `limit` of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from conveyor.model.job import Job


class GraphReads(Protocol):
    """What the walk reads: a Backend has both."""

    async def get_job(self, job_id: str) -> Job | None: ...
    async def dependants_of(self, job_id: str) -> list[str]: ...
    async def parents_of(self, job_id: str) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class Member:
    id: str
    job: Job | None  # None: gone (pruned or deleted)
    parents: tuple[str, ...]


async def workflow_levels(
    reads: GraphReads, job: Job, limit: int = 200
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
        parents = tuple(await reads.parents_of(job_id)) if found is not None else ()
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
