"""The argument lists of the two batch scripts, enqueue and the settle scripts
(complete, fail, release), and what their replies mean.

Built from Python values alone, without a client: the enqueue connections send the
enqueue commands as well as the asyncio client.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from conveyor.backends.claiming import claim_rank
from conveyor.backends.params import ClaimRequest, Settlement
from conveyor.backends.redis.codec import float_arg, job_from_reply, optional_arg
from conveyor.backends.redis.enqueue_connections import Command
from conveyor.backends.redis.keys import Keys
from conveyor.backends.redis.script_calls import ScriptCall
from conveyor.model.errors import InvalidJob, RefusedJob
from conveyor.model.job import Job, JobState, NewJob
from conveyor.model.lifecycle import IllegalTransition, initial_state
from conveyor.model.version import __version__
from conveyor.rules.backpressure import raise_if_refused, shed_error
from conveyor.rules.fairness import vtime_step

ENQUEUE_CHUNK = 1000  # jobs per script call; several calls still go in one round trip


def enqueue_script(jobs: Sequence[NewJob]) -> str:
    """The bounded script only for batches that need it: it is sent with more helpers;
    the dependants' one for a workflow (conveyor.rules.dependencies)."""
    if any(job.depends_on for job in jobs):
        return "enqueue_dependants"
    return "enqueue_bounded" if any(job.bound is not None for job in jobs) else "enqueue"


def _links(jobs: Sequence[NewJob]) -> list[str]:
    """The dependants script's ARGV[3] (nothing for the other enqueue scripts)."""
    if not any(job.depends_on for job in jobs):
        return []
    return [
        json.dumps(
            {
                "v": __version__,
                "jobs": {
                    job.id: {"p": list(job.depends_on), "a": job.allow_failure}
                    for job in jobs
                    if job.depends_on
                },
            }
        )
    ]


def enqueue_commands(
    jobs: Sequence[NewJob], now: float, sha: str, keys: Keys
) -> tuple[list[Job], list[Command]]:
    """The jobs as stored when new, and the EVALSHA commands (of the enqueue script,
    `sha`) that store them."""
    now_text = float_arg(now)
    links = _links(jobs)
    head: list[str | int] = [
        "EVALSHA",
        sha,
        5,
        keys.seq,
        keys.due,
        keys.unique,
        keys.queues,
        keys.jobs,
        keys.base,
        now_text,
        *links,
    ]
    if links and len(jobs) > ENQUEUE_CHUNK:  # a workflow is one script call, all or nothing
        raise InvalidJob("jobs", len(jobs), f"at most {ENQUEUE_CHUNK} jobs in a workflow batch")
    made: list[Job] = []
    commands: list[Command] = []
    shed_errors: dict[str, str] = {}  # per shedding queue: the record its shed jobs keep
    for start in range(0, len(jobs), ENQUEUE_CHUNK):
        command = list(head)
        for new in jobs[start : start + ENQUEUE_CHUNK]:
            if new.run_at is None:  # the common case: due now, text already made
                run_at, run_at_text, state = now, now_text, JobState.AVAILABLE
            else:
                run_at, run_at_text = new.run_at, float_arg(new.run_at)
                state = initial_state(run_at, now)
            command += (
                new.id,
                new.queue,
                new.task,
                new.payload,
                state.value,
                new.priority,
                new.max_attempts,
                run_at_text,
                _rank_micros(
                    run_at if new.aging is None else claim_rank(new.priority, run_at, new.aging)[1]
                ),
                optional_arg(new.unique_key),
                "" if new.unique_for is None else float_arg(new.unique_for),
                "" if new.timeout is None else float_arg(new.timeout),
                json.dumps(new.meta) if new.meta else "",
                "" if new.aging is None else float_arg(new.aging),
                "" if new.bound is None or new.depends_on else new.bound.max_waiting,
                _shed_error(new, now, shed_errors),
                optional_arg(new.fairness_key),
                "" if new.fairness_key is None else vtime_step(new.fairness_weight),
                optional_arg(new.concurrency_key),
                "" if new.concurrency_limit is None else new.concurrency_limit,
                optional_arg(new.rate_key),
            )
            made.append(
                Job(
                    id=new.id,
                    task=new.task,
                    queue=new.queue,
                    payload=new.payload,
                    state=state,
                    priority=new.priority,
                    max_attempts=new.max_attempts,
                    run_at=run_at,
                    created_at=now,
                    unique_key=new.unique_key,
                    unique_for=new.unique_for,
                    timeout=new.timeout,
                    meta=new.meta,
                    aging=new.aging,
                    concurrency_key=new.concurrency_key,
                    concurrency_limit=new.concurrency_limit,
                    rate_key=new.rate_key,
                )
            )
        commands.append(command)
    return made, commands


