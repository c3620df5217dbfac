"""SQLite: reads never wait for the write lock.

A process stopped (SIGSTOP) inside a write transaction holds SQLite's write lock
until it resumes. Readers of a WAL file still see the last commit, so a fresh
process's admin reads and `conveyor jobs list` must answer at once: opening the
backend only looks at the schema version, and takes the write lock only when a
migration is due."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import Conveyor
from conveyor.backends.params import JobFilter
from conveyor.backends.sqlfiles import load_migrations
from conveyor.model.job import JobState, NewJob

# Takes the write lock and stops itself inside the transaction.
LOCK_HOLDER = """
import os, signal, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute("UPDATE conveyor_jobs SET priority = priority + 1")
os.kill(os.getpid(), signal.SIGSTOP)
conn.execute("ROLLBACK")
"""

READER = """
import json, sys
from conveyor import Conveyor
from conveyor.backends.params import JobFilter
app = Conveyor(sys.argv[1])
job = app.jobs.get("reader-1")
print(json.dumps({
    "state": job.state.value, "priority": job.priority,
    "count": app.jobs.count(JobFilter()),
    "listed": [j.id for j in app.jobs.list()],
    "stats": [(s.queue, s.counts.get("available", 0)) for s in app.jobs.stats()],
    "workers": len(app.jobs.workers()),
    "throughput_minutes": len(app.jobs.throughput(minutes=5)),
}))
app.close()
"""

# Well under the 30 s busy timeout a write would wait before "database is locked".
READ_DEADLINE = 10.0


@pytest.fixture
def db(tmp_path: Path) -> tuple[str, str]:
    path = str(tmp_path / "jobs.db")
    url = f"sqlite:///{path}"
    app = Conveyor(url)
    try:
        app.enqueue_many(
            [
                NewJob(
                    id="reader-1",
                    task="t",
                    queue="q",
                    payload='{"args":[],"kwargs":{}}',
                    priority=5,
                )
            ]
        )
    finally:
        app.close()
    return path, url


@pytest.fixture
def lock_held(db: tuple[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    path, _ = db
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, path])
    try:
        _, status = os.waitpid(holder.pid, os.WUNTRACED)  # returns once it has stopped
        assert os.WIFSTOPPED(status), f"lock holder ended instead of stopping: {status}"
        # The setup is real: no one can begin a write now.
        probe = sqlite3.connect(path, timeout=0)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            probe.execute("BEGIN IMMEDIATE")
        probe.close()
        yield holder
    finally:
        holder.send_signal(signal.SIGCONT)
        holder.kill()
        holder.wait(10)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=READ_DEADLINE
    )


@pytest.mark.slow
def test_fresh_process_reads_while_another_holds_the_write_lock(
    db: tuple[str, str], lock_held: subprocess.Popen[bytes]
) -> None:
    _, url = db
    done = _run("-c", READER, url)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    seen = json.loads(done.stdout)
    # The last commit, not the stopped transaction's uncommitted +1.
    assert seen == {
        "state": "available",
        "priority": 5,
        "count": 1,
        "listed": ["reader-1"],
        "stats": [["q", 1]],
        "workers": 0,
        "throughput_minutes": 5,
    }


@pytest.mark.slow
def test_cli_lists_jobs_while_another_holds_the_write_lock(
    db: tuple[str, str], lock_held: subprocess.Popen[bytes]
) -> None:
    _, url = db
    listed = _run("-m", "conveyor", "jobs", "list", "--url", url, "--json")
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == ["reader-1"]
    shown = _run("-m", "conveyor", "jobs", "show", "reader-1", "--url", url, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["state"] == JobState.AVAILABLE.value


def test_a_new_file_is_migrated_and_a_migrated_one_is_not_written(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    app = Conveyor(url)
    try:
        assert app.jobs.migrate() == []  # auto_migrate applied them on first use
        assert app.jobs.count(JobFilter()) == 0
    finally:
        app.close()
    conn = sqlite3.connect(tmp_path / "jobs.db")
    versions = [row[0] for row in conn.execute("SELECT version FROM conveyor_migrations")]
    conn.close()
    assert versions == [m.version for m in load_migrations("conveyor.backends.sqlite")]
