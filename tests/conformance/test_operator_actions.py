"""Operator actions on every backend: the bulk cancel and task-name verbs of the
Inspector, and what `app.admin` builds on them (short task names, case-insensitive
error types, retry, purge, and the audit trail every action leaves)."""

from __future__ import annotations

import pytest
from helpers import claim_one, error, new_job, state_of

from conveyor import Conveyor
from conveyor.admin.api import make_filter
from conveyor.backends.claiming import strict_claim
from conveyor.backends.contract import Backend
from conveyor.backends.params import BulkAction, JobFilter, JobPage, Settlement
from conveyor.model.clock import ManualClock
from conveyor.model.job import JobState
from conveyor.model.names import AmbiguousTaskName
from conveyor.observe.audit import MAX_IDS, RETENTION, Actor

DEAD = JobFilter(states=(JobState.DEAD,))


async def kill(
    backend: Backend,
    clock: ManualClock,
    ids: list[str],
    task: str,
    type_: str = "ValueError",
    queue: str = "default",
) -> None:
    await backend.enqueue_jobs([new_job(id=i, task=task, queue=queue) for i in ids])
    for _ in ids:
        job = await claim_one(backend, queue=queue)
        clock.advance(1)
        await backend.settle_jobs(
            [Settlement(job.id, job.lease_token, JobState.DEAD, error=error(job.attempt, type_))]
        )


async def waiting_and_other_jobs(backend: Backend, clock: ManualClock) -> dict[str, str]:
    """One job in each state, in queue q (and one available job in queue other)."""
    await backend.enqueue_jobs(
        [
            new_job(id="sched", queue="q", run_at=clock() + 3600),
            new_job(id="run", queue="q"),
            new_job(id="retry", queue="q"),
            new_job(id="done", queue="q"),
            new_job(id="dead", queue="q"),
        ]
    )
    for job_id, outcome in (
        ("run", None),
        ("retry", JobState.RETRYABLE),
        ("done", JobState.COMPLETED),
        ("dead", JobState.DEAD),
    ):
        job = await claim_one(backend, queue="q")
        assert job.id == job_id
        if outcome is not None:
            await backend.settle_jobs(
                [
                    Settlement(
                        job.id,
                        job.lease_token,
                        outcome,
                        run_at=clock() + 600,
                        error=None if outcome is JobState.COMPLETED else error(1),
                    )
                ]
            )
    await backend.enqueue_jobs(
        [new_job(id="avail", queue="q"), new_job(id="elsewhere", queue="other")]
    )
    return {
        j: (await state_of(backend, j)).value
        for j in ("sched", "run", "retry", "done", "dead", "avail", "elsewhere")
    }


async def test_cancel_jobs_cancels_only_waiting_jobs_of_the_filter(
    backend: Backend, clock: ManualClock
) -> None:
    before = await waiting_and_other_jobs(backend, clock)
    assert before == {
        "sched": "scheduled",
        "run": "running",
        "retry": "retryable",
        "done": "completed",
        "dead": "dead",
        "avail": "available",
        "elsewhere": "available",
    }
    in_q = JobFilter(queues=("q",))
    assert sorted(await backend.cancel_jobs(BulkAction(where=in_q, limit=100, dry_run=True))) == [
        "avail",
        "retry",
        "sched",
    ]
    assert await state_of(backend, "avail") is JobState.AVAILABLE  # a dry run changes nothing
    assert (
        await backend.cancel_jobs(
            BulkAction(
                where=JobFilter(queues=("q",), states=(JobState.RUNNING,)), limit=100, dry_run=False
            )
        )
        == []
    )
    first = await backend.cancel_jobs(BulkAction(where=in_q, limit=2, dry_run=False))
    assert len(first) == 2
    rest = await backend.cancel_jobs(BulkAction(where=in_q, limit=100, dry_run=False))
    assert sorted(first + rest) == ["avail", "retry", "sched"]
    after = {j: (await state_of(backend, j)).value for j in before}
    assert after == {**before, "sched": "cancelled", "retry": "cancelled", "avail": "cancelled"}
    running = await backend.get_job("run")
    assert running is not None and not running.cancel_requested  # never flagged
    cancelled = await backend.get_job("avail")
    assert cancelled is not None and cancelled.finished_at == clock()
    # Cancelled jobs leave the claim: nothing of q is claimable now.
    assert await backend.cancel_jobs(BulkAction(where=in_q, limit=100, dry_run=False)) == []


