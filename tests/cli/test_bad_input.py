"""Bad input ends in ONE line on stderr, no traceback, and a meaningful exit code."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from cli_harness import Cli

USAGE, FAILURE = 2, 1


def assert_one_line_error(result, code: int, *fragments: str) -> str:  # type: ignore[no-untyped-def]
    assert result.code == code, (result.code, result.err)
    assert "Traceback" not in result.err
    lines = result.err.splitlines()
    assert len(lines) == 1, result.err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert result.out == ""
    return lines[0]


@pytest.mark.parametrize(
    ("args", "code", "fragments"),
    [
        (("stats", "--url", "not-a-url"), USAGE, ["malformed backend URL 'not-a-url'"]),
        (
            ("stats", "--url", "mysql://admin:hunter2@db/jobs"),
            USAGE,
            ["unknown backend scheme 'mysql'", "admin:***@db"],
        ),
        (
            ("stats", "--url", "sqlite://admin:hunter2@host/jobs.db"),
            USAGE,
            ["malformed SQLite URL", "admin:***@host"],
        ),
        (("jobs", "list", "--app", "example_app"), USAGE, ["must be module:attribute"]),
        (
            ("jobs", "list", "--app", "no_such_module:app"),
            USAGE,
            ["cannot import app module 'no_such_module'", "no module named 'no_such_module'"],
        ),
        (
            ("jobs", "list", "--app", "example_app.sub:app"),
            USAGE,
            ["no module named 'example_app.sub'"],
        ),
        (
            ("jobs", "list", "--app", "example_app:apq"),
            USAGE,
            ["module 'example_app' has no attribute 'apq'", "Conveyor apps in it: app"],
        ),
        (
            ("jobs", "list", "--app", "example_app:add"),
            USAGE,
            ["example_app:add is a Task, not a Conveyor app"],
        ),
        (
            ("jobs", "list", "--app", "broken_app:app"),
            USAGE,
            [
                "error while importing the app 'broken_app:app': ModuleNotFoundError: No module "
                "named 'conveyor_tests_dependency_that_is_not_installed'",
                "broken_app.py, line 3)",
            ],
        ),
        (
            ("jobs", "list", "--app", "raising_app:app"),
            USAGE,
            [
                "error while importing the app 'raising_app:app': ZeroDivisionError: division by "
                "zero",
                "raising_app.py, line 9)",
            ],
        ),
        (
            ("worker", "raising_app:app"),
            USAGE,
            ["error while importing the app 'raising_app:app': ZeroDivisionError"],
        ),
        (
            ("stats", "--url", "postgresql://admin:hunter2@db:abc/jobs"),
            USAGE,
            ["malformed backend URL 'postgresql://admin:***@db:abc/jobs': port 'abc'"],
        ),
        (
            ("stats", "--url", "redis://cache:x/0"),
            USAGE,
            ["malformed backend URL 'redis://cache:x/0': port 'x'"],
        ),
        (("worker", "no_such_module:app"), USAGE, ["no module named 'no_such_module'"]),
        (
            ("enqueue", "--app", "example_app:app", "send_emial"),
            USAGE,
            [
                "task 'send_emial' is not registered; known: add, exports.build, greet, "
                "myapp.tasks.parse_amount, parse_total, reports.build, wait_for_file"
            ],
        ),
        (
            ("enqueue", "--app", "example_app:app", "build", "x"),
            USAGE,
            ["task name 'build' is ambiguous: exports.build, reports.build"],
        ),
        (
            ("enqueue", "--app", "example_app:app", "add", "1"),
            USAGE,
            ["add(a: ", "missing a required argument: 'b'"],
        ),
        (
            ("enqueue", "--app", "example_app:app", "add", "1", "--kw", "2"),
            USAGE,
            ["--kw '2': expected KEY=VALUE"],
        ),
        (
            ("enqueue", "--app", "example_app:app", "add", "1", "2", "--priority", str(2**31)),
            USAGE,
            ["priority=2147483648: expected a whole number from -2147483648 to 2147483647"],
        ),
        (
            ("enqueue", "--app", "example_app:app", "add", "1", "2", "--job-id", ""),
            USAGE,
            ["job_id='': expected non-empty text"],
        ),
        (
            ("enqueue", "--app", "example_app:app", "add", "1", "2", "--queue", "a\tb"),
            USAGE,
            ["queue='a\\tb': expected non-empty text", "without control characters"],
        ),
        (
            ("enqueue", "--app", "example_app:app", "add", "1", "2", "--delay", "inf"),
            USAGE,
            ["delay=inf: expected a timedelta or a number of seconds"],
        ),
        (
            ("enqueue", "--url", "sqlite:///x.db", "add", "1", "2"),
            USAGE,
            ["needs the task functions: pass --app"],
        ),
        (("jobs", "show", "0123456789abcdef"), FAILURE, ["no job with id '0123456789abcdef'"]),
        (("jobs", "cancel", "0123456789abcdef"), FAILURE, ["no job with id '0123456789abcdef'"]),
        (("jobs", "list", "--state", "finished"), USAGE, ["unknown state 'finished'"]),
        (("jobs", "list", "--limit", "0"), USAGE, ["--limit", "must be at least 1"]),
        (("worker", "example_app:app", "-c", "many"), USAGE, ["not a whole number: 'many'"]),
        (
            ("worker", "example_app:app", "-q", "critical=6,bulk"),
            USAGE,
            ["worker settings: give every queue a weight or none: critical=6,bulk"],
        ),
        (
            ("worker", "example_app:app", "-q", "critical=0"),
            USAGE,
            ["worker settings: queue weights must be positive numbers, got [0.0]"],
        ),
        (("dead", "purge"), USAGE, ["refusing to purge every dead job"]),
        (
            ("stats", "--url", "sqlite:////no/such/folder/jobs.db"),
            FAILURE,
            ["cannot open the backend at sqlite:////no/such/folder/jobs.db"],
        ),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else None,
)
def test_bad_input_is_one_clear_line(
    cli: Cli, args: tuple[str, ...], code: int, fragments: list[str]
) -> None:
    line = assert_one_line_error(cli(*args), code, *fragments)
    assert "hunter2" not in line


def test_syntax_error_in_the_app_names_its_file_and_line(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "typo_app.py").write_text(
        "from conveyor import Conveyor\n\napp = Conveyor('sqlite:///x.db'\n"
    )
    env = {**cli.env, "PYTHONPATH": f"{tmp_path}{os.pathsep}{cli.env.get('PYTHONPATH', '')}"}
    assert_one_line_error(
        cli("jobs", "list", "--app", "typo_app:app", env=env),
        USAGE,
        "error while importing the app 'typo_app:app': SyntaxError: ",
        "typo_app.py, line 3)",
    )


def test_no_backend_at_all(cli: Cli) -> None:
    env = {k: v for k, v in cli.env.items() if k != "CONVEYOR_URL"}
    assert_one_line_error(cli("stats", env=env), USAGE, "no backend given", "$CONVEYOR_URL")
    # The example app reads $CONVEYOR_URL when imported: the core's own message comes through.
    assert_one_line_error(
        cli("jobs", "list", "--app", "example_app:app", env=env), USAGE, "no backend URL"
    )


def test_a_missing_command_lists_the_commands(cli: Cli) -> None:
    alone = cli()
    assert (alone.code, alone.err) == (USAGE, "")
    listed = re.findall(r"^    (\w+)", alone.out, flags=re.M)
    assert listed == [
        "worker",
        "scheduler",
        "cron",
        "enqueue",
        "jobs",
        "stats",
        "dead",
        "queue",
        "migrate",
        "audit",
        "demo",
        "workers",
        "queues",
        "throughput",
        "breakers",
        "dashboard",
    ]
    group = cli("jobs")
    assert (group.code, group.err) == (USAGE, "")
    assert re.findall(r"^    (\w+)", group.out, flags=re.M) == [
        "list",
        "show",
        "cancel",
        "retry",
        "delete",
    ]
    assert group.out.startswith("usage: conveyor jobs [-h] VERB ...")


@pytest.mark.parametrize(
    "args",
    [
        ("worker", "example_app:app"),
        ("worker", "example_app:app", "-p", "2"),
        ("scheduler", "example_app:app"),
        ("jobs", "list", "--app", "example_app:app"),
        ("stats", "--url", "memory://tests"),
    ],
    ids=" ".join,
)
def test_a_memory_backend_is_refused_by_every_command(cli: Cli, args: tuple[str, ...]) -> None:
    """A command is a process of its own: a memory:// store there would be a new,
    empty one, and a worker on it would wait for jobs that never come."""
    env = {**cli.env, "CONVEYOR_URL": "memory://tests"}
    assert_one_line_error(
        cli(*args, env=env),
        USAGE,
        "memory://tests: a memory:// backend lives inside one process",
        "use sqlite:///jobs.db, postgresql:// or redis://",
    )
