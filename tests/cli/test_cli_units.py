"""The small pure pieces of the CLI, in process."""

from __future__ import annotations

import pytest

from conveyor import Conveyor
from conveyor.cli.commands_jobs import cli_value, find_task, keyword_arguments
from conveyor.cli.commands_worker import default_queues
from conveyor.cli.exits import CliError, scrub_passwords
from conveyor.cli.render import duration, table
from conveyor.model.errors import UnknownTask


@pytest.fixture
def app(tmp_path) -> Conveyor:  # type: ignore[no-untyped-def]
    app = Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}", default_queue="main")

    @app.task(name="billing.charge", queue="billing")
    def charge(amount: int) -> None: ...

    @app.task(name="emails.charge")
    def charge_mail(amount: int) -> None: ...

    @app.task(name="emails.welcome", queue="emails")
    def welcome(user: int) -> None: ...

    return app


def test_cli_values_are_json_when_they_parse() -> None:
    assert [cli_value(t) for t in ["7", "7.5", "true", "null", '"7"', "seven", "[1]", "{"]] == [
        7,
        7.5,
        True,
        None,
        "7",
        "seven",
        [1],
        "{",
    ]
    assert keyword_arguments(["n=3", "name=Ada", "tags=[1, 2]", "empty="]) == {
        "n": 3,
        "name": "Ada",
        "tags": [1, 2],
        "empty": "",
    }
    with pytest.raises(CliError, match="expected KEY=VALUE"):
        keyword_arguments(["not a name=1"])


def test_find_task_by_full_name_or_unique_suffix(app: Conveyor) -> None:
    assert find_task(app, "emails.welcome").name == "emails.welcome"
    assert find_task(app, "welcome").name == "emails.welcome"
    with pytest.raises(CliError, match="ambiguous: billing.charge, emails.charge"):
        find_task(app, "charge")
    with pytest.raises(UnknownTask, match="'welcom' is not registered"):
        find_task(app, "welcom")


def test_default_queues_cover_every_task_and_the_default(app: Conveyor) -> None:
    assert default_queues(app) == ("main", "billing", "emails")


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("postgresql://app:s3cr%40t@db:5432/jobs", "postgresql://app:***@db:5432/jobs"),
        ("failed: redis://:pw@cache:6379/0 refused", "failed: redis://:***@cache:6379/0 refused"),
        ("sqlite:////var/jobs.db", "sqlite:////var/jobs.db"),
        ("user@example.com", "user@example.com"),
    ],
)
def test_passwords_are_scrubbed(text: str, shown: str) -> None:
    assert scrub_passwords(text) == shown


def test_durations_and_tables() -> None:
    assert [duration(s) for s in (0.25, 3.25, 42, 245, 3 * 3600 + 600, 2 * 86400 + 3600)] == [
        "250ms",
        "3.2s",
        "42s",
        "4m05s",
        "3h10m",
        "2d01h",
    ]
    assert table(["A", "LONGER"], [["xyz", "1"], ["b", "multi\nline"]]).splitlines() == [
        "A    LONGER",
        "xyz  1",
        "b    multi line",
    ]
