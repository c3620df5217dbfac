"""`conveyor worker --burst / --max-jobs / --reload` as real processes, on every backend."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from backends_under_test import CLEANUPS, SHARED_BACKENDS
from cli_harness import HERE, wait_until

from conveyor import Conveyor
from conveyor.admin.api import make_filter
from conveyor.model.job import JobState


@pytest.fixture(params=sorted(SHARED_BACKENDS))
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    name = str(request.param)
    made = asyncio.run(SHARED_BACKENDS[name](tmp_path))
    yield made
    cleanup = CLEANUPS.get(name)
    if cleanup is not None:
        asyncio.run(cleanup(made))


@pytest.fixture
def producer(url: str) -> Iterator[Conveyor]:
    """The test's side of example_app: the same task names, to enqueue and inspect."""
    app = Conveyor(url)

    @app.task(name="add")
    # Ignored for mypy: a task declared by name: its body runs elsewhere
    def add(a: int, b: int) -> int: ...  # type: ignore[empty-body]

    @app.task(name="parse_total")
    # Ignored for mypy: a task declared by name: its body runs elsewhere
    def parse_total(text: str) -> float: ...  # type: ignore[empty-body]

    yield app
    app.close()


def conveyor(
    url: str, *args: str, cwd: Path = HERE, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CONVEYOR_URL": url}
    return subprocess.run(
        [sys.executable, "-m", "conveyor", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def count(app: Conveyor, state: JobState) -> int:
    return app.jobs.count(make_filter(states=[state]))


def test_burst_drains_and_exits_0(url: str, producer: Conveyor) -> None:
    adds = [producer.tasks["add"].enqueue(n, 1) for n in range(4)]
    run = conveyor(url, "worker", "example_app:app", "--burst", "-c", "2", "--poll", "30")
    assert run.returncode == 0, run.stderr
    assert [h.result(timeout=1) for h in adds] == [1, 2, 3, 4]
    assert "burst: nothing more is due" in run.stderr


def test_burst_exits_4_when_a_job_ended_dead(url: str, producer: Conveyor) -> None:
    good = producer.tasks["add"].enqueue(2, 2)
    bad = producer.tasks["parse_total"].enqueue("twelve")
    run = conveyor(url, "worker", "example_app:app", "--burst", "--poll", "30")
    assert run.returncode == 4, run.stderr
    assert "1 job(s) ended dead during this run" in run.stderr
    assert producer.jobs.get(good.id).state is JobState.COMPLETED  # type: ignore[union-attr]
    assert producer.jobs.get(bad.id).state is JobState.DEAD  # type: ignore[union-attr]


def test_max_jobs_runs_that_many_then_exits(url: str, producer: Conveyor) -> None:
    for n in range(5):
        producer.tasks["add"].enqueue(n, n)
    run = conveyor(url, "worker", "example_app:app", "--max-jobs", "2", "-c", "1")
    assert run.returncode == 0, run.stderr
    assert (count(producer, JobState.COMPLETED), count(producer, JobState.AVAILABLE)) == (2, 3)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--burst", "-p", "2"], "--burst runs one worker process"),
        (["--max-jobs", "3", "-p", "2"], "--max-jobs runs one worker process"),
        (["--burst", "--reload"], "--reload restarts a worker that runs until stopped"),
        (["--reload-dir", "."], "--reload-dir goes with --reload"),
    ],
)
def test_mode_options_that_do_not_go_together(url: str, args: list[str], message: str) -> None:
    run = conveyor(url, "worker", "example_app:app", *args)
    assert (run.returncode, message in run.stderr) == (2, True), run.stderr


APP_SOURCE = """from conveyor import Conveyor

app = Conveyor()


@app.task(name="version")
def version() -> str:
    return {version!r}
"""


def test_reload_restarts_the_worker_on_a_code_change(url: str, tmp_path: Path) -> None:
    code = tmp_path / "project"
    code.mkdir()
    module = code / "reload_app.py"
    module.write_text(APP_SOURCE.format(version="v1"))
    producer = Conveyor(url)

    @producer.task(name="version")
    # Ignored for mypy: a task declared by name: its body runs elsewhere
    def version() -> str: ...  # type: ignore[empty-body]

    log_path = tmp_path / "worker.log"
    env = {**os.environ, "CONVEYOR_URL": url, "PYTHONUNBUFFERED": "1"}
    with open(log_path, "wb") as log:
        parent = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "conveyor",
                "worker",
                "reload_app:app",
                "--reload",
                "--poll",
                "0.2",
                "--grace",
                "5",
            ],
            cwd=code,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def logged(fragment: str, times: int = 1) -> bool:
        return log_path.read_text(errors="replace").count(fragment) >= times

    try:
        wait_until(lambda: logged(" started: queues="), "the first worker")
        assert version.enqueue().result(timeout=20) == "v1"

        module.write_text("def broken(:\n")  # the child cannot import it, and says so
        wait_until(lambda: logged("exited with 2; waiting for a change"), "the broken child")
        module.write_text(APP_SOURCE.format(version="v2"))
        wait_until(lambda: logged(" started: queues=", times=2), "a worker on the new code")
        assert version.enqueue().result(timeout=20) == "v2"

        parent.send_signal(signal.SIGTERM)
        assert parent.wait(30) == 0
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        producer.close()
    text = log_path.read_text()
    assert text.count("changed; restarting the worker") == 2, text
    assert text.count(" stopped (drained)") == 2, text  # the first child and the last
    assert "Traceback" not in text
