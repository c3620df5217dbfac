"""Helpers for the Redis backend's tests: private servers, worker processes, polling."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

RUNNER = Path(__file__).with_name("worker_runner.py")
SRC = Path(__file__).resolve().parents[3] / "src"


def redis_server_binary() -> str | None:
    return shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A redis-server process in its own directory, which can be killed and restarted
    on the same port and data (AOF) directory."""

    def __init__(self, folder: Path, appendfsync: str = "always", port: int | None = None) -> None:
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.appendfsync = appendfsync
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 15.0) -> None:
        binary = redis_server_binary()
        assert binary is not None
        self.process = subprocess.Popen(
            [
                binary,
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--dir",
                str(self.folder),
                "--appendonly",
                "yes",
                "--appendfsync",
                self.appendfsync,
                "--save",
                "",
                "--daemonize",
                "no",
                "--logfile",
                str(self.folder / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"redis-server exited: {(self.folder / 'redis.log').read_text()[-2000:]}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {self.port} not ready in {timeout}s")
            time.sleep(0.02)

    def ready(self) -> bool:
        """True once the server answers PING with PONG (not LOADING)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final fsync."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


class WorkerProcess:
    """`worker_runner.py` in a subprocess, logging to a file."""

    def __init__(self, url: str, log_path: Path, *args: str) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
        }
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.process = subprocess.Popen(
            [sys.executable, str(RUNNER), url, *args],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
        )

    def terminate(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)

    def freeze(self, frozen: bool = True) -> None:
        """SIGSTOP (or SIGCONT): a frozen worker keeps its leases and changes nothing."""
        self.process.send_signal(signal.SIGSTOP if frozen else signal.SIGCONT)

    def wait(self, timeout: float = 30.0) -> int:
        try:
            return self.process.wait(timeout)
        finally:
            self.log.close()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


async def eventually(
    check: Callable[[], Awaitable[bool]],
    timeout: float,
    interval: float = 0.05,
    what: str = "condition",
) -> None:
    """Poll `check` until true; fail after `timeout` seconds of real time."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        await asyncio.sleep(interval)
