"""A hypothesis state machine drives random lifecycles against each backend and
checks every job against a model after every step."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from backends_under_test import BACKENDS, CLEANUPS
from conveyor import Conveyor
from conveyor.backends.base import Backend, JobFilter, Lease, Settlement
from conveyor.job import JobState
from conveyor.timeutil import ManualClock
from conveyor.claiming import strict_claim
from conveyor.worker.rescue import rescue_expired
from helpers import error, new_job

S = JobState
LEASE = 10.0


@dataclass
class Model:
    state: JobState
    attempt: int
    run_at: float
    max_attempts: int
    token: int = -1  # the lease token of the current claim, when running
    lease_until: float = 0.0


def lifecycle_machine(backend_name: str) -> type[RuleBasedStateMachine]:
    class Lifecycle(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.loop = asyncio.new_event_loop()
            self.tmp = tempfile.mkdtemp(prefix="conveyor-hyp-")
            self.clock = ManualClock()
            url = self.loop.run_until_complete(BACKENDS[backend_name](Path(self.tmp)))
            self.url = url
            self.app = Conveyor(url, clock=self.clock)
            self.backend: Backend = self.run(self.app.backend())
            self.jobs: dict[str, Model] = {}
            self.old_tokens: dict[str, int] = {}
            self.counter = 0

        def run(self, coro):  # type: ignore[no-untyped-def]
            return self.loop.run_until_complete(coro)

        def teardown(self) -> None:
            self.run(self.app.aclose())
            cleanup = CLEANUPS.get(backend_name)
            if cleanup is not None:
                self.run(cleanup(self.url))
            self.loop.close()
            shutil.rmtree(self.tmp, ignore_errors=True)

        def running(self) -> list[str]:
            return sorted(k for k, m in self.jobs.items() if m.state is S.RUNNING)

        @initialize()
        def start(self) -> None:
            pass

        @rule(n=st.integers(1, 4), delay=st.sampled_from([0.0, 0.0, 5.0]),
              max_attempts=st.integers(1, 3))
        def enqueue(self, n: int, delay: float, max_attempts: int) -> None:
            batch = []
            for _ in range(n):
                self.counter += 1
                batch.append(new_job(id=f"h{self.counter}", max_attempts=max_attempts,
                                     run_at=self.clock.now + delay if delay else None))
            self.run(self.backend.enqueue_jobs(batch))
            for job in batch:
                self.jobs[job.id] = Model(S.SCHEDULED if delay else S.AVAILABLE, 0,
                                          self.clock.now + delay, max_attempts)

        @rule(limit=st.integers(1, 5))
        def claim(self, limit: int) -> None:
            claimable = {k for k, m in self.jobs.items()
                         if m.state is S.AVAILABLE
                         or (m.state in (S.SCHEDULED, S.RETRYABLE) and m.run_at <= self.clock.now)}
            got = self.run(self.backend.fetch_jobs(strict_claim(["default"], limit, "w", LEASE)))
            assert len(got) == min(limit, len(claimable))
            for job_id in claimable:  # a claim stages every due job, claimed or not
                self.jobs[job_id].state = S.AVAILABLE
            for job in got:
                assert job.id in claimable
                model = self.jobs[job.id]
                assert job.attempt == model.attempt + 1
                assert job.lease_token != model.token
                model.state, model.attempt, model.token = S.RUNNING, job.attempt, job.lease_token
                model.run_at = job.run_at
                model.lease_until = self.clock.now + LEASE

        @precondition(lambda self: self.running())
        @rule(data=st.data(), outcome=st.sampled_from(["complete", "retry", "dead", "snooze", "release"]))
        def settle(self, data: st.DataObject, outcome: str) -> None:
            job_id = data.draw(st.sampled_from(self.running()))
            model = self.jobs[job_id]
            now = self.clock.now
            settlement = {
                "complete": Settlement(job_id, model.token, S.COMPLETED, result="1"),
                "retry": Settlement(job_id, model.token, S.RETRYABLE, error=error(model.attempt),
                                    run_at=now + 3),
                "dead": Settlement(job_id, model.token, S.DEAD, error=error(model.attempt)),
                "snooze": Settlement(job_id, model.token, S.SCHEDULED, run_at=now + 2,
                                     refund_attempt=True),
                "release": Settlement(job_id, model.token, S.AVAILABLE, refund_attempt=True),
            }[outcome]
            assert self.run(self.backend.settle_jobs([settlement])) == []
            self.old_tokens[job_id] = model.token
            model.state = settlement.state
            if settlement.run_at is not None:
                model.run_at = settlement.run_at
            if settlement.refund_attempt:
                model.attempt -= 1

        @precondition(lambda self: self.old_tokens)
        @rule(data=st.data())
        def late_ack_is_fenced(self, data: st.DataObject) -> None:
            job_id = data.draw(st.sampled_from(sorted(self.old_tokens)))
            stale = Settlement(job_id, self.old_tokens[job_id], S.COMPLETED, result="2")
            assert self.run(self.backend.settle_jobs([stale])) == [job_id]
            reply = self.run(self.backend.heartbeat_jobs([Lease(job_id, self.old_tokens[job_id])], LEASE))
            assert job_id in reply.lost

        @rule(seconds=st.sampled_from([1.0, 4.0, 11.0]))
        def time_passes(self, seconds: float) -> None:
            self.clock.advance(seconds)

        @rule()
        def rescue(self) -> None:
            expired = {k for k, m in self.jobs.items()
                       if m.state is S.RUNNING and m.lease_until < self.clock.now}
            rescued = set(self.run(rescue_expired(self.backend, self.backend.clock())))
            assert rescued == expired
            for job_id in rescued:
                model = self.jobs[job_id]
                self.old_tokens[job_id] = model.token
                model.state = S.DEAD if model.attempt >= model.max_attempts else S.AVAILABLE

        @precondition(lambda self: self.jobs)
        @rule(data=st.data())
        def cancel(self, data: st.DataObject) -> None:
            job_id = data.draw(st.sampled_from(sorted(self.jobs)))
            self.run(self.backend.cancel_job(job_id))
            model = self.jobs[job_id]
            if model.state in (S.SCHEDULED, S.AVAILABLE, S.RETRYABLE):
                model.state = S.CANCELLED

        @rule(limit=st.integers(1, 3))
        def redrive(self, limit: int) -> None:
            moved = self.run(self.backend.redrive_jobs(JobFilter(states=(S.DEAD,)), limit, False))
            dead = [k for k, m in self.jobs.items() if m.state is S.DEAD]
            assert len(moved) == min(limit, len(dead))
            for job in moved:
                model = self.jobs[job.id]
                model.state, model.attempt = S.AVAILABLE, 0

        @invariant()
        def storage_matches_model(self) -> None:
            for job_id, model in self.jobs.items():
                job = self.run(self.backend.get_job(job_id))
                assert job is not None
                assert (job.state, job.attempt) == (model.state, model.attempt), job_id
                assert (job.lease_expires_at is not None) == (job.state is S.RUNNING)

    return Lifecycle


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_random_lifecycles_match_the_model(name: str) -> None:
    machine = lifecycle_machine(name)
    machine.TestCase.settings = settings(
        max_examples=25, stateful_step_count=30, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    machine.TestCase().runTest()
