"""conveyor.contrib.django: runs the Django tests of tests/contrib/django_site/shop
(Django's own runner and test client) under a settings module this test writes, once
per setup: Conveyor on SQLite or PostgreSQL with Django on SQLite, and the
transactional mode with both on PostgreSQL. Then `manage.py conveyor worker --burst`
as a real process."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from backends_under_test import POSTGRES_URL, drop_postgres_schema, postgres_url

from conveyor import Conveyor
from conveyor.model.job import JobState

SITE = Path(__file__).resolve().parent / "django_site"
SETTINGS = """
SECRET_KEY = "tests-only-not-a-secret-0123456789abcdef"
INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes",
                  "django.contrib.sessions", "conveyor.contrib.django", "shop"]
MIDDLEWARE = ["django.contrib.sessions.middleware.SessionMiddleware",
              "django.middleware.common.CommonMiddleware",
              "django.middleware.csrf.CsrfViewMiddleware",
              "django.contrib.auth.middleware.AuthenticationMiddleware"]
ROOT_URLCONF = "site_urls"
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast, tests only
DATABASES = {databases!r}
CONVEYOR = {conveyor!r}
"""


def write_settings(folder: Path, databases: dict[str, object], conveyor: dict[str, object]) -> str:
    (folder / "conveyor_test_settings.py").write_text(
        SETTINGS.format(databases=databases, conveyor=conveyor)
    )
    return "conveyor_test_settings"


def django(
    folder: Path, settings: str, *args: str, timeout: float = 180.0
) -> subprocess.CompletedProcess[str]:
    env = {
        **{k: v for k, v in os.environ.items() if k != "CONVEYOR_URL"},
        "DJANGO_SETTINGS_MODULE": settings,
        "PYTHONPATH": os.pathsep.join([str(folder), str(SITE), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=SITE,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def sqlite_db(folder: Path) -> dict[str, object]:
    # A test database in a file, not in memory: Django keeps an in-memory one open for
    # good, and the tests see connections being retired.
    return {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(folder / "django.db"),
            "TEST": {"NAME": str(folder / "django-test.db")},
        }
    }


def ran(result: subprocess.CompletedProcess[str]) -> tuple[int, str]:
    """(tests run, the closing line) of a Django test run."""
    found = re.search(r"^Ran (\d+) tests?", result.stderr, re.MULTILINE)
    closing = re.search(r"^(OK.*|FAILED.*)$", result.stderr, re.MULTILINE)
    assert found and closing, result.stderr
    return int(found.group(1)), closing.group(1)


def test_django_tests_with_conveyor_on_sqlite(tmp_path: Path) -> None:
    settings = write_settings(
        tmp_path, sqlite_db(tmp_path), {"url": f"sqlite:///{tmp_path / 'jobs.db'}"}
    )
    result = django(tmp_path, settings, "test", "shop", "--noinput")
    assert result.returncode == 0, result.stderr
    assert ran(result) == (13, "OK (skipped=2)")  # the transactional ones need PostgreSQL


def test_django_tests_with_conveyor_on_postgres(tmp_path: Path) -> None:
    url = asyncio.run(postgres_url(tmp_path))
    settings = write_settings(tmp_path, sqlite_db(tmp_path), {"url": url})
    try:
        result = django(tmp_path, settings, "test", "shop", "--noinput")
    finally:  # the jobs schema the site's tests wrote in (it outlived every run before)
        asyncio.run(drop_postgres_schema(url))
    assert result.returncode == 0, result.stderr
    assert ran(result) == (13, "OK (skipped=2)")


def test_django_tests_transactional_on_djangos_own_postgres_connection(tmp_path: Path) -> None:
    asyncio.run(postgres_url(tmp_path))  # skips, or fails in CI, without PostgreSQL
    import psycopg

    server = psycopg.conninfo.conninfo_to_dict(POSTGRES_URL)
    test_db = f"conveyor_django_{uuid.uuid4().hex[:10]}"  # Django creates and drops it
    databases = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": server.get("dbname", "test"),
            "USER": server.get("user", "postgres"),
            "HOST": server.get("host", "127.0.0.1"),
            "PORT": str(server.get("port", "5432")),
            "TEST": {"NAME": test_db},
        }
    }
    base = POSTGRES_URL.rsplit("/", 1)[0]
    settings = write_settings(
        tmp_path,
        databases,  # type: ignore[arg-type]  # settings are any JSON-like values
        {"url": f"{base}/{test_db}?schema=conveyor_jobs", "transactional": True},
    )
    result = django(tmp_path, settings, "test", "shop", "--noinput")
    assert result.returncode == 0, result.stderr
    assert ran(result) == (13, "OK (skipped=4)")  # the on-commit ones are the other mode
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        left = conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [test_db])
        assert left.fetchone() == (0,)  # Conveyor let go of it, so Django could drop it


def test_manage_py_conveyor_worker_is_the_conveyor_command(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    settings = write_settings(tmp_path, sqlite_db(tmp_path), {"url": url})
    producer = Conveyor(url)

    @producer.task(name="shop.tasks.send_receipt")
    # Ignored for mypy: a task declared by name: its body runs elsewhere
    def send_receipt(order_id: int) -> str: ...  # type: ignore[empty-body]

    @producer.task(name="shop.tasks.parse_total")
    # Ignored for mypy: a task declared by name: its body runs elsewhere
    def parse_total(text: str) -> float: ...  # type: ignore[empty-body]

    try:
        receipt = send_receipt.enqueue(11)
        bad = parse_total.enqueue("twelve")
        run = django(tmp_path, settings, "conveyor", "worker", "--burst", "-c", "2")
        assert run.returncode == 4, run.stderr
        assert receipt.result(timeout=1) == "receipt for order 11"
        assert producer.jobs.get(bad.id).state is JobState.DEAD  # type: ignore[union-attr]
        listed = django(tmp_path, settings, "conveyor", "jobs", "list", "--state", "dead")
        assert listed.returncode == 0 and bad.id in listed.stdout, listed.stderr
    finally:
        producer.close()


@pytest.mark.parametrize(
    "conveyor, message",
    [
        ({}, "no backend URL"),
        ({"url": "sqlite:///x.db", "colour": "red"}, "unknown CONVEYOR setting(s) ['colour']"),
        ({"url": "sqlite:///x.db", "transactional": True}, "needs the PostgreSQL backend"),
    ],
)
def test_bad_settings_say_what_is_wrong(
    tmp_path: Path, conveyor: dict[str, object], message: str
) -> None:
    settings = write_settings(tmp_path, sqlite_db(tmp_path), conveyor)
    result = django(tmp_path, settings, "check")
    assert result.returncode != 0 and message in result.stderr, result.stderr
