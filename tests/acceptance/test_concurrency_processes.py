"""Per-key concurrency (docs/flow-control.md) with real worker processes: at most N
running per key and per task across processes; a killed or frozen worker's slot
comes back (at once by its liveness signal or its pool's supervisor, after its
lease when it is frozen), and until then nothing else of its key runs."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterable

import pytest
from acceptance_support import Runs, WorkerProcess, announced
from polling import poll
from runs_log import Event
from runs_log import read as read_runs

from conveyor import Conveyor
from conveyor.model.job import JobState, NewJob

pytestmark = pytest.mark.slow


def enqueue(url: str, messages: Callable[[], Iterable[NewJob]]) -> list[str]:
    app = Conveyor(url)
    try:
        return [h.id for h in app.enqueue_many(list(messages()))]
    finally:
        app.close()


def most_at_once(events: list[Event], ids: set[str]) -> int:
    """The most of `ids` whose handlers ran at the same moment, from their start and
    finish times (a finish logged at the same microsecond as a start comes first: it
    was logged before its job settled, so before the next one was claimed)."""
    marks = sorted((e.at, e.kind == "start") for e in events if e.job_id in ids)
    now = most = 0
    for _, is_start in marks:
        now += 1 if is_start else -1
        most = max(most, now)
    return most


def one_after_the_other(events: list[Event], first: str, then: str) -> bool:
    """`then` started only after `first`'s second attempt finished (its first one, in
    the worker that was killed or frozen, never logged a finish)."""
    finished = [e.at for e in events if (e.kind, e.job_id, e.attempt) == ("finish", first, 2)]
    started = [e.at for e in events if (e.kind, e.job_id) == ("start", then)]
    return len(finished) == len(started) == 1 and finished[0] <= started[0]


def all_done(url: str, ids: list[str], timeout: float = 120.0) -> None:
    app = Conveyor(url)
    try:
        poll(
            lambda: all(
                app.jobs.get(i).state is JobState.COMPLETED  # type: ignore[union-attr]
                for i in ids
            ),
            timeout,
            f"{len(ids)} jobs to complete",
            interval=0.1,
        )
    except AssertionError as exc:
        jobs = [app.jobs.get(i) for i in ids]
        raise AssertionError(
            f"{exc}: {[(j.id, j.state.value, j.attempt, j.worker_id) for j in jobs if j]}"
        ) from None
    finally:
        app.close()


def test_worker_processes_never_run_more_than_a_keys_limit(
    url: str, runs: Runs, workers: list[WorkerProcess]
) -> None:
    from jobs_app import capped, per_user

    by_user = {
        # Ignored for mypy: a lambda binding its loop value by default
        user: enqueue(url, lambda u=user: [per_user.message(u, 0.1) for _ in range(12)])  # type: ignore[misc]
        for user in (1, 2, 3)
    }
    task_jobs = enqueue(url, lambda: [capped.message(0.1) for _ in range(15)])
    for _ in range(3):
        workers.append(WorkerProcess(url, runs.path, "-c", "4"))
    all_done(url, [i for ids in by_user.values() for i in ids] + task_jobs)
    events = read_runs(runs.path)
    for user, ids in by_user.items():
        assert most_at_once(events, set(ids)) == 2, user  # reached, never passed
    assert most_at_once(events, set(task_jobs)) == 3
    # Waiting for a slot used no attempt: each job ran once.
    assert Counter(e.attempt for e in events if e.kind == "start") == {1: 51}
    assert len({e.pid for e in events}) > 1  # the key was shared across processes


def a_key_held(
    url: str, runs: Runs, workers: list[WorkerProcess], user: int, *worker_args: str
) -> tuple[str, str, WorkerProcess]:
    """Two jobs of one key of limit 1, the first hanging on its first attempt in a
    worker started here: (that job, the one waiting for its slot, the worker)."""
    from jobs_app import hang_keyed

    [held, waiting] = enqueue(
        url, lambda: [hang_keyed.message(user, 120.0), hang_keyed.message(user, 0.0)]
    )
    holder = WorkerProcess(url, runs.path, *worker_args)
    workers.append(holder)
    runs.wait_for("start", 1)
    return held, waiting, holder


def ran_again_then_the_other(url: str, runs: Runs, held: str, waiting: str) -> list[Event]:
    """Wait for both jobs; check that the lost attempt's job kept its place in line (it
    ran again first) and that the other started only after it finished; return the
    starts."""
    all_done(url, [held, waiting], timeout=60)
    starts = [e for e in read_runs(runs.path) if e.kind == "start"]
    assert [(e.job_id, e.attempt) for e in starts] == [(held, 1), (held, 2), (waiting, 1)]
    assert one_after_the_other(read_runs(runs.path), held, waiting)
    return starts


def test_a_killed_workers_slot_comes_back_at_once(
    url: str, runs: Runs, workers: list[WorkerProcess]
) -> None:
    held, waiting, victim = a_key_held(url, runs, workers, 42, "-c", "4", "--lease", "30")
    other = WorkerProcess(url, runs.path, "-c", "4", "--lease", "30")
    workers.append(other)
    poll(lambda: len(announced(url)) == 2, 30, "both workers to announce their signals")
    assert [e.job_id for e in read_runs(runs.path)] == [held]  # the key is full
    killed_at = time.time()
    victim.signal(signal.SIGKILL)
    starts = ran_again_then_the_other(url, runs, held, waiting)
    assert {e.pid for e in starts[1:]} == {other.proc.pid}
    assert starts[1].at - killed_at < 5.0  # its liveness signal, not the 30 s lease


def test_a_frozen_workers_slot_comes_back_with_its_lease(
    url: str, runs: Runs, workers: list[WorkerProcess]
) -> None:
    """SIGSTOP keeps the frozen worker's liveness signal held, so only its lease (3 s)
    ending gives the slot back."""
    held, waiting, frozen = a_key_held(url, runs, workers, 7, "-c", "2", "--lease", "3")
    other = WorkerProcess(url, runs.path, "-c", "2", "--lease", "3")
    workers.append(other)
    other.wait_for_output("started: queues=")
    frozen.stop_outside_write(url)
    frozen_at = time.time()
    try:
        starts = ran_again_then_the_other(url, runs, held, waiting)
    finally:
        frozen.signal(signal.SIGCONT)
    assert starts[1].at - frozen_at >= 2.0  # not before the lease (3 s, heartbeats ahead)
    app = Conveyor(url)
    try:
        job = app.jobs.get(held)
        assert job is not None and [e.type for e in job.errors] == ["LeaseExpired"]
    finally:
        app.close()


def test_a_pool_gives_a_dead_childs_slot_back_at_once(
    url: str, runs: Runs, workers: list[WorkerProcess]
) -> None:
    held, waiting, pool = a_key_held(url, runs, workers, 9, "-p", "2", "-c", "2", "--lease", "60")
    [first] = read_runs(runs.path)
    assert first.pid != pool.proc.pid  # a child runs it
    killed_at = time.time()
    os.kill(first.pid, signal.SIGKILL)  # the child alone, not its supervisor
    starts = ran_again_then_the_other(url, runs, held, waiting)
    assert starts[1].at - killed_at < 10.0  # the supervisor, not the 60 s lease