def _shed_error(new: NewJob, now: float, cache: dict[str, str]) -> str:
    if new.bound is None or not new.bound.shed_oldest:
        return ""
    if new.queue not in cache:
        cache[new.queue] = shed_error(new.queue, new.bound.max_waiting, now)
    return cache[new.queue]


def _rank_micros(run_at: float) -> str:
    """The first 17 digits of an available-index member (see keys.py), clamped to them."""
    return f"{min(max(0, int(run_at * 1e6)), 10**17 - 1):017d}"


def enqueued_jobs(made: list[Job], replies: list[Any], jobs: Sequence[NewJob]) -> list[Job]:
    """Each job as stored: the new one (reply 0) or the one it duplicates; QueueFull
    if a bounded queue refused some (reply 'full:<depth>')."""
    flat = [reply for chunk in replies for reply in chunk]
    stored: list[Job | None] = []
    refused: dict[int, RefusedJob] = {}
    for pos, (job, reply) in enumerate(zip(made, flat, strict=True)):
        if isinstance(reply, bytes):
            reply = reply.decode()
        if isinstance(reply, str) and reply.startswith("full:"):
            bound = jobs[pos].bound
            refused[pos] = RefusedJob(
                "", job.queue, int(reply[5:]), 0 if bound is None else bound.max_waiting
            )
            stored.append(None)
        else:
            stored.append(job if reply == 0 else job_from_reply(reply))
    return raise_if_refused(jobs, stored, refused)


def settle_calls(
    settlements: Sequence[Settlement], now: float, keys: Keys, max_completed: int, max_dead: int
) -> list[ScriptCall]:
    """One call per settle script that has work: complete, fail, release."""
    now_text = float_arg(now)
    complete: list[str | int] = [now_text, max_completed, __version__]
    fail: list[str | int] = [now_text, max_completed, max_dead, __version__]
    release: list[str | int] = []
    for s in settlements:
        if s.state is JobState.COMPLETED:
            expires = (
                "" if s.result is None or s.result_ttl is None else float_arg(now + s.result_ttl)
            )
            complete += [s.job_id, s.token, optional_arg(s.result), expires]
            continue
        run_at = optional_arg(None if s.run_at is None else float_arg(s.run_at))
        if s.refund_attempt:
            release += [s.job_id, s.token, s.state.value, run_at]
        else:
            error = None if s.error is None else s.error.to_json()
            fail += [s.job_id, s.token, s.state.value, run_at, optional_arg(error)]
    calls: list[ScriptCall] = []
    if len(complete) > 3:
        calls.append(("complete", [keys.unique], complete))
    if len(fail) > 4:
        calls.append(("fail", [keys.due, keys.unique], fail))
    if release:
        calls.append(("release", [keys.due], release))
    return calls


def stale_settlements(settlements: Sequence[Settlement], replies: Sequence[Any]) -> list[str]:
    """The ids the settle scripts rejected as stale (the lease moved on); a rejection
    for an illegal transition raises IllegalTransition."""
    stale: list[str] = []
    illegal: str | None = None
    for rejected in replies:
        for job_id, code in rejected:
            if code == "stale":
                stale.append(job_id)
            else:
                illegal = job_id
    if illegal is not None:
        target = next(s.state for s in settlements if s.job_id == illegal)
        raise IllegalTransition(JobState.RUNNING, target)
    return stale


def cancel_args(now: float, job_id: str, max_completed: int) -> list[str | int]:
    """cancel.lua's ARGV after the prefix."""
    return [float_arg(now), job_id, max_completed, __version__]


def bulk_cancel_args(now: float, max_completed: int, ids: Sequence[str]) -> list[str | int]:
    """cancel_waiting.lua's ARGV after the prefix."""
    return [float_arg(now), max_completed, __version__, *ids]


def claim_args(request: ClaimRequest, now: float, stage_limit: int) -> list[str | int]:
    """The ARGV of claim.lua after the prefix (its header says what each is)."""
    args: list[str | int] = [
        float_arg(now),
        float_arg(now + request.lease_seconds),
        request.worker_id,
        request.limit,
        stage_limit,
        len(request.rate_limits),
    ]
    for limit in request.rate_limits:
        args += [limit.key, float_arg(limit.rate), limit.burst]
    for entry in request.queues:
        args += [entry.name, entry.quota, -1 if entry.ceiling is None else entry.ceiling]
    return args