async def test_task_names_are_distinct_sorted_and_filtered(
    backend: Backend, clock: ManualClock
) -> None:
    await backend.enqueue_jobs(
        [
            new_job(task="b.send"),
            new_job(task="a.send"),
            new_job(task="a.send"),
            new_job(task="c.other", queue="x"),
        ]
    )
    assert await backend.task_names(JobFilter()) == ["a.send", "b.send", "c.other"]
    assert await backend.task_names(JobFilter(queues=("x",))) == ["c.other"]
    assert await backend.task_names(DEAD) == []


async def test_error_type_filter_ignores_ascii_case(backend: Backend, clock: ManualClock) -> None:
    await kill(backend, clock, ["k1", "k2"], "t", type_="KeyError")
    await kill(backend, clock, ["v1"], "t", type_="ValueError")
    for spelling in ("KeyError", "keyerror", "KEYERROR", "kEyErRoR"):
        where = JobFilter(states=(JobState.DEAD,), error_type=spelling)
        assert await backend.count_jobs(where) == 2, spelling
        assert sorted(j.id for j in await backend.list_jobs(JobPage(where=where))) == ["k1", "k2"]
    assert await backend.count_jobs(JobFilter(error_type="Key")) == 0  # whole name only
    moved = await backend.redrive_jobs(
        BulkAction(where=JobFilter(error_type="valueerror"), limit=10, dry_run=False)
    )
    assert [j.id for j in moved] == ["v1"]


