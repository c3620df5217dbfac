"""One corrupt stored job never touches another.

A field written behind Conveyor's back (raw_store.py) that is not valid JSON, not
UTF-8, nested too deeply, not a number or not a state: the claim still hands out
the whole batch, the bad job comes marked (`Job.corrupt` names the field), the
worker settles it dead with a CorruptJob error without running it, the rest of the
batch runs, and listings, counts and stats show it instead of failing. A backend
whose schema refuses a value cannot hold that corruption: the case is skipped.
"""

from __future__ import annotations

import pytest
from helpers import RunningWorker, complete, error, new_job, wait_finished
from raw_store import RawStore, RawValue

from conveyor import Conveyor
from conveyor.backends.claiming import strict_claim
from conveyor.backends.contract import Backend
from conveyor.backends.params import JobFilter, JobPage, QueuePause, Retention, Settlement
from conveyor.model.clock import ManualClock
from conveyor.model.job import JobState
from conveyor.worker import WorkerConfig
from conveyor.worker.in_flight import corrupt_outcome
from conveyor.worker.rescue import rescue_expired

DEEP = "[" * 100_000 + "]" * 100_000  # item 6 of issue 10: past any JSON parser's depth
NESTED = "[" * 5_000 + "]" * 5_000  # storable as jsonb, too deep for Python's json

# (field, stored value, how Job.corrupt describes it)
CLAIMED_CASES: list[tuple[str, RawValue, str]] = [
    ("meta", b"{not json", "meta: not valid JSON"),
    ("meta", "[1, 2]", "meta: not an object"),
    ("meta", NESTED, "meta: JSON nested too deeply"),
    ("errors", b"\xff\xfe[]", "errors: not valid UTF-8"),
    ("errors", '{"type": "Oops"}', "errors: not a list"),
    ("errors", '[1, {"attempt": "first"}]', "errors: item 0 is not an error record"),
    ("errors", NESTED, "errors: JSON nested too deeply"),
    ("payload", b'{"args": ["\xff"]}', "payload: not valid UTF-8"),
    ("priority", "high", "priority: not a whole number"),
    ("run_at", "soon", "run_at: not a number"),
    ("max_attempts", 0, "max_attempts: below 1"),
    ("result", b"{oops", "result: not valid JSON"),
    ("checkpoint", DEEP, "checkpoint: JSON nested too deeply"),
    ("progress", b"\x80", "progress: not valid UTF-8"),
    ("cancel_requested", "maybe", "cancel_requested: not a flag"),
    ("task", b"send\xffmail", "task: not valid UTF-8"),
    ("aging", "fast", "aging: not a number"),
    ("aging", -60.0, "aging: not a positive number"),
]


def _case_id(case: tuple[str, RawValue, str]) -> str:
    return case[2].split(" (")[0].replace(" ", "-").replace(":", "")


async def _corrupt(
    raw: RawStore, backend_name: str, job_id: str, field: str, value: RawValue
) -> bool:
    """Write the bad value; False when the store's schema refuses it (PostgreSQL's
    column types and CHECKs), in which case the job must still read back whole: the
    schema is then what keeps the damage out, and the caller has nothing more to show."""
    if await raw.write(job_id, field, value):
        return True
    assert await raw.read(job_id, field) != value, f"{backend_name} refused {field} yet holds it"
    return False


