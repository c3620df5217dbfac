"""Workflows: chains, groups and chords of task calls (docs/workflows.md).

>>> chain(extract.s(1), transform.s(), load.s()).enqueue()
>>> chord(group(fetch.s(url) for url in urls), merge.s()).enqueue()

A workflow is compiled into ordinary jobs with `depends_on` (conveyor.rules.dependencies)
and enqueued in one batch, parents before their dependants, so the backend stores
it whole or not at all. What a member receives from its parents is written in its
meta under `workflow` and read by the worker when it runs (conveyor.workflows.inputs).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from conveyor.model.errors import InvalidJob
from conveyor.model.job import NewJob
from conveyor.payloads.task_payload import new_job_id

# The input of a step after a single job: that job's result (ONE_RESULT); after a
# group: the list of its members' results, in order (ALL_RESULTS).
from conveyor.workflows.inputs import ALL_RESULTS, ONE_RESULT, WORKFLOW_META_KEY
from conveyor.workflows.signature import Signature

if TYPE_CHECKING:
    from conveyor.handle import JobHandle


@dataclass(frozen=True)
class Chain:
    steps: tuple[Node, ...]


@dataclass(frozen=True)
class Group:
    members: tuple[Node, ...]


Node = Signature | Chain | Group


def _node(item: Any) -> Node:
    if isinstance(item, Workflow):
        return item.root
    if isinstance(item, (Signature, Chain, Group)):
        return item
    raise InvalidJob("workflow step", item, "task.s(...), chain(...), group(...) or chord(...)")


def chain(*steps: Any, allow_failure: bool = False) -> Workflow:
    """Each step starts when the one before it completed, with its result as the first
    argument (`task.si(...)` takes none)."""
    if not steps:
        raise InvalidJob("chain", steps, "at least one step")
    return Workflow(Chain(tuple(_node(step) for step in steps)), allow_failure)


def group(*members: Any, allow_failure: bool = False) -> Workflow:
    """Members that run in parallel; `group(gen)` takes one iterable as well."""
    if len(members) == 1 and not isinstance(members[0], (Signature, Workflow)):
        members = tuple(members[0])
    if not members:
        raise InvalidJob("group", members, "at least one member")
    return Workflow(Group(tuple(_node(member) for member in members)), allow_failure)


def chord(header: Any, callback: Any, allow_failure: bool = False) -> Workflow:
    """`callback` runs once, when every member of `header` (a group) ended, with the
    list of their results in the group's order."""
    members = header if isinstance(header, Workflow) else group(*header)
    if not isinstance(members.root, Group):
        raise InvalidJob("chord header", header, "a group")
    return chain(members, callback, allow_failure=allow_failure)


def _ends_in_group(node: Node) -> bool:
    while isinstance(node, Chain):
        node = node.steps[-1]
    return isinstance(node, Group)


class Workflow:
    """A chain, group or chord not enqueued yet. `allow_failure`: members run even
    when a parent ended dead or cancelled, with a `Failure` as that parent's input;
    otherwise such a parent cancels what depends on it."""

    def __init__(self, root: Node, allow_failure: bool = False) -> None:
        self.root, self.allow_failure = root, allow_failure

    def __repr__(self) -> str:
        return f"<Workflow {type(self.root).__name__.lower()}>"

    def jobs(self, workflow_id: str | None = None) -> tuple[list[NewJob], list[str]]:
        """The jobs of this workflow, parents first, and the ids of its last members."""
        out: list[NewJob] = []
        exits = self._compile(self.root, (), None, workflow_id or new_job_id(), out)
        return out, exits

    def _compile(
        self,
        node: Node,
        parents: tuple[str, ...],
        given: str | None,
        workflow_id: str,
        out: list[NewJob],
    ) -> list[str]:
        if isinstance(node, Group):
            return [
                e for m in node.members for e in self._compile(m, parents, given, workflow_id, out)
            ]
        if isinstance(node, Chain):
            exits, step_input = list(parents), given
            for step in node.steps:
                ends = _ends_in_group(step)
                exits = self._compile(step, tuple(exits), step_input, workflow_id, out)
                step_input = ALL_RESULTS if ends else ONE_RESULT
            return exits
        takes = node.takes_input and given is not None
        new = node.bound.job_of(node.args, node.kwargs, takes_input=takes)
        allow = node.allow_failure
        if allow is None:
            allow = new.allow_failure or self.allow_failure
        depends_on = (*new.depends_on, *parents)
        meta = {
            **new.meta,
            WORKFLOW_META_KEY: {
                "id": workflow_id,
                "parents": list(depends_on),
                "inputs": list(parents),
                "input": given if takes else None,
            },
        }
        out.append(replace(new, depends_on=depends_on, allow_failure=allow, meta=meta))
        return [new.id]

    def _app(self) -> Any:
        node: Node = self.root
        while not isinstance(node, Signature):
            node = node.steps[0] if isinstance(node, Chain) else node.members[0]
        return node.bound.task.app

    def enqueue(self) -> WorkflowHandle:
        jobs, exits = self.jobs()
        return WorkflowHandle(self._app().enqueue_many(jobs), exits, _ends_in_group(self.root))

    async def enqueue_async(self) -> WorkflowHandle:
        jobs, exits = self.jobs()
        return WorkflowHandle(
            await self._app().enqueue_many_async(jobs), exits, _ends_in_group(self.root)
        )


class WorkflowHandle:
    """An enqueued workflow: `jobs` (handles, parents first) and its result: the last
    member's, or the list of the last group's results."""

    def __init__(
        self, jobs: Sequence[JobHandle[Any]], exits: Iterable[str], many: bool = False
    ) -> None:
        self.many = many  # ends in a group: the result is a list
        self.jobs = list(jobs)
        self.exits = [next(h for h in self.jobs if h.id == e) for e in exits]
        self.id = str(self.jobs[0].job.meta.get(WORKFLOW_META_KEY, {}).get("id", ""))

    def __repr__(self) -> str:
        return f"<WorkflowHandle {self.id} {len(self.jobs)} jobs>"

    async def cancel_async(self) -> list[Any]:
        """Cancel what has not started (blocked or waiting members, and onwards what
        depends on them); ask running members to stop. Returns the members as they are."""
        if not self.jobs:
            return []
        admin = self.jobs[0].app.admin
        return [await admin.cancel(handle.id) for handle in self.jobs]

    def cancel(self) -> list[Any]:
        return self.jobs[0].app.portal.call(self.cancel_async()) if self.jobs else []

    def result(self, timeout: float | None = None) -> Any:
        """Wait until the last members finished; raise JobFailed if one failed. The
        timeout is for the whole workflow, not for each member."""
        return self.jobs[0].app.portal.call(self.result_async(timeout))

    async def result_async(self, timeout: float | None = None) -> Any:
        # One member at a time against one deadline: the wait is the slowest member's,
        # with one waiter (not one per member of a wide group) and none left behind
        # when a member failed.
        deadline = None if timeout is None else time.monotonic() + timeout
        results = []
        for handle in self.exits:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            results.append(await handle.result_async(left))
        return results if self.many else results[0]