async def test_a_short_task_name_matches_as_enqueue_takes_it(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    # The app has no tasks registered (as with `conveyor --url`): the stored names count.
    await kill(backend, clock, ["p1", "p2"], "myapp.tasks.parse_amount")
    await kill(backend, clock, ["o1"], "myapp.other")
    where = make_filter(states=["dead"], tasks=["parse_amount"])
    assert await app.admin.count(where) == 2
    assert sorted(j.id for j in await app.admin.redrive(where, dry_run=True)) == ["p1", "p2"]
    assert sorted(j.id for j in await app.admin.redrive(where, by="ops")) == ["p1", "p2"]
    assert await app.admin.count(make_filter(states=["dead"])) == 1
    # The full name, and a name that is no task's, mean what they say.
    assert await app.admin.count(make_filter(tasks=["myapp.other"])) == 1
    assert await app.admin.count(make_filter(tasks=["tasks"])) == 0
    # Two tasks end with .send: an error, never a guess.
    await kill(backend, clock, ["s1"], "billing.send")
    await kill(backend, clock, ["s2"], "mail.send")
    with pytest.raises(AmbiguousTaskName, match="billing.send, mail.send"):
        await app.admin.count(make_filter(tasks=["send"]))
    assert await app.admin.count(make_filter(tasks=["mail.send"])) == 1


async def test_retry_keeps_earlier_deaths_and_is_on_the_jobs_timeline(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    await kill(backend, clock, ["j1"], "t", type_="KeyError")
    await backend.enqueue_jobs([new_job(id="alive")])
    moved = await app.admin.retry(["j1", "alive", "nope"], by=Actor("alice", "dashboard"))
    assert [j.id for j in moved] == ["j1"]
    claimed = {j.id: j for j in await backend.fetch_jobs(strict_claim(["default"], 10, "w", 30))}
    assert sorted(claimed) == ["alive", "j1"]
    again = claimed["j1"]
    assert again.attempt == 1
    clock.advance(5)
    await backend.settle_jobs(
        [Settlement(again.id, again.lease_token, JobState.DEAD, error=error(1, "ValueError"))]
    )
    job = await backend.get_job("j1")
    assert job is not None and [e.type for e in job.errors] == ["KeyError", "ValueError"]
    [entry] = await app.admin.actions_on("j1")
    assert (entry.action, entry.by, entry.via, entry.target, entry.ids, entry.count) == (
        "retry",
        "alice",
        "dashboard",
        "3 jobs",
        ("j1",),
        1,
    )
    assert await app.admin.actions_on("alive") == []  # it was not dead: not touched


async def test_purge_cancels_waiting_jobs_with_one_bounded_entry(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    n = MAX_IDS + 20
    await backend.enqueue_jobs([new_job(id=f"w{i:03d}", queue="mail") for i in range(n)])
    await backend.enqueue_jobs([new_job(id="other", queue="reports")])
    running = await claim_one(backend, queue="mail")
    assert await app.admin.purge("mail", dry_run=True) == n - 1
    assert await app.admin.audit() == []  # a dry run is not an action
    assert await app.admin.purge("mail", by="ops") == n - 1
    assert await app.admin.count(make_filter(queues=["mail"], states=["cancelled"])) == n - 1
    assert await state_of(backend, running.id) is JobState.RUNNING
    assert await state_of(backend, "other") is JobState.AVAILABLE
    [entry] = await app.admin.audit()
    assert (entry.action, entry.by, entry.via, entry.target, entry.count) == (
        "purge",
        "ops",
        "api",
        "queue mail",
        n - 1,
    )
    assert entry.filter == {"states": ["scheduled", "available", "retryable"], "queues": ["mail"]}
    assert len(entry.ids) == MAX_IDS and running.id not in entry.ids
    purged = sorted(set(f"w{i:03d}" for i in range(n)) - {running.id})
    assert [e.action for e in await app.admin.actions_on(purged[-1])] == ["purge"]
    # Cancelled, so they can come back.
    back = await app.admin.redrive(make_filter(states=["cancelled"], queues=["mail"]), limit=1000)
    assert len(back) == n - 1


async def test_every_action_is_listed_newest_first_with_who_and_how_many(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    await kill(backend, clock, ["d1", "d2"], "t")
    await backend.enqueue_jobs([new_job(id="w1")])
    await app.admin.pause("default", by="alice")
    clock.advance(1)
    await app.admin.cancel("w1", by="bob")
    clock.advance(1)
    await app.admin.delete(make_filter(states=["dead"], error_type="valueerror"), by="carol")
    clock.advance(1)
    await app.admin.resume("default")  # no by=: the OS user of this process
    entries = await app.admin.audit()
    assert [(e.action, e.by, e.target, e.count) for e in entries][:3] == [
        ("resume", entries[0].by, "queue default", 0),
        ("delete", "carol", "", 2),
        ("cancel", "bob", "job w1", 1),
    ]
    assert entries[0].by == Actor.local().name and entries[0].host == Actor.local().host
    assert entries[1].filter == {"states": ["dead"], "error_type": "valueerror"}
    assert sorted(entries[1].ids) == ["d1", "d2"]
    assert [e.action for e in await app.admin.audit(actions=["pause", "resume"])] == [
        "resume",
        "pause",
    ]
    assert [e.action for e in await app.admin.audit(limit=1)] == ["resume"]
    assert [e.action for e in await app.admin.actions_on("w1")] == ["cancel"]
    # Cancelling it again changes nothing: recorded, touching no job.
    await app.admin.cancel("w1", by="bob")
    assert (await app.admin.audit(limit=1))[0].count == 0
    assert [e.action for e in await app.admin.actions_on("w1")] == ["cancel"]


async def test_entries_expire_after_the_retention_and_slots_are_reused(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    await app.admin.pause("old", by="alice")
    clock.advance(RETENTION + 86400)  # 91 days: the same slot as the first entry
    await app.admin.pause("new", by="bob")
    entries = await app.admin.audit(since=clock() - RETENTION)
    assert [(e.by, e.target) for e in entries] == [("bob", "queue new")]
    clock.advance(RETENTION / 2)
    assert [(e.by, e.target) for e in await app.admin.audit(since=0.0)] == [("bob", "queue new")]
    assert await app.admin.audit() == []  # the default window is the last seven days