@pytest.mark.parametrize(
    ("field", "value", "reason"), CLAIMED_CASES, ids=[_case_id(c) for c in CLAIMED_CASES]
)
async def test_a_corrupt_job_is_claimed_with_its_batch_and_named(
    backend: Backend,
    raw: RawStore,
    backend_name: str,
    clock: ManualClock,
    field: str,
    value: RawValue,
    reason: str,
) -> None:
    healthy = [f"ok-{i}" for i in range(6)]
    await backend.enqueue_jobs(
        [new_job(id=i) for i in healthy[:3]]
        + [new_job(id="bad")]
        + [new_job(id=i) for i in healthy[3:]]
    )
    if not await _corrupt(raw, backend_name, "bad", field, value):
        return  # refused by the schema: checked in _corrupt

    jobs = await backend.fetch_jobs(strict_claim(["default"], 10, "w1", 30))
    by_id = {job.id: job for job in jobs}
    assert sorted(by_id) == sorted([*healthy, "bad"])  # one claim, the whole batch
    bad = by_id["bad"]
    assert bad.corrupt is not None and bad.corrupt.startswith(reason), bad.corrupt
    assert ";" not in bad.corrupt  # the one field written, and no other
    assert bad.state is JobState.RUNNING and bad.lease_token >= 1
    assert [by_id[i].corrupt for i in healthy] == [None] * 6

    # The worker's outcome for it (dead, CorruptJob) goes in one batch with the others.
    outcomes = [corrupt_outcome(bad, clock.now, "w1"), *(complete(by_id[i]) for i in healthy)]
    assert await backend.settle_jobs(outcomes) == []
    settled = await backend.get_job("bad")
    assert settled is not None and settled.state is JobState.DEAD
    assert settled.errors and settled.errors[-1].type == "CorruptJob"
    assert reason in settled.errors[-1].message
    for job_id in healthy:
        assert (await backend.get_job(job_id)).state is JobState.COMPLETED  # type: ignore[union-attr]


async def test_a_corrupt_job_in_one_queue_never_stops_claims_from_another(
    backend: Backend, raw: RawStore, backend_name: str
) -> None:
    """SQLite claims from every queue in one transaction: a row that failed to decode
    rolled back the claims of all of them, every time, until someone cancelled it."""
    await backend.enqueue_jobs(
        [
            new_job(id="bad", queue="a"),
            new_job(id="a2", queue="a"),
            new_job(id="b1", queue="b"),
            new_job(id="b2", queue="b"),
        ]
    )
    if not await _corrupt(raw, backend_name, "bad", "meta", "[1]"):
        return  # refused by the schema: checked in _corrupt
    await raw.write("bad", "payload", b"\xff")  # where the store can hold it
    first = await backend.fetch_jobs(strict_claim(["a", "b"], 10, "w1", 30))
    assert [(j.id, j.corrupt is None) for j in first] == [
        ("bad", False),
        ("a2", True),
        ("b1", True),
        ("b2", True),
    ]
    await backend.enqueue_jobs([new_job(id="b3", queue="b")])
    assert [j.id for j in await backend.fetch_jobs(strict_claim(["a", "b"], 10, "w1", 30))] == [
        "b3"
    ]


async def test_listings_counts_and_stats_show_corrupt_jobs(
    backend: Backend, raw: RawStore, backend_name: str
) -> None:
    await backend.enqueue_jobs(
        [new_job(id=i) for i in ("fine", "bad-meta", "bad-errors", "bad-priority", "bad-state")]
    )
    await raw.write("bad-meta", "meta", "[1]")
    await raw.write("bad-errors", "errors", '"not a history"')
    stored = {"bad-meta", "bad-errors"}
    if await raw.write("bad-priority", "priority", b"\xff"):
        stored.add("bad-priority")
    if await raw.write("bad-state", "state", "paused"):
        stored.add("bad-state")

    listed = await backend.list_jobs(JobPage(where=JobFilter(), limit=50))
    corrupt = {job.id: job.corrupt for job in listed if job.corrupt}
    assert set(corrupt) == stored
    assert len(listed) == 5
    if "bad-state" in stored:  # an unknown state reads as dead: nothing runs it
        [bad_state] = [job for job in listed if job.id == "bad-state"]
        assert bad_state.state is JobState.DEAD
        assert bad_state.corrupt == "state: unknown state 'paused'"
    assert await backend.count_jobs(JobFilter()) == 5
    # Filters that read the damaged fields still answer.
    assert [
        j.id for j in await backend.list_jobs(JobPage(where=JobFilter(error_type="Oops")))
    ] == []
    assert await backend.count_jobs(JobFilter(error_type="Oops")) == 0
    assert {
        j.id for j in await backend.list_jobs(JobPage(where=JobFilter(args_contains="args")))
    } >= {"fine"}
    for job_id in stored:
        job = await backend.get_job(job_id)
        assert job is not None and job.corrupt == corrupt[job_id]
    # Stats count as available what a claim takes: on SQL backends the state column is
    # where a job is (an unknown one is in no state), on Redis its index (a claim then
    # rewrites the state field).
    [stats] = await backend.queue_stats()
    claimed = await backend.fetch_jobs(strict_claim(["default"], 10, "w1", 30))
    assert stats.counts[JobState.AVAILABLE] == len(claimed) >= 4


