"""Per-key concurrency limits: at most N running jobs per key, across all workers.

`@app.task(limits=Limits(concurrency_key="user:{user_id}", concurrency_limit=1))` declares a key
(a template over the task's arguments, the rule of `conveyor.rules.idempotency_key`)
and its limit; `max_running=5` caps the task as a whole (a fixed key,
`MAX_RUNNING_PREFIX + task name`). The key and the limit are rendered at enqueue
and stored with the job (its `concurrency_key`, `concurrency_limit`), like aging:
the producer's setting, kept through retries, rescues and redrives.

How the backends hold the bound without scanning blocked jobs (docs/flow-control.md):
a key has `limit` slots. A job of the key holds one while it runs, and while it is
available and *unparked* (in the claim index, about to be claimed); every other
available job of the key is *parked*: still `available` to users, but out of the
claim index. The claim itself is untouched (it takes unparked jobs only, and a
claimed job keeps the slot it held), so the claim statement or script scans
nothing blocked. Every write that moves a keyed job into `available` parks it, and
every write that moves a keyed job out of running (complete, retry, dead, cancel,
snooze, release, a rescue) or out of available frees its slot and, in the same
transaction or script, unparks the key's next jobs in claim order while fewer than
the head job's own `concurrency_limit` hold slots.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from conveyor.model import validation as valid
from conveyor.model.errors import ConfigurationError, InvalidJob
from conveyor.model.job import Job, JobState
from conveyor.rules.adaptive import Adaptive, adaptive_rule
from conveyor.rules.idempotency_key import KeyTemplate

MAX_RUNNING_PREFIX = "task:"  # max_running=N is the key "task:<task name>", limit N


@dataclass(frozen=True, slots=True)
class ConcurrencyRule:
    """A task's key (a template, or one fixed key for `max_running`) and limit."""

    limit: int
    template: KeyTemplate | None = None
    fixed_key: str | None = None
    # adaptive=: the workers move the key's limit (conveyor.rules.adaptive); `limit` is its
    # start, what the jobs are enqueued with and hold until the first decision.
    adaptive: Adaptive | None = None

    def key(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
        if self.template is not None:
            return self.template.render(args, kwargs)
        assert self.fixed_key is not None
        return self.fixed_key


def task_rule(
    task_name: str,
    signature: inspect.Signature,
    concurrency_key: str | None,
    concurrency_limit: int | None,
    max_running: int | None,
    adaptive: bool | Adaptive | None = None,
) -> ConcurrencyRule | None:
    """The rule of a task's options, checked at registration (ConfigurationError)."""
    try:
        rule = adaptive_rule(adaptive)
        if rule is not None:
            if max_running is not None or concurrency_limit is not None:
                raise ConfigurationError(
                    "adaptive= finds the limit itself: give its bounds as Adaptive(min=, "
                    "max=) instead of max_running= or concurrency_limit="
                )
            if concurrency_key is None:
                return ConcurrencyRule(
                    rule.start,
                    adaptive=rule,
                    fixed_key=valid.name("task", MAX_RUNNING_PREFIX + task_name),
                )
            return ConcurrencyRule(
                rule.start,
                adaptive=rule,
                template=KeyTemplate(concurrency_key, signature, field="concurrency_key"),
            )
        if max_running is not None:
            if concurrency_key is not None or concurrency_limit is not None:
                raise ConfigurationError(
                    "max_running= and concurrency_key= cannot be combined: a job holds one "
                    "slot of one key (docs/flow-control.md)"
                )
            return ConcurrencyRule(
                valid.concurrency_limit(max_running),
                fixed_key=valid.name("task", MAX_RUNNING_PREFIX + task_name),
            )
        if concurrency_key is None and concurrency_limit is None:
            return None
        if concurrency_key is None:
            raise ConfigurationError("concurrency_limit= needs a concurrency_key=")
        limit = 1 if concurrency_limit is None else valid.concurrency_limit(concurrency_limit)
        return ConcurrencyRule(
            limit, template=KeyTemplate(concurrency_key, signature, field="concurrency_key")
        )
    except (ConfigurationError, InvalidJob, ValueError) as exc:
        raise ConfigurationError(f"task {task_name}: {exc}") from None


def job_concurrency(
    rule: ConcurrencyRule | None,
    key: str | None,
    limit: int | None,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> tuple[str | None, int | None]:
    """The key and limit one job is enqueued with: the enqueue's own (`.options`), else
    the task's rule over the call's arguments; a key given without a limit gets 1."""
    if rule is not None:
        return (
            rule.key(args, kwargs) if key is None else key,
            rule.limit if limit is None else limit,
        )
    return key, (1 if key is not None and limit is None else limit)


def held_back(job: Job, running: int, key_limit: int | None = None) -> str | None:
    """Why an available job does not run, for `jobs show` and the dashboard: its key's
    limit (`key_limit`, the key's set limit, else the job's own), when `running` jobs
    of its key (the backend's count) reach it."""
    limit = job.concurrency_limit if key_limit is None else key_limit
    if (
        job.state is not JobState.AVAILABLE
        or job.concurrency_key is None
        or limit is None
        or running < limit
    ):
        return None
    return f"waiting for a slot of key {job.concurrency_key}: {running} of {limit} running"
