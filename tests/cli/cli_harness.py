"""Running `conveyor` as a real subprocess, and waiting on it without sleeps as sync."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from polling import poll

HERE = Path(__file__).resolve().parent
T = TypeVar("T")


def wait_until(check: Callable[[], T], what: str, timeout: float = 20.0) -> T:
    """`poll` with a default timeout that covers a worker process starting up."""
    return poll(check, timeout, what, interval=0.05)


@dataclass
class Result:
    args: tuple[str, ...]
    code: int
    out: str
    err: str

    def ok(self) -> Result:
        assert self.code == 0, f"conveyor {' '.join(self.args)} -> {self.code}\n{self.err}"
        return self


@dataclass
class WorkerProcess:
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, fragment: str, timeout: float = 20.0) -> None:
        def seen() -> bool:
            if self.proc.poll() is not None and fragment not in self.log():
                raise AssertionError(
                    f"worker exited ({self.proc.returncode}) before "
                    f"logging {fragment!r}:\n{self.log()}"
                )
            return fragment in self.log()

        wait_until(seen, f"worker log {fragment!r}", timeout)

    def signal(self, signum: int = signal.SIGTERM) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float = 20.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker still running after {timeout}s:\n{self.log()}") from None


@dataclass
class Cli:
    """`conveyor` in a subprocess, run from this folder (so `example_app:app` imports)
    with $CONVEYOR_URL pointing at one test's own SQLite file."""

    url: str
    tmp_path: Path
    env: dict[str, str] = field(default_factory=dict)
    workers: list[WorkerProcess] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.env = {k: v for k, v in os.environ.items() if k != "CONVEYOR_DEBUG"}
        self.env["CONVEYOR_URL"] = self.url
        self.env["PYTHONUNBUFFERED"] = "1"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "conveyor"]

    def __call__(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 60.0
    ) -> Result:
        done = subprocess.run(
            [*self.command(), *args],
            cwd=HERE,
            env=env or self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return Result(args, done.returncode, done.stdout, done.stderr)

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "--json").ok().out)

    def job(self, job_id: str) -> dict[str, Any]:
        return dict(self.json("jobs", "show", job_id))

    def enqueue(self, *args: str) -> str:
        out = self("enqueue", "--app", "example_app:app", *args).ok().out
        return out.strip()

    def start_worker(self, *args: str, app: str = "example_app:app") -> WorkerProcess:
        log_path = self.tmp_path / f"worker-{len(self.workers)}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [*self.command(), "worker", app, *args],
                cwd=HERE,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        worker = WorkerProcess(proc, log_path)
        self.workers.append(worker)
        return worker

    def cleanup(self) -> None:
        for worker in self.workers:
            if worker.proc.poll() is None:
                worker.proc.kill()
                worker.proc.wait(10)
