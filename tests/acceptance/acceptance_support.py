"""Real worker processes and the event log their jobs write, for the acceptance tests.

(Kept out of conftest.py: every conftest is a module named `conftest`, so importing
one by name can pick up another folder's.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from runs_log import read as read_runs

HERE = Path(__file__).resolve().parent


class WorkerProcess:
    """`conveyor worker` in its own process group, so a kill reaches every child."""

    def __init__(self, url: str, runs_log: Path, *args: str) -> None:
        env = {**os.environ, "CONVEYOR_URL": url, "RUNS_LOG": str(runs_log),
               "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        # Output goes to a file: a pipe nobody reads could fill and block the worker.
        self.log_path = runs_log.with_name(f"worker-{len(list(runs_log.parent.glob('worker-*')))}.log")
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "conveyor", "worker", "jobs_app:app", *args],
                env=env, cwd=HERE, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, text=True,
            )

    def signal(self, sig: int) -> None:
        os.killpg(self.proc.pid, sig)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def output(self) -> str:
        return self.log_path.read_text()

    def wait_for_output(self, text: str, timeout: float = 30.0) -> None:
        """Poll the worker's log until `text` shows up (signals do not queue: a
        second signal sent before the first was handled would merge with it)."""
        deadline = time.monotonic() + timeout
        while text not in self.output():
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not in worker output after {timeout}s:\n{self.output()}")
            time.sleep(0.02)

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)


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