async def test_a_corrupt_history_takes_the_next_error_without_failing_the_batch(
    backend: Backend, raw: RawStore, backend_name: str, clock: ManualClock
) -> None:
    await backend.enqueue_jobs([new_job(id=i) for i in ("a", "b", "c")])
    jobs = {j.id: j for j in await backend.fetch_jobs(strict_claim(["default"], 3, "w1", 30))}
    if not await _corrupt(raw, backend_name, "b", "errors", b'[{"attempt": 1,'):  # cut short
        return  # refused by the schema: checked in _corrupt
    retry_at = clock.now + 60
    outcomes = [
        Settlement(j.id, j.lease_token, JobState.RETRYABLE, error=error(1), run_at=retry_at)
        for j in jobs.values()
    ]
    assert await backend.settle_jobs(outcomes) == []
    for job_id in ("a", "b", "c"):
        job = await backend.get_job(job_id)
        assert job is not None and job.state is JobState.RETRYABLE and job.corrupt is None
        assert [e.type for e in job.errors] == ["ConnectionError"]  # b starts a new history


# Fields of a running job a rescuer reads (find_leases), written while it runs.
RESCUE_CASES: list[tuple[str, RawValue]] = [
    ("lease_token", "stolen"),
    ("attempt", "many"),
    ("max_attempts", b"\xff"),
    ("worker_id", b"host\xff:1:abc"),
    ("lease_expires_at", "later"),
    ("queue", None),
]


@pytest.mark.parametrize(("field", "value"), RESCUE_CASES, ids=[c[0] for c in RESCUE_CASES])
async def test_rescue_settles_expired_jobs_next_to_a_corrupt_one(
    backend: Backend,
    raw: RawStore,
    backend_name: str,
    clock: ManualClock,
    field: str,
    value: RawValue,
) -> None:
    await backend.enqueue_jobs([new_job(id=i, max_attempts=1) for i in ("a", "bad", "c")])
    assert len(await backend.fetch_jobs(strict_claim(["default"], 3, "w1", 10))) == 3
    if not await _corrupt(raw, backend_name, "bad", field, value):
        return  # refused by the schema: checked in _corrupt
    clock.advance(11)
    rescued = await rescue_expired(backend, clock.now)
    assert sorted(rescued) == ["a", "bad", "c"]  # the fence reads a corrupt token as 0
    for job_id in ("a", "bad", "c"):
        job = await backend.get_job(job_id)
        # An attempt count that cannot be read counts as 0: not the last attempt yet.
        lost = JobState.AVAILABLE if job_id == "bad" and field == "attempt" else JobState.DEAD
        assert job is not None and job.state is lost
        assert job.errors[-1].type == "LeaseExpired"
    assert await rescue_expired(backend, clock.now) == []


