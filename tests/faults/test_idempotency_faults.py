"""The idempotency toolkit under real crashes: once() killed between its effect and
its done-mark (SIGKILL), and the fence making a stalled worker's late write a no-op
(SIGSTOP), with real worker processes on every backend."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from backends_under_test import POSTGRES_URL
from harness import Row, Runs, WorkerGroup, jobs_of, report, start, wait_finished
from polling import poll

from conveyor import Conveyor
from conveyor.backends.params import RecordKey
from conveyor.model.job import JobState
from conveyor.once import ONCE_NAMESPACE

pytestmark = pytest.mark.slow

APP = "once_app:app"
CLAIM_LEASE = 3.0  # once_app.CLAIM_LEASE
LOST = {"LeaseExpired", "WorkerLost"}  # how a killed worker's attempt is recorded


def enqueue(url: str, messages: Callable[[Any], list[Any]]) -> list[str]:
    """Enqueue jobs of once_app's tasks: `messages(once_app)`."""
    import once_app

    app = Conveyor(url)
    try:
        return [h.id for h in app.enqueue_many(messages(once_app))]
    finally:
        app.close()


async def migrated(url: str) -> None:
    app = Conveyor(url)
    await app.backend()
    await app.aclose()


def once_record(url: str, key: str) -> dict[str, object] | None:
    async def read() -> str | None:
        app = Conveyor(url)
        try:
            return await (await app.backend()).get_record(
                RecordKey(namespace=ONCE_NAMESPACE, key=key)
            )
        finally:
            await app.aclose()

    text = asyncio.run(read())
    return None if text is None else dict(json.loads(text))


def kill_inside_the_effect(
    url: str, runs: Runs, groups: list[WorkerGroup], tmp_path: Path, env: dict[str, str]
) -> tuple[WorkerGroup, float]:
    """A worker that runs the job into its effect and stops there, SIGKILLed; another
    that rescues the job (lease 1 s, rescue every 0.2 s). Returns the rescuer and when
    the first effect happened."""
    doomed = start(
        groups,
        url,
        runs,
        tmp_path,
        "-c",
        "1",
        "--lease",
        "1",
        via_script=True,
        app=APP,
        env={**env, "BLOCK_IN_EFFECT": "1"},
    )
    runs.wait_for("blocked", 1)
    [first_effect] = [e for e in runs.events() if e.kind == "effect"]
    doomed.kill()
    rescuer = start(
        groups,
        url,
        runs,
        tmp_path,
        "-c",
        "1",
        "--lease",
        "10",
        "--rescue",
        "0.2",
        via_script=True,
        app=APP,
        env=env,
    )
    return rescuer, first_effect.at


def test_once_killed_between_effect_and_mark_runs_it_once_more_after_the_claims_lease(
    backend: str, url: str, runs: Runs, groups: list[WorkerGroup], tmp_path: Path
) -> None:
    [job_id] = enqueue(url, lambda app: [app.charge.message(7)])
    rescuer, first_at = kill_inside_the_effect(url, runs, groups, tmp_path, {})
    job = wait_finished(url, [job_id], timeout=60)[job_id]
    effects = [e for e in runs.events() if e.kind == "effect"]
    # At least once, and again only because the first run died before its mark: the
    # rerun waited for the dead run's claim to expire (it may have been stalled, not dead).
    assert len(effects) == 2
    assert effects[1].at - first_at >= CLAIM_LEASE - 0.1
    assert job.state is JobState.COMPLETED and job.result_value == f"charged by {rescuer.proc.pid}"
    assert [e.type for e in job.errors] in (["LeaseExpired"], ["WorkerLost"])
    done = once_record(url, "charge:7")
    assert done is not None and done["state"] == "done" and done["job"] == job_id
    # The same charge asked again, by another job: done already, not run.
    [again_id] = enqueue(url, lambda app: [app.charge.message(7)])
    again = wait_finished(url, [again_id], timeout=30)[again_id]
    assert again.result_value == job.result_value
    assert len([e for e in runs.events() if e.kind == "effect"]) == 2
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait(30) == 0, rescuer.output()[-3000:]
    report(
        backend,
        Row(
            "once(): SIGKILL after effect, before mark",
            1,
            0,
            0,
            0,
            f"effect 2x, 2nd after claim lease ({effects[1].at - first_at:.1f}s)",
        ),
    )


