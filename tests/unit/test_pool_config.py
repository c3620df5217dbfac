"""Pool settings: sizes for --max-memory-per-child, and the checks on PoolConfig."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conveyor.worker.pool.config import PoolConfig, parse_size, rss_bytes


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("300000000", 300_000_000),
        ("512MiB", 512 << 20),
        ("512m", 512 << 20),
        ("2GB", 2_000_000_000),
        ("1.5g", 3 << 29),
        ("10 MiB", 10 << 20),
        ("64kb", 64_000),
    ],
)
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "x", "12xb", "-1", "0", "1.5.2G"])
def test_bad_sizes_say_what_to_write(text: str) -> None:
    with pytest.raises(ValueError, match="e.g. 512MiB"):
        parse_size(text)


def test_pool_config_checks() -> None:
    with pytest.raises(ValueError, match="at least one process"):
        PoolConfig(processes=0)
    with pytest.raises(ValueError, match="max_tasks_per_child"):
        PoolConfig(processes=2, max_tasks_per_child=0)


RSS_PROBE = """
from conveyor.worker.pool.config import rss_bytes
before = rss_bytes()
ballast = bytearray(64 << 20)  # touched pages count, so write them
ballast[:: 4096] = b"\\x01" * len(range(0, len(ballast), 4096))
print(rss_bytes() - before)
"""


def test_rss_is_this_process_size() -> None:
    # In a fresh interpreter: a test process that ran hundreds of tests before (threads
    # freeing memory meanwhile, heaps of their own) once showed no growth at all.
    grown = int(
        subprocess.run(
            [sys.executable, "-c", RSS_PROBE],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
    )
    assert grown >= 60 << 20
    assert rss_bytes() > 0  # this process's own figure reads too


FAULTS = Path(__file__).resolve().parents[1] / "faults"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-tasks-per-child", "3"], "--max-tasks-per-child replaces pool children: add -p"),
        (
            ["--max-memory-per-child", "1GiB"],
            "--max-memory-per-child replaces pool children: add -p",
        ),
        (["-p", "2", "--max-memory-per-child", "12q"], "'12q' is not a size"),
        (["-p", "0"], "must be at least 1"),
    ],
)
def test_cli_pool_options_are_checked(tmp_path: Path, args: list[str], message: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "conveyor", "worker", "faults_app:app", *args],
        cwd=FAULTS,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "CONVEYOR_URL": f"sqlite:///{tmp_path / 'j.db'}"},
    )
    assert run.returncode == 2 and message in run.stderr, run.stderr