async def test_a_claim_hands_out_a_readable_attempt_and_token(
    backend: Backend, raw: RawStore, backend_name: str
) -> None:
    await backend.enqueue_jobs([new_job(id=i) for i in ("a", "j", "b")])
    if not await _corrupt(raw, backend_name, "j", "lease_token", "abc"):
        return  # refused by the schema: checked in _corrupt
    if not await _corrupt(raw, backend_name, "j", "attempt", "x"):
        return  # refused by the schema: checked in _corrupt
    jobs = await backend.fetch_jobs(strict_claim(["default"], 5, "w1", 30))
    assert [(j.id, j.attempt, j.lease_token, j.corrupt) for j in jobs] == [
        ("a", 1, 1, None),
        ("j", 1, 1, None),
        ("b", 1, 1, None),
    ]
    assert await backend.settle_jobs([complete(j) for j in jobs]) == []
    for job_id in ("a", "j", "b"):
        assert (await backend.get_job(job_id)).state is JobState.COMPLETED  # type: ignore[union-attr]


async def test_a_claimed_job_whose_id_is_not_text_can_still_be_settled(
    backend: Backend, raw: RawStore, backend_name: str, clock: ManualClock
) -> None:
    """Every verb names a job by its id. On SQLite the claim renames such a job to
    its readable form (so it is settled dead, its bad id named); Redis names a job by
    its key, not by the stored field; PostgreSQL's text cannot hold such bytes."""
    await backend.enqueue_jobs([new_job(id=i) for i in ("a", "bad", "b")])
    if not await _corrupt(raw, backend_name, "bad", "id", b"b\xffd"):
        return  # refused by the schema: checked in _corrupt
    jobs = await backend.fetch_jobs(strict_claim(["default"], 5, "w1", 30))
    assert len(jobs) == 3
    outcomes = [corrupt_outcome(j, clock.now, "w1") if j.corrupt else complete(j) for j in jobs]
    assert await backend.settle_jobs(outcomes) == []
    listed = await backend.list_jobs(JobPage(where=JobFilter(), limit=10))
    assert sorted(j.state for j in listed) == sorted(o.state for o in outcomes)
    assert {j.id for j in listed} == {j.id for j in jobs}
    for job in jobs:
        assert (await backend.get_job(job.id)) is not None


async def test_a_count_at_the_top_of_its_range_starts_again_instead_of_failing_the_claim(
    backend: Backend, raw: RawStore, backend_name: str
) -> None:
    """Found by the fuzz test: SQLite turned the token + 1 into a REAL that no later
    write could bind (every outcome of the worker's batch then failed, for ever), and
    PostgreSQL's bigint overflow failed the claim of the whole queue."""
    await backend.enqueue_jobs([new_job(id=i) for i in ("a", "top", "b")])
    if not await _corrupt(raw, backend_name, "top", "lease_token", 2**63 - 1):
        return  # refused by the schema: checked in _corrupt
    await raw.write("top", "attempt", 2**31 - 1)
    jobs = await backend.fetch_jobs(strict_claim(["default"], 5, "w1", 30))
    assert [(j.id, j.attempt, j.lease_token, j.corrupt) for j in jobs] == [
        ("a", 1, 1, None),
        ("top", 1, 1, None),
        ("b", 1, 1, None),
    ]
    assert await backend.settle_jobs([complete(j) for j in jobs]) == []


async def test_a_refund_of_an_attempt_that_reads_0_does_not_fail_the_batch(
    backend: Backend, raw: RawStore, backend_name: str, clock: ManualClock
) -> None:
    """A cold stop gives jobs back without using their attempt; a stored attempt of 0
    (written while running) went to -1 against the schema's CHECK and failed the whole
    batch of outcomes."""
    await backend.enqueue_jobs([new_job(id=i) for i in ("a", "zero", "b")])
    jobs = await backend.fetch_jobs(strict_claim(["default"], 3, "w1", 30))
    if not await _corrupt(raw, backend_name, "zero", "attempt", 0):
        return  # refused by the schema: checked in _corrupt
    returned = [
        Settlement(j.id, j.lease_token, JobState.AVAILABLE, refund_attempt=True) for j in jobs
    ]
    assert await backend.settle_jobs(returned) == []
    for job_id in ("a", "zero", "b"):
        job = await backend.get_job(job_id)
        assert job is not None and job.state is JobState.AVAILABLE and job.attempt == 0