@pytest.mark.parametrize("backend", ["postgres"])
def test_once_in_a_postgres_transaction_killed_before_commit_books_exactly_once(
    backend: str, url: str, runs: Runs, groups: list[WorkerGroup], tmp_path: Path
) -> None:
    import psycopg

    from conveyor.backends.postgres.config import parse_postgres_url

    ledger = f'"{parse_postgres_url(url).schema}".ledger'
    asyncio.run(migrated(url))  # the test's schema, for the ledger to live in
    with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
        admin.execute(f"CREATE TABLE {ledger} (order_id int, amount int)")
        [job_id] = enqueue(url, lambda app: [app.book.message(7, 500)])
        env = {"LEDGER_TABLE": ledger}
        rescuer, _ = kill_inside_the_effect(url, runs, groups, tmp_path, env)
        job = wait_finished(url, [job_id], timeout=60)[job_id]
        rows = admin.execute(f"SELECT order_id, amount FROM {ledger}").fetchall()
    # The effect ran twice, but the first run's row died with its transaction.
    assert len([e for e in runs.events() if e.kind == "effect"]) == 2
    assert rows == [(7, 500)]
    assert job.state is JobState.COMPLETED and job.result_value is None  # transaction(result=None)
    done = once_record(url, "book:7")
    assert done is not None and done["state"] == "done" and done["job"] == job_id
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait(30) == 0, rescuer.output()[-3000:]
    report(
        backend,
        Row("once() in transaction: SIGKILL before commit", 1, 0, 0, 0, "ledger row exactly once"),
    )


def test_a_stalled_workers_late_write_is_fenced_at_the_sink(
    backend: str, url: str, runs: Runs, groups: list[WorkerGroup], tmp_path: Path
) -> None:
    sink = tmp_path / "bank.db"
    with sqlite3.connect(sink) as db:
        db.execute(
            "CREATE TABLE balances (account INTEGER PRIMARY KEY, value INTEGER, "
            "last_fence INTEGER NOT NULL DEFAULT 0)"
        )
        db.execute("INSERT INTO balances (account, value) VALUES (1, 0)")
    gate = tmp_path / "gate"
    [job_id] = enqueue(url, lambda app: [app.set_balance.message(1, 100)])
    env = {"SINK_DB": str(sink)}
    stalled = start(
        groups,
        url,
        runs,
        tmp_path,
        "-c",
        "1",
        "--lease",
        "1",
        via_script=True,
        app=APP,
        env={**env, "STALL_GATE": str(gate)},
    )
    runs.wait_for("start", 1)
    stalled.signal(signal.SIGSTOP)  # a stop-the-world pause: no heartbeat, lease runs out
    rescuer = start(
        groups,
        url,
        runs,
        tmp_path,
        "-c",
        "1",
        "--lease",
        "10",
        "--rescue",
        "0.2",
        via_script=True,
        app=APP,
        env=env,
    )
    job = wait_finished(url, [job_id], timeout=60)[job_id]
    assert job.state is JobState.COMPLETED and job.result_value == 1
    gate.touch()
    stalled.signal(signal.SIGCONT)  # the stalled attempt wakes up and writes, late

    def writes() -> list[tuple[int, int]] | None:
        """(rows changed, fence) of each attempt's write, in the order they happened."""
        found = [e.kind.split(":") for e in runs.events() if e.kind.startswith("wrote:")]
        return [(int(w[1]), int(w[3])) for w in found] if len(found) == 2 else None

    [(on_time_rows, on_time_fence), (late_rows, late_fence)] = poll(writes, 30, "both writes")
    assert (on_time_rows, late_rows) == (1, 0) and late_fence < on_time_fence
    with sqlite3.connect(sink) as db:
        assert db.execute("SELECT value, last_fence FROM balances").fetchall() == [
            (100, on_time_fence)
        ]
    # Its outcome is refused too (or never sent: a heartbeat found the lease gone first).
    poll(
        lambda: "stale" in stalled.output() or "lease lost" in stalled.output(),
        30,
        "the stalled worker to learn that its lease is gone",
    )
    after = jobs_of(url, [job_id])[job_id]
    assert after.state is JobState.COMPLETED and after.result_value == 1
    assert [e.type for e in after.errors][0] in LOST
    for group in (stalled, rescuer):
        group.signal(signal.SIGTERM)
        assert group.wait(30) == 0, group.output()[-3000:]
    report(
        backend,
        Row("fence: SIGSTOP, rescued, late write", 1, 0, 0, 1, "late sink write changed nothing"),
    )
