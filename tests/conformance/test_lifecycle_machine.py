"""A hypothesis state machine drives random lifecycles against each shared backend
and the memory backend side by side: memory is the model. After every step both
answered the same (claimed the same jobs in the same order, found the same stale
outcomes, rescued and redrove the same jobs) and hold the same jobs, field by
field; and every state change either of them made is in the one transition table."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from backends_under_test import BACKENDS, CLEANUPS, SHARED_BACKENDS
from helpers import error, new_job
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from conveyor import Conveyor
from conveyor.backends.claiming import strict_claim
from conveyor.backends.contract import Backend
from conveyor.backends.params import BulkAction, Heartbeat, JobFilter, Lease, Settlement
from conveyor.model.clock import ManualClock
from conveyor.model.job import Job, JobState
from conveyor.model.lifecycle import ALLOWED
from conveyor.worker.rescue import rescue_expired

S = JobState
LEASE = 10.0
MODEL = "memory"


def snapshot(job: Job | None) -> tuple[Any, ...] | None:
    """What a backend must agree on about a job."""
    if job is None:
        return None
    return (
        job.state,
        job.attempt,
        job.max_attempts,
        job.run_at,
        job.created_at,
        job.lease_token,
        job.lease_expires_at,
        job.worker_id,
        job.finished_at,
        job.result_value,
        [(e.attempt, e.type) for e in job.errors],
        job.cancel_requested,
        job.corrupt,
    )


def lifecycle_machine(backend_name: str) -> type[RuleBasedStateMachine]:
    class Lifecycle(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.loop = asyncio.new_event_loop()
            self.tmp = tempfile.mkdtemp(prefix="conveyor-hyp-")
            self.clock = ManualClock()
            self.urls = {
                name: self.run(BACKENDS[name](Path(self.tmp))) for name in (backend_name, MODEL)
            }
            self.apps = {name: Conveyor(url, clock=self.clock) for name, url in self.urls.items()}
            self.real: Backend = self.run(self.apps[backend_name].backend())
            self.model: Backend = self.run(self.apps[MODEL].backend())
            self.ids: list[str] = []
            self.last: dict[str, tuple[JobState, JobState]] = {}  # id -> (real, model) states
            self.old_tokens: dict[str, int] = {}
            self.counter = 0

        def run(self, coro):  # type: ignore[no-untyped-def]
            return self.loop.run_until_complete(coro)

        def both(self, verb: str, *args: Any) -> Any:
            """Call `verb` on both backends; they must answer the same. Returns it."""
            real = self.run(getattr(self.real, verb)(*args))
            model = self.run(getattr(self.model, verb)(*args))
            assert shape(real) == shape(model), (verb, args, real, model)
            return model

        def teardown(self) -> None:
            for name, app in self.apps.items():
                self.run(app.aclose())
                cleanup = CLEANUPS.get(name)
                if cleanup is not None:
                    self.run(cleanup(self.urls[name]))
            self.loop.close()
            shutil.rmtree(self.tmp, ignore_errors=True)

        def in_state(self, state: JobState) -> list[str]:
            jobs = [self.run(self.model.get_job(i)) for i in self.ids]
            return sorted(j.id for j in jobs if j is not None and j.state is state)

        @initialize()
        def start(self) -> None:
            pass

        @rule(
            n=st.integers(1, 4),
            delay=st.sampled_from([0.0, 0.0, 5.0]),
            max_attempts=st.integers(1, 3),
            priority=st.sampled_from([0, 0, 1]),
        )
        def enqueue(self, n: int, delay: float, max_attempts: int, priority: int) -> None:
            batch = []
            for _ in range(n):
                self.counter += 1
                batch.append(
                    new_job(
                        id=f"h{self.counter}",
                        max_attempts=max_attempts,
                        priority=priority,
                        run_at=self.clock.now + delay if delay else None,
                    )
                )
            self.both("enqueue_jobs", batch)
            self.ids += [job.id for job in batch]

        @rule(limit=st.integers(1, 5))
        def claim(self, limit: int) -> None:
            self.both("fetch_jobs", strict_claim(["default"], limit, "w", LEASE))

        @precondition(lambda self: self.in_state(S.RUNNING))
        @rule(
            data=st.data(),
            outcome=st.sampled_from(["complete", "retry", "dead", "snooze", "release"]),
        )
        def settle(self, data: st.DataObject, outcome: str) -> None:
            job_id = data.draw(st.sampled_from(self.in_state(S.RUNNING)))
            job = self.run(self.model.get_job(job_id))
            now, token = self.clock.now, job.lease_token
            settlement = {
                "complete": Settlement(job_id, token, S.COMPLETED, result="1"),
                "retry": Settlement(
                    job_id, token, S.RETRYABLE, error=error(job.attempt), run_at=now + 3
                ),
                "dead": Settlement(job_id, token, S.DEAD, error=error(job.attempt)),
                "snooze": Settlement(
                    job_id, token, S.SCHEDULED, run_at=now + 2, refund_attempt=True
                ),
                "release": Settlement(job_id, token, S.AVAILABLE, refund_attempt=True),
            }[outcome]
            assert self.both("settle_jobs", [settlement]) == []
            self.old_tokens[job_id] = token

        @precondition(lambda self: self.old_tokens)
        @rule(data=st.data())
        def late_ack_is_fenced(self, data: st.DataObject) -> None:
            job_id = data.draw(st.sampled_from(sorted(self.old_tokens)))
            stale = Settlement(job_id, self.old_tokens[job_id], S.COMPLETED, result="2")
            assert self.both("settle_jobs", [stale]) == [job_id]
            reply = self.both(
                "heartbeat_jobs",
                Heartbeat(leases=[Lease(job_id, self.old_tokens[job_id])], lease_seconds=LEASE),
            )
            assert job_id in reply.lost

        @precondition(lambda self: self.in_state(S.RUNNING))
        @rule(data=st.data())
        def heartbeat(self, data: st.DataObject) -> None:
            job_id = data.draw(st.sampled_from(self.in_state(S.RUNNING)))
            job = self.run(self.model.get_job(job_id))
            reply = self.both(
                "heartbeat_jobs",
                Heartbeat(leases=[Lease(job_id, job.lease_token)], lease_seconds=LEASE),
            )
            assert not reply.lost

        @rule(seconds=st.sampled_from([1.0, 4.0, 11.0]))
        def time_passes(self, seconds: float) -> None:
            self.clock.advance(seconds)

        @rule()
        def rescue(self) -> None:
            running = {
                i: self.run(self.model.get_job(i)).lease_token for i in self.in_state(S.RUNNING)
            }
            real = set(self.run(rescue_expired(self.real, self.clock.now)))
            model = set(self.run(rescue_expired(self.model, self.clock.now)))
            assert real == model
            self.old_tokens.update({i: running[i] for i in model})

        @precondition(lambda self: self.ids)
        @rule(data=st.data())
        def cancel(self, data: st.DataObject) -> None:
            self.both("cancel_job", data.draw(st.sampled_from(self.ids)))

        @rule(limit=st.integers(1, 3), state=st.sampled_from([S.DEAD, S.CANCELLED]))
        def redrive(self, limit: int, state: JobState) -> None:
            self.both(
                "redrive_jobs",
                BulkAction(where=JobFilter(states=(state,)), limit=limit, dry_run=False),
            )

        @invariant()
        def the_backend_holds_what_the_model_holds(self) -> None:
            for job_id in self.ids:
                real = self.run(self.real.get_job(job_id))
                model = self.run(self.model.get_job(job_id))
                assert snapshot(real) == snapshot(model), job_id
                assert model is not None and real is not None
                assert (model.lease_expires_at is not None) == (model.state is S.RUNNING)
                before = self.last.get(job_id)
                if before is not None:
                    for was, now in zip(before, (real.state, model.state), strict=True):
                        assert was == now or in_one_step(was, now), (job_id, was, now)
                self.last[job_id] = (real.state, model.state)
            assert self.both("count_jobs", JobFilter()) == len(self.ids)
            self.both("queue_stats")

    return Lifecycle


def in_one_step(was: JobState, now: JobState) -> bool:
    """A move one verb makes: one transition of the table, or a claim's two (it
    stages a due job, then claims it)."""
    return (was, now) in ALLOWED or (
        (was, S.AVAILABLE) in ALLOWED and (S.AVAILABLE, now) in ALLOWED and now is S.RUNNING
    )


def shape(reply: Any) -> Any:
    """A reply in comparable form: jobs as their snapshots (with ids), the rest as is."""
    if isinstance(reply, Job):
        return (reply.id, snapshot(reply))
    if isinstance(reply, list):
        return [shape(item) for item in reply]
    return reply


@pytest.mark.parametrize("name", sorted(SHARED_BACKENDS))
def test_random_lifecycles_match_the_memory_model(name: str) -> None:
    machine = lifecycle_machine(name)
    machine.TestCase.settings = settings(
        max_examples=25,
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    machine.TestCase().runTest()
