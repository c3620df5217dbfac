"""A task call kept for later: one step of a workflow (`conveyor.workflows.canvas`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from conveyor.model.job import NewJob


class StepTask(Protocol):
    """What a step needs of its task with options (a `BoundTask`)."""

    @property
    def task(self) -> Any: ...

    def job_of(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], takes_input: bool = False
    ) -> NewJob: ...


@dataclass(frozen=True)
class Signature:
    """`task.s(*args, **kwargs)`: a call not enqueued yet. `takes_input` (the default
    of `.s`; `.si` clears it): after a step, it gets that step's result as its first
    argument (after a group, the list of its results). `allow_failure`: None follows
    the workflow's policy."""

    bound: StepTask
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    takes_input: bool = True
    allow_failure: bool | None = None

    def set(
        self, *, takes_input: bool | None = None, allow_failure: bool | None = None
    ) -> Signature:
        """A copy with the step's own input or failure policy."""
        return replace(
            self,
            takes_input=self.takes_input if takes_input is None else takes_input,
            allow_failure=self.allow_failure if allow_failure is None else allow_failure,
        )

    def __repr__(self) -> str:
        return f"<Signature {self.bound.task.name}{self.args!r}>"
