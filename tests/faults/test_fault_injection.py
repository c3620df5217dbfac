"""Crash-safety claims shown with real processes and real signals, on every backend.

Every test kills whole process groups at the end (no grandchild escapes) and polls
with deadlines; no sleep stands in for synchronisation. Each test adds a row to the
table printed at the end of the session (lost / completed more than once / recovery).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from backends_under_test import BACKENDS
from harness import (
    DROP_CONNECTIONS,
    PRIVATE_SERVERS,
    Event,
    Row,
    Runs,
    WorkerGroup,
    enqueue,
    jobs_of,
    recorded_twice,
    report,
    start,
    wait_finished,
)
from polling import poll

from conveyor.model.job import Job, JobState

pytestmark = pytest.mark.slow


def ran_twice_explained(runs: Runs, killed_pids: set[int]) -> int:
    """Jobs whose handler finished more than once; each extra finish must come from a
    process that was then killed before it could write the outcome."""
    finishes: dict[str, list[int]] = {}
    for event in runs.events():
        if event.kind == "finish":
            finishes.setdefault(event.job_id, []).append(event.pid)
    twice = {job_id: pids for job_id, pids in finishes.items() if len(pids) > 1}
    for job_id, pids in twice.items():
        assert set(pids[:-1]) <= killed_pids, f"job {job_id} finished in {pids}, none killed"
    return len(twice)


def seconds_until_restarted(
    runs: Runs, orphans: set[str], killed_at: float, timeout: float, what: str
) -> float:
    """Waits until every job a kill cut short has started again; the recovery time is
    from the kill to the last of those restarts."""

    def restarts() -> list[Event]:
        return [
            e
            for e in runs.events()
            if e.kind == "start" and e.job_id in orphans and e.at > killed_at
        ]

    poll(lambda: orphans <= {e.job_id for e in restarts()}, timeout, what)
    return max(e.at for e in restarts()) - killed_at


def finish_and_count_after_kills(
    url: str,
    ids: list[str],
    pool: WorkerGroup,
    runs: Runs,
    killed: set[int],
) -> tuple[dict[str, Job], list[Job], list[str], int]:
    """Lets the last pool finish every job and stop cleanly, then counts what the kills
    cost: the jobs, those lost, those recorded twice, and handlers that finished twice."""
    jobs = wait_finished(url, ids)
    pool.signal(signal.SIGTERM)
    assert pool.wait(60) == 0
    lost = [j for j in jobs.values() if j.state is not JobState.COMPLETED]
    return jobs, lost, recorded_twice(jobs), ran_twice_explained(runs, killed)


def seconds_until_claimed_and_settled(url: str, ids: list[str], since: float, what: str) -> float:
    """Waits until a job was both claimed and settled after `since`: the backend took
    a claim and an outcome write again. The recovery time is to the first such outcome."""

    def settled_since() -> list[float]:
        return [
            j.finished_at
            for j in jobs_of(url, ids).values()
            if j.started_at is not None and j.started_at > since and j.finished_at is not None
        ]

    settled: list[float] = poll(settled_since, 60, what, interval=0.05)
    return min(settled) - since


def test_sigkill_pool_children_twice_while_200_jobs_run(
    backend: str, url: str, runs: Runs, groups: list[WorkerGroup], tmp_path: Path
) -> None:
    # 200 x 0.2 s on 6 slots: some 7 s of work, so both kills land while jobs run.
    ids = enqueue(url, lambda app: [app.work.message(0.2) for _ in range(200)])
    pool = start(groups, url, runs, tmp_path, "-p", "2", "-c", "3", "--lease", "30")
    killed: set[int] = set()
    recoveries: list[float] = []
    for threshold in (40, 110):
        runs.wait_for("start", threshold)
        # A child with jobs in flight right now; the pid in the runs log is the child's.
        victim, orphans = poll(
            lambda: next(
                ((pid, jobs) for pid in pool.children() if (jobs := set(runs.in_flight([pid])))),
                None,
            ),
            30,
            "a child with running jobs",
        )
        os.kill(victim, signal.SIGKILL)
        killed_at = time.time()
        killed.add(victim)
        orphans = runs.cut_short([victim])
        assert orphans, "the kill must land while the child runs jobs"
        # The lease is 30 s: anything faster than that is the supervisor returning them.
        recoveries.append(
            seconds_until_restarted(
                runs, orphans, killed_at, 25, "the killed child's jobs to start again"
            )
        )
    jobs, lost, twice, ran_twice = finish_and_count_after_kills(url, ids, pool, runs, killed)
    report(
        backend,
        Row(
            "SIGKILL a pool child x2, 200 jobs",
            200,
            len(lost),
            len(twice),
            ran_twice,
            " / ".join(f"{r:.2f}s" for r in recoveries) + " (lease 30s)",
        ),
    )
    assert not lost and not twice
    assert runs.per_job("finish").keys() == set(ids)
    # A child crash uses an attempt and says so.
    assert any(e.type == "WorkerLost" for j in jobs.values() for e in j.errors)
    assert "returned" in pool.output()


def test_sigkill_whole_pool_twice_while_200_jobs_run(
    backend: str, url: str, runs: Runs, groups: list[WorkerGroup], tmp_path: Path
) -> None:
    ids = enqueue(url, lambda app: [app.work.message(0.2) for _ in range(200)])
    killed: set[int] = set()
    recoveries: list[float] = []
    pool = start(groups, url, runs, tmp_path, "-p", "2", "-c", "3", "--lease", "2")
    for threshold in (40, 110):
        runs.wait_for("start", threshold)
        pids = pool.pids()
        killed.update(pids)
        pool.kill()  # SIGKILL to the group: supervisor and children at once
        killed_at = time.time()
        orphans = runs.cut_short(pids)
        assert orphans, "the kill must land while jobs run"
        # The next pool gets them back when their leases expire (lease + rescue interval).
        pool = start(groups, url, runs, tmp_path, "-p", "2", "-c", "3", "--lease", "2")
        recoveries.append(
            seconds_until_restarted(
                runs, orphans, killed_at, 60, "the killed pool's jobs to start again"
            )
        )
    jobs, lost, twice, ran_twice = finish_and_count_after_kills(url, ids, pool, runs, killed)
    report(
        backend,
        Row(
            "SIGKILL the whole pool x2, 200 jobs",
            200,
            len(lost),
            len(twice),
            ran_twice,
            " / ".join(f"{r:.2f}s" for r in recoveries) + " (liveness; else lease 2s + rescue 5s)",
        ),
    )
    assert not lost and not twice
    # By the killed children's liveness signals while their records lasted (the new
    # pool may start in time), else by their leases: either way the attempt counts.
    assert all(e.type in ("WorkerLost", "LeaseExpired") for j in jobs.values() for e in j.errors)


def test_sigterm_drains_running_jobs_and_starts_none_of_the_waiting(
    backend: str, url: str, runs: Runs, groups: list[WorkerGroup], tmp_path: Path
) -> None:
    ids = enqueue(url, lambda app: [app.work.message(2.0) for _ in range(10)])
    pool = start(groups, url, runs, tmp_path, "-p", "2", "-c", "2", "--grace", "30")
    runs.wait_for("start", 4)  # both children full
    sent = time.monotonic()
    pool.signal(signal.SIGTERM)  # to the whole group, as a terminal or an init system does
    assert pool.wait(30) == 0  # drained
    took = time.monotonic() - sent
    assert runs.count("start") == 4 and runs.count("finish") == 4
    jobs = jobs_of(url, ids)
    states = Counter(j.state for j in jobs.values())
    assert states == {JobState.COMPLETED: 4, JobState.AVAILABLE: 6}
    assert all(j.attempt == 0 for j in jobs.values() if j.state is JobState.AVAILABLE)
    # Nothing left behind (multiprocessing's resource tracker leaves when the supervisor has).
    poll(lambda: not pool.pids(), 30, "every process of the pool to exit")
    report(
        backend,
        Row(
            "SIGTERM during 10 x 2s jobs",
            10,
            0,
            len(recorded_twice(jobs)),
            0,
            f"exit 0 after {took:.2f}s",
        ),
    )
    assert took < 2.0 + 8.0  # the jobs' remaining time, plus a generous margin for a busy box


def test_second_sigterm_is_a_cold_stop_and_the_next_pool_resumes(
    backend: str, url: str, runs: Runs, groups: list[WorkerGroup], tmp_path: Path
) -> None:
    ids = enqueue(
        url,
        lambda app: (
            [app.work.message(30.0) for _ in range(4)] + [app.work.message(0.01) for _ in range(4)]
        ),
    )
    pool = start(groups, url, runs, tmp_path, "-p", "2", "-c", "2", "--grace", "60")
    poll(lambda: len(runs.in_flight()) == 4, 60, "four long jobs running")
    pool.signal(signal.SIGTERM)
    poll(lambda: "drain" in pool.output(), 30, "the drain to begin")
    pool.signal(signal.SIGTERM)
    assert pool.wait(30) == 3  # cold
    jobs = jobs_of(url, ids)
    running_then = set(runs.in_flight())
    for job_id in running_then:
        assert jobs[job_id].state is JobState.AVAILABLE and jobs[job_id].attempt == 0
    # A new pool picks up exactly where this one stopped: the returned jobs run again
    # (same attempt number: the cold stop used none) and the waiting ones run once.
    again = start(groups, url, runs, tmp_path, "-p", "2", "-c", "4", "--grace", "60")
    short = [job_id for job_id in ids if job_id not in running_then]
    finished = wait_finished(url, short)
    assert all(j.state is JobState.COMPLETED and j.attempt == 1 for j in finished.values())
    poll(
        lambda: set(runs.in_flight(again.children())) == running_then,
        60,
        "the returned jobs to run in the new pool",
    )
    assert Counter(
        e.attempt for e in runs.events() if e.kind == "start" and e.job_id in running_then
    ) == {1: 8}
    again.signal(signal.SIGTERM)
    poll(lambda: "drain" in again.output(), 30, "the drain to begin")
    again.signal(signal.SIGTERM)
    assert again.wait(30) == 3
    assert all(
        j.state is JobState.AVAILABLE and j.attempt == 0
        for j in jobs_of(url, sorted(running_then)).values()
    )
    report(
        backend,
        Row("second SIGTERM: cold stop", len(ids), 0, 0, 0, "running jobs back, attempt refunded"),
    )


def test_children_of_a_killed_supervisor_return_their_jobs_and_leave(
    backend: str, url: str, runs: Runs, groups: list[WorkerGroup], tmp_path: Path
) -> None:
    ids = enqueue(url, lambda app: [app.work.message(60.0) for _ in range(4)])
    pool = start(groups, url, runs, tmp_path, "-p", "2", "-c", "2")
    poll(lambda: len(runs.in_flight()) == 4, 60, "four jobs running")
    os.kill(pool.proc.pid, signal.SIGKILL)  # the supervisor only
    killed_at = time.monotonic()
    poll(lambda: not pool.pids(), 30, "the orphaned children to stop by themselves")
    took = time.monotonic() - killed_at
    jobs = jobs_of(url, ids)
    assert all(j.state is JobState.AVAILABLE and j.attempt == 0 for j in jobs.values())
    report(
        backend,
        Row(
            "SIGKILL the supervisor only",
            4,
            0,
            0,
            0,
            f"children returned jobs, exited in {took:.2f}s",
        ),
    )


def test_long_job_with_heartbeats_never_runs_twice(
    backend: str, url: str, runs: Runs, groups: list[WorkerGroup], tmp_path: Path
) -> None:
    # Renewed every lease/3 = 1 s; two missed renewals in a row are still not a loss.
    [job_id] = enqueue(url, lambda app: [app.work.message(8.0)])
    start(groups, url, runs, tmp_path, "-p", "2", "-c", "2", "--lease", "3")
    start(groups, url, runs, tmp_path, "-p", "1", "-c", "2", "--lease", "3")  # a second host
    job = wait_finished(url, [job_id], timeout=60)[job_id]
    assert job.state is JobState.COMPLETED and job.attempt == 1 and not job.errors
    assert runs.count("start") == 1 and runs.count("finish") == 1
    report(backend, Row("8s job, lease 3s, heartbeats on", 1, 0, 0, 0, "never ran twice"))


def test_stalled_worker_runs_twice_and_its_late_completion_is_fenced(
    backend: str, url: str, runs: Runs, groups: list[WorkerGroup], tmp_path: Path
) -> None:
    # The stalled run lasts until the rescuer has rescued the job and runs it again: with a
    # fixed length, a rescuer slow to start on a loaded machine let the stalled worker, free
    # again, claim the job back itself (and, never renewing, lose it a second time).
    gate = tmp_path / "gate"
    [job_id] = enqueue(url, lambda app: [app.held.message(str(gate))])
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
        env={"CONVEYOR_TEST_HEARTBEATS": "0"},
    )
    runs.wait_for("start", 1)
    # A pool elsewhere rescues the expired lease (rescue every 0.2 s) and runs it again.
    rescuer = start(
        groups,
        url,
        runs,
        tmp_path,
        "-p",
        "1",
        "-c",
        "1",
        "--lease",
        "10",
        "--rescue",
        "0.2",
        via_script=True,
    )
    runs.wait_for("start", 2)
    gate.touch()
    job = wait_finished(url, [job_id], timeout=60)[job_id]
    assert job.result_value == "attempt 2"
    runs.wait_for("finish", 2)  # the stalled run finishes too, and tries to record it
    poll(lambda: "stale" in stalled.output(), 30, "the stalled worker's late ack to be refused")
    after = jobs_of(url, [job_id])[job_id]
    assert after.state is JobState.COMPLETED and after.result_value == "attempt 2"
    assert after.attempt == 2 and [e.type for e in after.errors] == ["LeaseExpired"]
    assert Counter(e.attempt for e in runs.events() if e.kind == "finish") == {1: 1, 2: 1}
    for group in (stalled, rescuer):
        group.signal(signal.SIGTERM)
        assert group.wait(30) == 0, group.output()[-3000:]
    report(
        backend,
        Row(
            "heartbeats off, lease 1s, held job",
            1,
            0,
            len(recorded_twice({job_id: after})),
            1,
            "2nd run after lease; late ack fenced",
        ),
    )


def test_handler_holding_the_gil_stalls_heartbeats_and_its_late_completion_is_fenced(
    backend: str, url: str, runs: Runs, groups: list[WorkerGroup], tmp_path: Path
) -> None:
    [job_id] = enqueue(url, lambda app: [app.gil_hog.message(8.0)])
    hogged = start(groups, url, runs, tmp_path, "-p", "1", "-c", "2", "--lease", "1")
    runs.wait_for("start", 1)  # from now on that child's loop is frozen for 8 s
    rescuer = start(
        groups,
        url,
        runs,
        tmp_path,
        "-p",
        "1",
        "-c",
        "1",
        "--lease",
        "30",
        "--rescue",
        "0.2",
        via_script=True,
    )
    job = wait_finished(url, [job_id], timeout=90)[job_id]
    runs.wait_for("finish", job.attempt)
    if backend == "sqlite":
        # A process frozen inside a write transaction holds SQLite's one write lock: the
        # rescuer cannot write either until the hog ends, and then either the rescue or
        # the late completion comes first. Both end with one recorded completion.
        assert job.attempt >= 1
    else:
        assert job.attempt == 2  # rescued during the hog, run again elsewhere
    if job.attempt > 1:
        poll(
            lambda: "stale" in hogged.output() or "lease lost" in hogged.output(),
            30,
            "the hogging child's late completion to be refused",
        )
    after = jobs_of(url, [job_id])[job_id]
    # Exactly one completion recorded: the last attempt's; every earlier run finished
    # too, and its outcome was refused.
    assert after.state is JobState.COMPLETED and after.result_value == f"attempt {after.attempt}"
    assert [e.type for e in after.errors] == ["LeaseExpired"] * (after.attempt - 1)
    finishes = Counter(e.attempt for e in runs.events() if e.kind == "finish")
    assert finishes == {n: 1 for n in range(1, after.attempt + 1)}
    for group in (hogged, rescuer):
        group.signal(signal.SIGTERM)
        assert group.wait(30) == 0, group.output()[-3000:]
    report(
        backend,
        Row(
            "GIL held 8s in C, lease 1s",
            1,
            0,
            len(recorded_twice({job_id: after})),
            after.attempt - 1,
            f"{after.attempt} runs; late acks fenced",
        ),
    )


def test_poison_pill_dead_after_max_attempts_without_holding_up_the_queue(
    backend: str, url: str, runs: Runs, groups: list[WorkerGroup], tmp_path: Path
) -> None:
    [poison] = enqueue(url, lambda app: [app.poison.message()])
    others = enqueue(url, lambda app: [app.work.message(0.02) for _ in range(30)])
    pool = start(groups, url, runs, tmp_path, "-p", "2", "-c", "2")
    jobs = wait_finished(url, [poison, *others])
    pill = jobs[poison]
    assert pill.state is JobState.DEAD and pill.attempt == pill.max_attempts == 4
    assert [(e.attempt, e.type) for e in pill.errors] == [
        (n, "ConnectionError") for n in (1, 2, 3, 4)
    ]
    assert all("poison pill, attempt" in e.message for e in pill.errors)
    assert runs.per_job("start")[poison] == 4
    assert all(jobs[j].state is JobState.COMPLETED for j in others)
    pool.signal(signal.SIGTERM)
    assert pool.wait(30) == 0
    report(
        backend,
        Row(
            "poison pill + 30 jobs",
            31,
            0,
            len(recorded_twice(jobs)),
            0,
            "dead after 4 attempts, 4 errors kept",
        ),
    )


def test_one_business_job_enqueued_twice_runs_once(
    backend: str, url: str, runs: Runs, groups: list[WorkerGroup], tmp_path: Path
) -> None:
    def twice() -> list[str]:
        return enqueue(url, lambda app: [app.work.options(job_id="invoice-42").message(1.0)])

    # Two producers at once, then once more while the job runs.
    results: list[list[str]] = []
    threads = [threading.Thread(target=lambda: results.append(twice())) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    pool = start(groups, url, runs, tmp_path, "-p", "2", "-c", "2")
    runs.wait_for("start", 1)
    results.append(twice())
    assert [r for r in results] == [["invoice-42"]] * 3
    job = wait_finished(url, ["invoice-42"])["invoice-42"]
    assert job.state is JobState.COMPLETED and job.attempt == 1
    pool.signal(signal.SIGTERM)
    assert pool.wait(30) == 0
    assert runs.count("start") == 1 and runs.count("finish") == 1
    report(backend, Row("same job_id enqueued 3x", 1, 0, 0, 0, "ran once"))


def test_dropped_backend_connections_are_recovered_by_the_workers(
    backend: str, url: str, runs: Runs, groups: list[WorkerGroup], tmp_path: Path
) -> None:
    drop = DROP_CONNECTIONS.get(backend)
    assert drop is not None, (
        f"add a connection-drop fault for {backend!r} to "
        "DROP_CONNECTIONS in tests/faults/harness.py"
    )
    ids = enqueue(url, lambda app: [app.work.message(0.1) for _ in range(150)])
    pool = start(groups, url, runs, tmp_path, "-p", "2", "-c", "3")
    recoveries: list[float] = []
    descriptions: list[str] = []
    for threshold in (30, 80):
        runs.wait_for("finish", threshold)
        descriptions.append(drop(url, pool.pids()))
        dropped_at = time.time()
        recoveries.append(
            seconds_until_claimed_and_settled(
                url, ids, dropped_at, "a job claimed and settled after the drop"
            )
        )
    jobs = wait_finished(url, ids)
    lost = [j for j in jobs.values() if j.state is not JobState.COMPLETED]
    twice = recorded_twice(jobs)
    assert len(pool.children()) >= 2, "the children recover by themselves, no restart"
    pool.signal(signal.SIGTERM)
    assert pool.wait(60) == 0
    report(
        backend,
        Row(
            f"backend drop x2 ({descriptions[0]})",
            len(ids),
            len(lost),
            len(twice),
            0,
            " / ".join(f"{r:.2f}s" for r in recoveries),
        ),
    )
    assert not lost and not twice


@pytest.mark.parametrize("server_backend", sorted(set(PRIVATE_SERVERS) & set(BACKENDS)))
def test_backend_server_crash_and_restart(
    server_backend: str, runs: Runs, groups: list[WorkerGroup], tmp_path: Path
) -> None:
    with PRIVATE_SERVERS[server_backend](tmp_path) as server:
        url = server.url
        ids = enqueue(url, lambda app: [app.work.message(0.1) for _ in range(120)])
        pool = start(groups, url, runs, tmp_path, "-p", "2", "-c", "3")
        runs.wait_for("finish", 30)
        server.crash()  # SIGKILL: every connection is gone and new ones are refused
        down_at = time.time()
        time.sleep(2.0)  # the outage itself, not synchronisation
        server.start()
        up_at = time.time()
        recovery = seconds_until_claimed_and_settled(
            url, ids, up_at, "a job claimed and settled after the restart"
        )
        jobs = wait_finished(url, ids)
        lost = [j for j in jobs.values() if j.state is not JobState.COMPLETED]
        twice = recorded_twice(jobs)
        assert pool.proc.poll() is None, "the pool rides out the outage"
        pool.signal(signal.SIGTERM)
        assert pool.wait(60) == 0
    report(
        server_backend,
        Row(
            "server SIGKILLed, down 2s, restarted",
            len(ids),
            len(lost),
            len(twice),
            0,
            f"{recovery:.2f}s after restart ({up_at - down_at:.1f}s down)",
        ),
    )
    assert not lost and not twice
