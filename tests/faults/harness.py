"""Plumbing for the fault suite: worker process groups, the runs log, connection
droppers per backend, and the table printed at the end of the session."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from polling import poll as poll  # re-exported: the fault tests import it from here
from runs_log import Event as Event  # re-exported, as poll
from runs_log import read as read_runs
from sockets import tcp_ports_of

from conveyor import Conveyor
from conveyor.model.job import Job

HERE = Path(__file__).resolve().parent


# --- processes ------------------------------------------------------------------------------
def group_pids(pgid: int) -> list[int]:
    """Every live process in process group `pgid` (zombies excluded)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            pids.append(int(entry))
    return pids


def cli_available() -> bool:
    """True once `conveyor worker` (src/conveyor/cli) has the pool options."""
    # Ignored for mypy: set by the harness before this runs
    path = Path(__import__("conveyor").__file__).parent / "cli" / "commands_worker.py"  # type: ignore[arg-type]
    return path.exists() and "--max-tasks-per-child" in path.read_text()


class WorkerGroup:
    """A worker (or pool) in its own process group: a kill reaches every descendant."""

    def __init__(
        self,
        url: str,
        runs_log: Path,
        log_path: Path,
        *args: str,
        env: dict[str, str] | None = None,
        via_script: bool = False,
        app: str = "faults_app:app",
        cwd: Path = HERE,
        launcher: list[str] | None = None,
    ) -> None:
        full_env = {
            **os.environ,
            "CONVEYOR_URL": url,
            "RUNS_LOG": str(runs_log),
            "PYTHONPATH": f"{cwd}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            **(env or {}),
        }
        if via_script or not cli_available():
            command = [sys.executable, str(HERE / "run_worker.py"), app, *args]
        else:
            command = [*(launcher or [sys.executable, "-m", "conveyor"]), "worker", app, *args]
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            command,
            env=full_env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.pgid = self.proc.pid

    def signal(self, sig: int) -> None:
        os.killpg(self.pgid, sig)

    def pids(self) -> list[int]:
        return group_pids(self.pgid)

    def children(self) -> list[int]:
        return [pid for pid in self.pids() if pid != self.proc.pid]

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def stop(self, sig: int | None = None, timeout: float = 30) -> int:
        """Send `sig` (SIGTERM) to the group and return the exit status; a group still
        running after `timeout` fails the test with the end of its log."""
        sig = signal.SIGTERM if sig is None else sig
        self.signal(sig)
        try:
            return self.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"still running {timeout:.0f}s after {signal.Signals(sig).name}:\n"
                + self.output()[-6000:]
            ) from None

    def output(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL the whole group and wait until no member is left."""
        try:
            os.killpg(self.pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.proc.poll() is None:
            self.proc.wait(30)
        poll(lambda: not self.pids(), 30, f"process group {self.pgid} to be gone")
        self._log.close()


# --- the runs log ----------------------------------------------------------------------------
class Runs:
    def __init__(self, path: Path) -> None:
        self.path = path

    def events(self) -> list[Event]:
        return read_runs(self.path)

    def count(self, kind: str) -> int:
        return sum(1 for e in self.events() if e.kind == kind)

    def per_job(self, kind: str) -> Counter[str]:
        return Counter(e.job_id for e in self.events() if e.kind == kind)

    def wait_for(self, kind: str, n: int, timeout: float = 60.0) -> None:
        poll(
            lambda: self.count(kind) >= n, timeout, f"{n} {kind!r} events (have {self.count(kind)})"
        )

    def cut_short(self, pids: Iterable[int]) -> set[str]:
        """Jobs that one of `pids` started and did not finish: killed mid-handler."""
        wanted, open_runs = set(pids), set()
        for event in self.events():
            if event.pid not in wanted:
                continue
            if event.kind == "start":
                open_runs.add(event.job_id)
            elif event.kind == "finish":
                open_runs.discard(event.job_id)
        return open_runs

    def in_flight(self, pids: Iterable[int] | None = None) -> dict[str, Event]:
        """Jobs whose latest start has no finish after it (optionally: started by `pids`)."""
        latest: dict[str, Event] = {}
        for event in self.events():
            if event.kind == "start":
                latest[event.job_id] = event
            elif event.kind == "finish" and event.job_id in latest:
                del latest[event.job_id]
        wanted = None if pids is None else set(pids)
        return {j: e for j, e in latest.items() if wanted is None or e.pid in wanted}


# --- the app side -----------------------------------------------------------------------------
def enqueue(url: str, messages: Callable[[Any], list[Any]]) -> list[str]:
    import faults_app

    app = Conveyor(url)
    try:
        return [h.id for h in app.enqueue_many(messages(faults_app))]
    finally:
        app.close()


def jobs_of(url: str, ids: list[str]) -> dict[str, Job]:
    app = Conveyor(url)
    try:
        found = {job_id: app.jobs.get(job_id) for job_id in ids}
    finally:
        app.close()
    missing = [job_id for job_id, job in found.items() if job is None]
    assert not missing, f"{len(missing)} jobs vanished: {missing[:5]}"
    return found  # type: ignore[return-value]


def wait_finished(url: str, ids: list[str], timeout: float = 120.0) -> dict[str, Job]:
    def done() -> dict[str, Job] | None:
        jobs = jobs_of(url, ids)
        return jobs if all(j.is_finished for j in jobs.values()) else None

    try:
        return poll(done, timeout, "every job to finish", interval=0.1)
    except AssertionError:
        states = Counter(j.state.value for j in jobs_of(url, ids).values())
        raise AssertionError(f"jobs not finished after {timeout}s: {dict(states)}") from None


def recorded_twice(jobs: dict[str, Job]) -> list[str]:
    """Completed jobs whose stored result is not from their last attempt: an earlier
    attempt's completion was accepted and a later attempt ran anyway."""
    return [
        j.id
        for j in jobs.values()
        if j.result_value is not None and j.result_value != f"attempt {j.attempt}"
    ]


# --- dropping a backend's connections -----------------------------------------------------------


def _without_query(url: str, *drop: str) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k not in drop]
    return urlunsplit(parts._replace(query=urlencode(query)))


