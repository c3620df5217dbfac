"""The one job state machine.

Every backend enforces this table in storage (a trigger in SQLite, guarded
updates and a trigger in PostgreSQL, a state check in every Lua script), and
`docs/state-machine.md` draws it. Changing a line here means changing those too;
the conformance suite checks that storage rejects everything not listed.
"""

from __future__ import annotations

from enum import StrEnum

from conveyor.model.job import JobState

S = JobState


class Transition(StrEnum):
    """Why a job moves; names the verb that moves it."""

    STAGE = "stage"  # scheduled/retryable job became due
    CLAIM = "claim"  # a worker leased it
    COMPLETE = "complete"  # handler returned
    RETRY = "retry"  # handler failed with a transient error, attempts left
    KILL = "kill"  # deterministic error or attempts exhausted: dead-letter
    SNOOZE = "snooze"  # handler asked to run later; no attempt used
    RELEASE = "release"  # cold shutdown returned it; no attempt used
    RESCUE = "rescue"  # lease expired (worker died); counts as an attempt
    CANCEL = "cancel"  # operator cancelled it (waiting), or the handler honoured a cancel request
    REDRIVE = "redrive"  # operator sent a dead/cancelled job back to work
    UNBLOCK = "unblock"  # every parent of a blocked workflow member ended: it may run


TRANSITIONS: dict[tuple[JobState, JobState], frozenset[Transition]] = {
    (S.BLOCKED, S.AVAILABLE): frozenset({Transition.UNBLOCK}),
    (S.BLOCKED, S.CANCELLED): frozenset({Transition.CANCEL}),  # a parent failed, or an operator
    (S.SCHEDULED, S.AVAILABLE): frozenset({Transition.STAGE}),
    (S.RETRYABLE, S.AVAILABLE): frozenset({Transition.STAGE}),
    (S.AVAILABLE, S.RUNNING): frozenset({Transition.CLAIM}),
    (S.RUNNING, S.COMPLETED): frozenset({Transition.COMPLETE}),
    (S.RUNNING, S.RETRYABLE): frozenset({Transition.RETRY}),
    (S.RUNNING, S.DEAD): frozenset({Transition.KILL, Transition.RESCUE}),
    (S.RUNNING, S.SCHEDULED): frozenset({Transition.SNOOZE}),
    (S.RUNNING, S.AVAILABLE): frozenset({Transition.SNOOZE, Transition.RELEASE, Transition.RESCUE}),
    (S.RUNNING, S.CANCELLED): frozenset({Transition.CANCEL}),
    (S.SCHEDULED, S.CANCELLED): frozenset({Transition.CANCEL}),
    (S.AVAILABLE, S.CANCELLED): frozenset({Transition.CANCEL}),
    (S.RETRYABLE, S.CANCELLED): frozenset({Transition.CANCEL}),
    (S.DEAD, S.AVAILABLE): frozenset({Transition.REDRIVE}),
    (S.CANCELLED, S.AVAILABLE): frozenset({Transition.REDRIVE}),
    # Redriving a failed parent resumes the dependants it cancelled (docs/workflows.md).
    (S.CANCELLED, S.BLOCKED): frozenset({Transition.REDRIVE}),
}

ALLOWED: frozenset[tuple[JobState, JobState]] = frozenset(TRANSITIONS)


class IllegalTransition(Exception):
    def __init__(self, old: JobState, new: JobState) -> None:
        super().__init__(f"illegal job state transition {old} -> {new}")
        self.old, self.new = old, new


def check(old: JobState, new: JobState, why: Transition | None = None) -> None:
    """Raise IllegalTransition unless old -> new is in the table (for `why`, if given)."""
    allowed = TRANSITIONS.get((old, new))
    if allowed is None or (why is not None and why not in allowed):
        raise IllegalTransition(old, new)


def initial_state(run_at: float, now: float) -> JobState:
    return S.SCHEDULED if run_at > now else S.AVAILABLE
