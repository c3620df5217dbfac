"""Real worker processes and the event log their jobs write, for the acceptance tests.

(Kept out of conftest.py: every conftest is a module named `conftest`, so importing
one by name can pick up another folder's.)"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from runs_log import read as read_runs

from conveyor import Conveyor
from conveyor.backends.sqlite.backend import parse_sqlite_url
from conveyor.model.workers import WORKERS_NAMESPACE
from conveyor.worker.liveness import announced_token

HERE = Path(__file__).resolve().parent


class WorkerProcess:
    """`conveyor worker` in its own process group, so a kill reaches every child."""

    def __init__(self, url: str, runs_log: Path, *args: str) -> None:
        env = {
            **os.environ,
            "CONVEYOR_URL": url,
            "RUNS_LOG": str(runs_log),
            "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        }
        # Output goes to a file: a pipe nobody reads could fill and block the worker.
        self.log_path = runs_log.with_name(
            f"worker-{len(list(runs_log.parent.glob('worker-*')))}.log"
        )
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "conveyor", "worker", "jobs_app:app", *args],
                env=env,
                cwd=HERE,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                text=True,
            )

    def signal(self, sig: int) -> None:
        os.killpg(self.proc.pid, sig)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def stopped(self) -> bool:
        """Has a SIGSTOP taken effect (state T in /proc)? Signals arrive asynchronously."""
        with open(f"/proc/{self.proc.pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "T"

    def stop_outside_write(self, url: str, timeout: float = 30.0) -> int:
        """SIGSTOP the worker at a moment it holds no SQLite write lock; return the
        number of stops it took.

        A process stopped inside a write transaction (a heartbeat, a claim) keeps
        SQLite's one write lock until it resumes: no other process can write, so
        nothing could rescue its job. That is SQLite's design, not what a stalled
        worker test is about; it made such a test fail about one run in twenty.
        So: stop, wait until the stop took effect, try to take the write lock; if
        it is held, let the worker run on and stop it again. Other backends have no
        such lock: one stop."""
        deadline = time.monotonic() + timeout
        path = parse_sqlite_url(url)[0] if url.startswith("sqlite:") else None
        stops = 0
        while True:
            self.signal(signal.SIGSTOP)
            stops += 1
            while not self.stopped():
                if time.monotonic() > deadline:
                    raise AssertionError(f"worker not stopped after {timeout}s")
                time.sleep(0.001)
            if path is None or _write_lock_is_free(path):
                return stops
            if time.monotonic() > deadline:
                raise AssertionError(f"worker held the write lock at each of {stops} stops")
            self.signal(signal.SIGCONT)
            time.sleep(0.005)  # let it finish that transaction before the next stop

    def output(self) -> str:
        return self.log_path.read_text()

    def wait_for_output(self, text: str, timeout: float = 30.0) -> None:
        """Poll the worker's log until `text` shows up (signals do not queue: a
        second signal sent before the first was handled would merge with it)."""
        deadline = time.monotonic() + timeout
        while text not in self.output():
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{text!r} not in worker output after {timeout}s:\n{self.output()}"
                )
            time.sleep(0.02)

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)


def _write_lock_is_free(path: str) -> bool:
    probe = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc):
            raise
        return False
    finally:
        probe.close()


def announced(url: str) -> dict[str, str]:
    """Worker id -> liveness token, for every worker whose record names one."""

    async def read() -> dict[str, str]:
        app = Conveyor(url)
        try:
            records = await (await app.backend()).list_records(WORKERS_NAMESPACE)
        finally:
            await app.aclose()
        return {w: t for w, r in records.items() if (t := announced_token(r)) is not None}

    return asyncio.run(read())


class Runs:
    def __init__(self, path: Path) -> None:
        self.path = path

    def events(self) -> list[tuple[str, str, int, int]]:
        return [(e.kind, e.job_id, e.attempt, e.pid) for e in read_runs(self.path)]

    def count(self, event: str) -> int:
        return sum(1 for e in self.events() if e[0] == event)

    def wait_for(self, event: str, n: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.count(event) < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"only {self.count(event)} {event!r} events after {timeout}s")
            time.sleep(0.02)