def hold_sqlite_lock(url: str, pids: list[int], seconds: float = 3.0) -> str:
    """SQLite has no connection to drop. The nearest fault: another process takes the
    write lock and keeps it, so every write of the workers waits (busy_timeout)."""
    path = urlsplit(url).path[1:]
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    try:
        conn.execute("BEGIN EXCLUSIVE")
        time.sleep(seconds)  # the outage itself, not synchronisation
        conn.execute("COMMIT")
    finally:
        conn.close()
    return f"write lock held {seconds:g}s"


def terminate_postgres_backends(url: str, pids: list[int]) -> str:
    """pg_terminate_backend on exactly the server processes serving the workers (found by
    their TCP ports), so other tests on the same server are untouched."""
    import psycopg

    ports = sorted(tcp_ports_of(pids))
    assert ports, "the workers hold no TCP connection to drop"
    with psycopg.connect(_without_query(url, "schema"), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE client_port = ANY(%s) AND pid <> pg_backend_pid()",
            (ports,),
        ).fetchall()
    assert rows, f"no PostgreSQL backend serves ports {ports}"
    return f"terminated {len(rows)} connections"


def kill_redis_clients(url: str, pids: list[int]) -> str:
    """CLIENT KILL on exactly the workers' connections (found by their TCP ports)."""
    import redis

    ports = tcp_ports_of(pids)
    client = redis.Redis.from_url(_without_query(url, "prefix"))
    try:
        killed = 0
        for info in client.client_list():
            host, _, port = str(info["addr"]).rpartition(":")
            if int(port) in ports:
                killed += int(
                    client.execute_command("CLIENT", "KILL", "ADDR", info["addr"])
                    in (True, b"OK", "OK")
                )
    finally:
        client.close()
    assert killed, f"no Redis client on ports {sorted(ports)}"
    return f"killed {killed} connections"


# backend name -> fault(url, worker pids) -> description; returns when the outage is over.
DROP_CONNECTIONS: dict[str, Callable[[str, list[int]], str]] = {
    "sqlite": hold_sqlite_lock,
    "postgres": terminate_postgres_backends,
    "redis": kill_redis_clients,
}


# --- a backend server of the test's own, to crash and restart ---------------------------------
def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateRedis:
    """A redis-server on a free port for one test. `appendfsync always`: every reply
    comes after its write is on disk, so a SIGKILL of the server loses nothing that
    was acknowledged, as with a durable production setup."""

    def __init__(self, directory: Path) -> None:
        import uuid

        self.directory = directory
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0?prefix=faults-{uuid.uuid4().hex[:8]}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        import redis

        log = open(self.directory / "redis-server.log", "ab")
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.directory),
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)

        def up() -> bool:
            try:
                return bool(client.ping())
            except redis.RedisError:
                return False

        try:
            poll(up, 30, f"redis-server on port {self.port}", interval=0.05)
        finally:
            client.close()

    def crash(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(30)

    def __enter__(self) -> PrivateRedis:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.crash()


# backend name -> a server of the test's own (url, start(), crash()), for a full restart.
PRIVATE_SERVERS: dict[str, Callable[[Path], Any]] = {
    "redis": PrivateRedis,
}


# --- the table ----------------------------------------------------------------------------------
@dataclass
class Row:
    scenario: str
    jobs: int
    lost: int
    recorded_twice: int
    ran_twice: int = 0  # handler finished twice: killed between its return and the ack
    recovery: str = "-"


TABLE: dict[str, list[Row]] = defaultdict(list)


def report(backend: str, row: Row) -> None:
    TABLE[backend].append(row)


def render_table() -> list[str]:
    lines = []
    header = ("scenario", "jobs", "lost", "completed >1", "ran twice*", "recovery")
    for backend in sorted(TABLE):
        rows = [
            (
                r.scenario,
                str(r.jobs),
                str(r.lost),
                str(r.recorded_twice),
                str(r.ran_twice),
                r.recovery,
            )
            for r in TABLE[backend]
        ]
        widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=True)]
        lines.append(f"backend: {backend}")
        for row in [header, *rows]:
            lines.append("  " + "  ".join(x.ljust(w) for x, w in zip(row, widths, strict=True)))
    if lines:
        lines.append(
            "* handler ran to its end twice: at-least-once after a kill between its return "
            "and the ack, or a stalled worker whose lease expired; the stored "
            "completion is still one."
        )
    return lines


def start(
    groups: list[WorkerGroup], url: str, runs: Runs, tmp_path: Path, *args: str, **kwargs: object
) -> WorkerGroup:
    """Start a worker group logging to its own file and remember it for clean-up."""
    group = WorkerGroup(url, runs.path, tmp_path / f"worker-{len(groups)}.log", *args, **kwargs)  # type: ignore[arg-type]
    groups.append(group)
    return group
