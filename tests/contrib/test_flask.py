"""conveyor.contrib.flask with Flask's test client and CLI runner."""

from __future__ import annotations

from collections.abc import Iterator

import flask_project
import pytest
from flask import Flask

from conveyor import Conveyor
from conveyor.contrib._commands import command_line
from conveyor.contrib.flask import FlaskConveyor, current_conveyor
from conveyor.model.errors import ConfigurationError
from conveyor.model.job import JobState


@pytest.fixture
def jobs(conveyor_url: str) -> Iterator[Conveyor]:
    app = flask_project.make_jobs(conveyor_url)
    yield app
    app.close()


@pytest.fixture
def web(jobs: Conveyor) -> Flask:
    return flask_project.create_app(jobs)


def test_a_view_enqueues_and_a_burst_worker_from_flask_runs_it(jobs: Conveyor, web: Flask) -> None:
    client = web.test_client()
    ids = [client.post(f"/signup/{n}").get_json()["job"] for n in (1, 2)]
    assert [jobs.jobs.get(i).state for i in ids] == [JobState.AVAILABLE] * 2  # type: ignore[union-attr]

    result = web.test_cli_runner().invoke(args=["conveyor", "worker", "--burst", "-c", "2"])
    assert result.exit_code == 0, result.output
    assert [jobs.jobs.get(i).result_value for i in ids] == ["welcomed 1", "welcomed 2"]  # type: ignore[union-attr]


def test_flask_conveyor_passes_the_exit_code_and_the_app(jobs: Conveyor, web: Flask) -> None:
    runner = web.test_cli_runner()
    bad = jobs.tasks["parse_total"].enqueue("twelve")
    assert runner.invoke(args=["conveyor", "worker", "--burst"]).exit_code == 4
    listed = runner.invoke(args=["conveyor", "jobs", "list", "--state", "dead", "--json"])
    assert listed.exit_code == 0 and bad.id in listed.output
    enqueued = runner.invoke(args=["conveyor", "enqueue", "send_welcome", "7"])
    assert enqueued.exit_code == 0, enqueued.output
    assert jobs.jobs.get(enqueued.output.strip()).args == [7]  # type: ignore[union-attr]
    assert runner.invoke(args=["conveyor", "worker", "--no-such-option"]).exit_code == 2


def test_current_conveyor_outside_an_initialised_app() -> None:
    with Flask("bare").app_context(), pytest.raises(ConfigurationError, match="init_app"):
        current_conveyor()


def test_the_import_path_is_found_or_asked_for(jobs: Conveyor) -> None:
    assert FlaskConveyor(jobs).import_path == "flask_project:jobs"
    stray = Conveyor(jobs.url)
    with pytest.raises(ConfigurationError, match="pass its import path"):
        _ = FlaskConveyor(stray).import_path
    assert FlaskConveyor(stray, import_path="pkg.mod:jobs").import_path == "pkg.mod:jobs"


@pytest.mark.parametrize(
    "args, expected",
    [
        (["worker", "-c", "2"], ["worker", "p:a", "-c", "2"]),
        (["dashboard"], ["dashboard", "p:a"]),
        (["jobs", "list"], ["jobs", "list", "--app", "p:a"]),
        (["jobs", "list", "--url", "sqlite:///x"], ["jobs", "list", "--url", "sqlite:///x"]),
        (["demo"], ["demo"]),
        (["--help"], ["--help"]),
    ],
)
def test_command_line(args: list[str], expected: list[str]) -> None:
    assert command_line("p:a", args) == expected
