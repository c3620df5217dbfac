"""Big payloads kept apart (conveyor.payloads.claim_check), on every backend and its default
blob store: arguments and results round-trip through the store, a changed or
missing blob ends its job dead at once without touching the others, max_payload
refuses a batch whole, and blobs go with their jobs (delete, prune of orphans)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from helpers import RunningWorker, complete, wait_finished

from conveyor import Conveyor, PayloadOptions
from conveyor.backends.blobs import blob_key
from conveyor.backends.claiming import strict_claim
from conveyor.backends.contract import Backend
from conveyor.backends.params import BulkAction, JobFilter
from conveyor.cli.render import job_detail
from conveyor.model.clock import ManualClock
from conveyor.model.errors import PayloadTooLarge
from conveyor.model.job import JobState
from conveyor.payloads.claim_check import reference_in
from conveyor.worker import WorkerConfig

FAST = WorkerConfig(concurrency=4, poll_interval=0.05, rescue_interval=0.1, lease=5)
THRESHOLD = 1024
BIG = "é" + "x" * 4000  # over the threshold, and not ASCII: sizes are UTF-8 bytes


@pytest.fixture
async def big_app(backend_url: str) -> AsyncIterator[Conveyor]:
    """An app on the real clock (for workers) storing apart anything over 1 KB."""
    app = Conveyor(backend_url, claim_check_threshold=THRESHOLD)
    yield app
    await app.aclose()
    app.close()


@pytest.fixture
async def clocked_app(backend_url: str, clock: ManualClock) -> AsyncIterator[Conveyor]:
    app = Conveyor(backend_url, clock=clock, claim_check_threshold=THRESHOLD, orphan_grace=600)
    yield app
    await app.aclose()
    app.close()


async def _blob_keys(app: Conveyor) -> set[str]:
    store = await app.claim_check.store()
    return {b.key for b in await store.list_blobs(float("inf"))}


async def test_big_arguments_are_stored_apart_and_reach_the_handler(big_app: Conveyor) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    @big_app.task(name="cc.echo")
    def echo(data: str, extra: dict[str, Any]) -> int:
        seen.append((data, extra))
        return len(data)

    big = await echo.enqueue_async(BIG, {"n": 1})
    small = await echo.enqueue_async("tiny", {"n": 2})
    stored = await big_app.admin.get(big.id)
    assert stored is not None
    ref = reference_in(stored.payload)
    text = json.dumps({"args": [BIG, {"n": 1}], "kwargs": {}}, separators=(",", ":"))
    assert ref is not None and ref.size == len(text.encode()) and len(stored.payload) < 300
    assert ref.sha256 == hashlib.sha256(text.encode()).hexdigest()
    assert reference_in((await big_app.admin.get(small.id)).payload) is None  # type: ignore[union-attr]
    assert await _blob_keys(big_app) == {ref.key}
    async with RunningWorker(big_app, FAST):
        jobs = await wait_finished(big_app, [big.id, small.id])
    assert sorted(seen, key=lambda s: s[1]["n"]) == [(BIG, {"n": 1}), ("tiny", {"n": 2})]
    assert [jobs[big.id].result_value, jobs[small.id].result_value] == [len(BIG), 4]
    assert {j.state for j in jobs.values()} == {JobState.COMPLETED}
    shown = job_detail(jobs[big.id])  # `conveyor jobs show`: the reference, not the blob
    assert f"stored apart: blob {ref.key} ({ref.size:,} bytes, sha256 {ref.sha256[:12]}" in shown
    assert "xxxxxxxxxx" not in shown


async def test_big_result_is_stored_apart_and_read_back(big_app: Conveyor) -> None:
    @big_app.task(name="cc.make")
    def make(n: int) -> list[str]:
        return [BIG] * n

    handle = await make.enqueue_async(2)
    async with RunningWorker(big_app, FAST):
        job = (await wait_finished(big_app, [handle.id]))[handle.id]
    ref = reference_in(job.result)
    assert job.state is JobState.COMPLETED and ref is not None
    assert ref.size == len(json.dumps([BIG] * 2).encode())
    assert await handle.result_async(timeout=5) == [BIG, BIG]
    assert await _blob_keys(big_app) == {ref.key}


@pytest.mark.parametrize("damage", ["changed", "missing"])
async def test_a_bad_blob_ends_its_job_dead_at_once(big_app: Conveyor, damage: str) -> None:
    runs: list[str] = []

    @big_app.task(name="cc.run", max_attempts=5)
    def run(data: str) -> None:
        runs.append(data[:4])

    bad = await run.enqueue_async(BIG)
    good = await run.enqueue_async("good")
    other_big = await run.enqueue_async("other" + BIG)
    ref = reference_in((await big_app.admin.get(bad.id)).payload)  # type: ignore[union-attr]
    assert ref is not None
    store = await big_app.claim_check.store()
    assert await store.delete_job_blobs([bad.id]) == 1
    if damage == "changed":
        await store.put_blob(ref.key, bad.id, b'{"args":["forged"],"kwargs":{}}')
    async with RunningWorker(big_app, FAST):
        jobs = await wait_finished(big_app, [bad.id, good.id, other_big.id])
    dead = jobs[bad.id]
    assert dead.state is JobState.DEAD and dead.attempt == 1 and len(dead.errors) == 1
    assert dead.errors[0].type == "CorruptPayload"
    assert ref.key in dead.errors[0].message
    assert ("missing" if damage == "missing" else "fails its check") in dead.errors[0].message
    assert sorted(runs) == ["good", "othe"]  # the bad job's handler never ran
    assert jobs[good.id].state is jobs[other_big.id].state is JobState.COMPLETED


async def test_max_payload_refuses_the_whole_batch(backend_url: str) -> None:
    app = Conveyor(backend_url, claim_check_threshold=THRESHOLD, max_payload=3000)
    try:

        @app.task(name="cc.sized")
        def sized(data: str) -> None: ...

        @app.task(name="cc.roomy", payload=PayloadOptions(max_payload=100_000))
        def roomy(data: str) -> None: ...

        with pytest.raises(PayloadTooLarge) as caught:
            await app.enqueue_many_async([sized.message("small"), sized.message(BIG)])
        size = len(json.dumps({"args": [BIG], "kwargs": {}}, separators=(",", ":")).encode())
        assert caught.value.size == size and caught.value.limit == 3000
        assert f"{size:,} bytes" in str(caught.value) and "3,000 bytes" in str(caught.value)
        assert await app.admin.count(JobFilter()) == 0
        assert await _blob_keys(app) == set()
        handle = await roomy.enqueue_async(BIG)  # the task's own limit
        assert await app.admin.count(JobFilter()) == 1 and len(await _blob_keys(app)) == 1
        assert handle.id
    finally:
        await app.aclose()
        app.close()


async def test_deleting_a_job_deletes_its_blobs(clocked_app: Conveyor) -> None:
    @clocked_app.task(name="cc.keep")
    def keep(data: str) -> None: ...

    handles = [await keep.enqueue_async(f"{i}{BIG}") for i in range(3)]
    backend = await clocked_app.backend()
    for job in await backend.fetch_jobs(strict_claim(["default"], 3, "w1", 30.0)):
        await backend.settle_jobs([complete(job)])
    assert len(await _blob_keys(clocked_app)) == 3
    deleted = await clocked_app.admin.delete(JobFilter(ids=(handles[0].id,)))
    assert deleted == [handles[0].id]
    kept = set()
    for h in handles[1:]:
        # Ignored for mypy: checked for None on the next line
        job = await clocked_app.admin.get(h.id)  # type: ignore[assignment]
        assert job is not None
        ref = reference_in(job.payload)
        assert ref is not None
        kept.add(ref.key)
    assert await _blob_keys(clocked_app) == kept and len(kept) == 2


async def test_prune_deletes_orphans_past_their_grace(
    clocked_app: Conveyor, clock: ManualClock
) -> None:
    @clocked_app.task(name="cc.orphan")
    def orphan(data: str) -> None: ...

    kept = await orphan.enqueue_async("kept" + BIG)
    gone = await orphan.enqueue_async("gone" + BIG)
    store = await clocked_app.claim_check.store()
    # A producer that died between writing the blob and inserting the job:
    await store.put_blob(blob_key("never-inserted", "args", "ab" * 32), "never-inserted", b"{}")
    backend: Backend = await clocked_app.backend()
    jobs = {j.id: j for j in await backend.fetch_jobs(strict_claim(["default"], 2, "w1", 30.0))}
    await backend.settle_jobs([complete(jobs[gone.id])])
    # Deleted behind Conveyor's back (as retention does): its blob is left.
    assert await backend.delete_jobs(
        BulkAction(where=JobFilter(ids=(gone.id,)), limit=10, dry_run=False)
    ) == [gone.id]
    kept_key = reference_in(jobs[kept.id].payload).key  # type: ignore[union-attr]
    assert len(await _blob_keys(clocked_app)) == 3
    clock.advance(599)
    assert await clocked_app.claim_check.sweep_orphans(backend, clock()) == 0
    assert len(await _blob_keys(clocked_app)) == 3
    clock.advance(2)
    assert await clocked_app.admin.prune(clock() - 86400, clock() - 86400) == 0
    assert await _blob_keys(clocked_app) == {kept_key}
    assert await clocked_app.claim_check.sweep_orphans(backend, clock() + 10**6) == 0
