"""The examples in examples/ run and print what their docs say."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_quickstart(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py"), str(tmp_path / "q.db")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "sent welcome mail to user 42 | same job: True",
        "avatar-42.png | attempts: 2",
    ]


def test_periodic(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(EXAMPLES / "periodic.py"), str(tmp_path / "p.db")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "cron:sync_accounts:2026-03-28T23:00:00Z -> synced 23:00..23:00 UTC (1 ticks)",
        "cron:nightly_backup:2026-03-29T01:00:00Z -> None",
        "cron:sync_accounts:2026-03-29T05:00:00Z -> synced 23:05..05:00 UTC (72 ticks)",
        "nightly_backup",
        "  cron '30 2 * * *' in Europe/Madrid; misfire=skip overlap=skip",
        "  next  2026-03-30 00:30:00 UTC   2026-03-30 02:30 CEST (Europe/Madrid)",
        "  last  2026-03-29T01:00:00Z  job cron:nightly_backup:2026-03-29T01:00:00Z  completed",
        "",
        "sync_accounts",
        "  every 0:05:00; misfire=catch_up overlap=skip",
        "  next  2026-03-29 05:05:00 UTC",
        "  last  2026-03-29T05:00:00Z  job cron:sync_accounts:2026-03-29T05:00:00Z  completed,"
        " covering 2026-03-28T23:05:00Z .. 2026-03-29T05:00:00Z",
    ]


def test_payments_checkout(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(EXAMPLES / "payments" / "checkout.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "order 42: paid with ch_1 after 2 attempts (attempt 1 ended Retry, Retry-After 1s, "
        "app 1.4.2)",
        "provider: 1 charge request(s), 1 charge, key charge:42",
        "mailer: 2 request(s), 1 receipt sent",
        "late write from fence 1: 0 row(s) changed",
        "orders: [(42, 'paid', 'ch_1', 2)]",
    ]


def _run_example(args: list[str], tmp_path: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "CONVEYOR_URL": f"sqlite:///{tmp_path / 'jobs.db'}",
        "DJANGO_DB": str(tmp_path / "django.db"),
    }
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_fastapi_example(tmp_path: Path) -> None:
    run = _run_example([str(EXAMPLES / "fastapi_app.py")], tmp_path, EXAMPLES.parent)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "dashboard without login: 401",
        "dashboard as ops: 200",
        "welcome mail sent to user 42",
    ]


def test_flask_example(tmp_path: Path) -> None:
    run = _run_example([str(EXAMPLES / "flask_app.py")], tmp_path, EXAMPLES.parent)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "flask conveyor worker --burst exited with 0",
        "welcome mail sent to user 42",
    ]


def test_django_example_project(tmp_path: Path) -> None:
    project = EXAMPLES / "django_project"
    run = _run_example(["manage.py", "test", "--noinput"], tmp_path, project)
    assert run.returncode == 0, run.stderr
    assert "Ran 2 tests" in run.stderr and "\nOK\n" in run.stderr
    migrated = _run_example(["manage.py", "migrate", "--noinput"], tmp_path, project)
    assert migrated.returncode == 0, migrated.stderr
    burst = _run_example(["manage.py", "conveyor", "worker", "--burst"], tmp_path, project)
    assert burst.returncode == 0, burst.stderr
    assert "burst: nothing more is due" in burst.stderr


def test_testing_example_runs_its_tests_without_any_server(tmp_path: Path) -> None:
    """examples/testing: a Starlette route enqueues, the tests drain (docs/testing.md).
    With `-p conveyor.testing` named as well, the plugin its entry point loads is the
    one plugin (not loaded twice); no backend URL is set, and no file is written."""
    folder = EXAMPLES / "testing"
    env = {k: v for k, v in os.environ.items() if k != "CONVEYOR_URL"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "conveyor.testing",
            "-p",
            "no:cacheprovider",
            "-W",
            "ignore::DeprecationWarning",
        ],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines()[-1].startswith("4 passed"), run.stdout
    assert not (folder / "shop-jobs.db").exists()


def test_etl_fanout(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(EXAMPLES / "etl_fanout.py"), str(tmp_path / "e.db")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "loaded 6 rows into sales: total 98",
        *[
            "  etl.extract   completed after 0 parent(s)",
            "  etl.transform completed after 1 parent(s)",
        ]
        * 3,
        "  etl.load      completed after 3 parent(s)",
    ]
