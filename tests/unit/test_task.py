from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from conveyor import Conveyor
from conveyor.model.clock import ManualClock
from conveyor.model.errors import ArgumentValidationError, ConfigurationError, SerializationError
from conveyor.model.job import JobState


@pytest.fixture
def app(tmp_path: Path) -> Conveyor:
    return Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}", clock=ManualClock(1_000.0))


def test_plain_call_runs_inline(app: Conveyor) -> None:
    @app.task
    def double(x: int) -> int:
        return 2 * x

    assert double(21) == 42
    assert double.name.endswith("double")


def test_options_never_mix_with_function_kwargs(app: Conveyor) -> None:
    @app.task(queue="mail")
    def send(to: str, *, queue: str = "theirs") -> None: ...

    message = send.options(
        queue="urgent", priority=9, delay=timedelta(seconds=30), job_id="send:1"
    ).message("a@b.c", queue="their-kwarg")
    assert message.queue == "urgent" and message.priority == 9 and message.id == "send:1"
    assert message.run_at == 1_030.0
    assert '"queue":"their-kwarg"' in message.payload


def test_bad_arguments_fail_at_enqueue(app: Conveyor) -> None:
    @app.task
    def needs_int(user_id: int) -> None: ...

    with pytest.raises(ArgumentValidationError, match="missing a required argument"):
        # Ignored for mypy: the missing argument is the point of the test
        needs_int.message()  # type: ignore[call-arg]
    with pytest.raises(SerializationError, match="cannot be stored as JSON"):
        needs_int.message(object())  # type: ignore[arg-type]
    with pytest.raises(SerializationError):
        needs_int.message(float("nan"))  # type: ignore[arg-type]


def test_run_at_must_be_aware_and_exclusive_with_delay(app: Conveyor) -> None:
    @app.task
    def later() -> None: ...

    when = datetime(2030, 1, 1, 9, 0, tzinfo=timezone(timedelta(hours=1)))
    assert later.options(run_at=when).message().run_at == when.timestamp()
    with pytest.raises(ValueError, match="naive"):
        later.options(run_at=datetime(2030, 1, 1))
    with pytest.raises(ValueError, match="not both"):
        later.options(run_at=when, delay=5)


def test_two_tasks_with_one_name_are_refused(app: Conveyor) -> None:
    @app.task(name="dup")
    def first() -> None: ...

    with pytest.raises(ConfigurationError, match="two tasks are named 'dup'"):

        @app.task(name="dup")
        def second() -> None: ...


@pytest.mark.parametrize(
    "url, message",
    [
        ("jobs.db", "malformed backend URL"),
        ("mysql://x/y", "unknown backend scheme 'mysql'"),
        ("sqlite://host/jobs.db", "malformed SQLite URL"),
        ("sqlite:///:memory:", "names no file"),
        ("sqlite:///jobs.db?fast=1", "unknown SQLite URL option"),
        ("postgresql://h:abc/db", "malformed backend URL 'postgresql://h:abc/db': port 'abc'"),
        ("postgresql://h1:5432,h2:x/db", "port 'x' of host 'h2:x'"),
        ("postgresql://u:secret@h:5432:1/db", r"malformed backend URL 'postgresql://u:\*\*\*@h"),
        ("redis://h:x/0", "malformed backend URL 'redis://h:x/0': port 'x'"),
        ("rediss://h:70000/0", "port '70000'"),
        ("redis://[::1]:abc/0", "port 'abc'"),
    ],
)
def test_malformed_urls_get_clear_errors(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Conveyor(url)


def test_missing_url_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONVEYOR_URL", raising=False)
    with pytest.raises(ConfigurationError, match="CONVEYOR_URL"):
        Conveyor()


def test_sync_enqueue_and_dedup_round_trip(app: Conveyor) -> None:
    @app.task
    def welcome(user_id: int) -> None: ...

    try:
        first = welcome.options(job_id="welcome:42").enqueue(42)
        second = welcome.options(job_id="welcome:42").enqueue(42)
        assert first.id == second.id == "welcome:42"
        assert app.jobs.get("welcome:42").state is JobState.AVAILABLE  # type: ignore[union-attr]
        handles = app.enqueue_many([welcome.message(i) for i in range(10)])
        assert len({h.id for h in handles}) == 10
    finally:
        app.close()


def test_unopenable_sqlite_file_is_backend_unavailable(tmp_path: Path) -> None:
    from conveyor.model.errors import BackendUnavailable

    app = Conveyor(f"sqlite:///{tmp_path / 'missing-dir' / 'jobs.db'}")
    try:
        with pytest.raises(BackendUnavailable, match="cannot open SQLite database"):
            app.jobs.count()
    finally:
        app.close()


def _signatures() -> list[object]:
    def positional_only(a, b=2, /, c=3): ...  # type: ignore[no-untyped-def]
    # Ignored for mypy: a task declared by name: its body runs elsewhere
    def keyword_only(user_id: int, *, template: str = "welcome") -> str: ...  # type: ignore[empty-body]
    def star(a, *args, d, **kwargs): ...  # type: ignore[no-untyped-def]
    def nothing() -> None: ...

    return [positional_only, keyword_only, star, nothing, lambda x, y=2: 0]


CALLS = [
    ((), {}),
    ((1,), {}),
    ((1, 2), {}),
    ((1, 2, 3, 4), {}),
    ((), {"a": 1}),
    ((1,), {"d": 4}),
    ((1,), {"template": "x"}),
    ((), {"user_id": 1}),
    ((1,), {"zzz": 1}),
    ((1,), {"c": 3, "b": 2}),
    ((), {"x": 1, "y": 2}),
]


@pytest.mark.parametrize("fn", _signatures())
def test_the_argument_checker_accepts_exactly_what_signature_bind_accepts(fn: object) -> None:
    import inspect

    from conveyor.task import argument_checker

    signature = inspect.signature(fn)  # type: ignore[arg-type]
    check = argument_checker(signature)
    assert check is not None
    for args, kwargs in CALLS:
        try:
            # Ignored for mypy: the table's kwargs are dicts, typed object
            signature.bind(*args, **kwargs)  # type: ignore[arg-type]
            expected = True
        except TypeError:
            expected = False
        try:
            # Ignored for mypy: the table's kwargs are dicts, typed object
            check(*args, **kwargs)  # type: ignore[arg-type]
            got = True
        except TypeError:
            got = False
        assert got == expected, (args, kwargs)
