"""The commands of docs/performance.md still run: each benchmark behind its figures, at a
size that only shows it works (a few dozen to a few hundred jobs), against the real
servers. Each benchmark checks on its own that every job it enqueued ran, or was stored,
exactly once, and fails otherwise; this test asserts it exited 0 and printed its rows.
No figure is read: speed is shown by the benchmarks themselves (docs/performance.md)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from backends_under_test import postgres_url, redis_url

pytestmark = pytest.mark.slow

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

RUNS = {
    "enqueue_cost": (
        ["--jobs", "30", "--repeat", "1"],
        [
            "sqlite    enqueue, async API",
            "postgres  enqueue, sync API",
            "redis     enqueue_many 1000",
        ],
    ),
    "enqueue_bounds": (
        ["--jobs", "30", "--repeat", "1"],
        [
            "sqlite   own thread",
            "postgres our statement",
            "postgres async ours",
            "redis    least enqueue",
            "redis    async least",
        ],
    ),
    "cost_per_job": (
        ["--jobs", "300", "--repeat", "1"],
        ["sqlite    async", "postgres  sync", "redis     async"],
    ),
    "worker_rss": (["--jobs", "3000"], ["sqlite", "postgres", "redis"]),
    "throughput": (
        ["--jobs", "300", "--one-by-one", "30", "--latency-samples", "10"],
        ["enqueue one by one (sync API)", "drain 300 sync no-op jobs", "idle pickup latency"],
    ),
}


@pytest.fixture
def servers(tmp_path: Path) -> None:
    """Skip (fail in CI) without PostgreSQL or Redis: the benchmarks use both."""
    asyncio.run(postgres_url(tmp_path))  # connects, creates nothing
    asyncio.run(redis_url(tmp_path))


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_benchmark_runs_and_prints_its_rows(name: str, servers: None) -> None:
    args, rows = RUNS[name]
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / f"{name}.py"), *args],
        cwd=BENCHMARKS,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    for row in rows:
        assert row in result.stdout, (row, result.stdout)