async def test_dedup_and_prune_next_to_corrupt_finished_jobs(
    backend: Backend, raw: RawStore, backend_name: str, clock: ManualClock
) -> None:
    await backend.enqueue_jobs(
        [new_job(id="old", unique_key="k", unique_for=3600), new_job(id="other")]
    )
    jobs = await backend.fetch_jobs(strict_claim(["default"], 2, "w1", 30))
    assert await backend.settle_jobs([complete(j) for j in jobs]) == []
    if not await _corrupt(raw, backend_name, "old", "unique_for", "forever"):
        return  # refused by the schema: checked in _corrupt
    await raw.write("other", "finished_at", "yesterday")  # PostgreSQL refuses: fine
    # A dedup window that cannot be read holds nothing back.
    [new] = await backend.enqueue_jobs([new_job(id="new", unique_key="k")])
    assert new.id == "new"
    clock.advance(7200)
    pruned = await backend.prune_jobs(Retention(completed_before=clock.now, dead_before=clock.now))
    remaining = {j.id for j in await backend.list_jobs(JobPage(where=JobFilter(), limit=10))}
    assert "new" in remaining and "old" not in remaining
    assert pruned == 3 - len(remaining)


# --- with a worker ----------------------------------------------------------------------------
# Room for the whole batch in one claim (the corrupt job takes no slot).
FAST = WorkerConfig(queues=("default",), concurrency=10, poll_interval=0.05, fetch_batch=20)
WORKER_CASES: list[tuple[str, RawValue, str]] = [
    ("meta", "[1, 2]", "CorruptJob"),
    ("errors", '{"not": "a list"}', "CorruptJob"),
    ("payload", DEEP, "CorruptPayload"),  # decoded by the worker: nested too deeply
    ("priority", b"\xff", "CorruptJob"),
]


@pytest.mark.parametrize(
    ("field", "value", "error_type"), WORKER_CASES, ids=[c[0] for c in WORKER_CASES]
)
async def test_the_worker_runs_the_batch_and_kills_only_the_corrupt_job(
    live_app: Conveyor,
    raw_live: RawStore,
    backend_name: str,
    field: str,
    value: RawValue,
    error_type: str,
) -> None:
    calls: list[str] = []

    @live_app.task(name="record")
    def record(name: str) -> str:
        calls.append(name)
        return name

    backend = await live_app.backend()
    await backend.pause_queue(
        QueuePause(queue="default", paused=True)
    )  # all of it lands in one claim
    names = [f"ok-{i}" for i in range(8)]
    await backend.enqueue_jobs(
        [
            new_job(id=n, task="record", payload=f'{{"args":["{n}"],"kwargs":{{}}}}')
            for n in [*names[:4], "bad", *names[4:]]
        ]
    )
    if not await _corrupt(raw_live, backend_name, "bad", field, value):
        return  # refused by the schema: checked in _corrupt
    async with RunningWorker(live_app, FAST) as worker:
        await backend.pause_queue(QueuePause(queue="default", paused=False))
        jobs = await wait_finished(live_app, [*names, "bad"])
        # The worker keeps claiming: a job enqueued afterwards runs.
        [later] = await backend.enqueue_jobs(
            [new_job(id="later", task="record", payload='{"args":["later"],"kwargs":{}}')]
        )
        await wait_finished(live_app, [later.id])
        assert worker.in_flight == 0
    assert sorted(calls) == sorted([*names, "later"])  # each once; never the corrupt one
    assert all(jobs[n].state is JobState.COMPLETED for n in names)
    bad = jobs["bad"]
    assert bad.state is JobState.DEAD and bad.attempt == 1
    assert bad.errors[-1].type == error_type and field in bad.errors[-1].message
