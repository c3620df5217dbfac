"""A script that enqueues and exits is silent, on every backend, with or without
`app.close()` (the README's own pattern has none); a backend that cannot be reached
is one line, whoever prints it."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from conveyor import Conveyor
from conveyor.backends.params import JobFilter

pytestmark = pytest.mark.slow

SCRIPT = """
import asyncio, sys
from conveyor import Conveyor, ConveyorError
app = Conveyor(sys.argv[1])

@app.task(name="hello")
def hello(n: int) -> None: ...

ending = sys.argv[2]
try:
    if ending == "async":
        asyncio.run(hello.enqueue_async(1))
    else:
        hello.enqueue(1)
        assert app.jobs.count() == 1
except ConveyorError as exc:
    print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
    sys.exit(1)
if ending == "close":
    app.close()
print("enqueued")
"""


def _run_script(url: str, ending: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, url, ending], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("ending", ["exit", "close", "async"])
def test_script_that_enqueues_exits_silently(url: str, ending: str) -> None:
    done = _run_script(url, ending)
    assert (done.returncode, done.stderr, done.stdout) == (0, "", "enqueued\n")
    app = Conveyor(url)
    try:
        assert app.jobs.count(JobFilter()) == 1
    finally:
        app.close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # nothing listens there once it is closed


@pytest.mark.parametrize("scheme", ["postgresql", "redis"])
def test_unreachable_backend_is_one_line(scheme: str) -> None:
    port = _closed_port()
    url = (
        f"postgresql://postgres@127.0.0.1:{port}/test?timeout=1"
        if scheme == "postgresql"
        else f"redis://127.0.0.1:{port}/0"
    )
    done = _run_script(url, "exit")
    assert done.returncode == 1 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("BackendUnavailable: ") and f"127.0.0.1:{port}" in line, line
    assert "refused" in line or "Connect call failed" in line, line  # what the driver said

    cli = subprocess.run(
        [sys.executable, "-m", "conveyor", "stats", "--url", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 1 and cli.stdout == ""
    [line] = cli.stderr.splitlines()
    assert line.startswith("conveyor: error: ") and f"127.0.0.1:{port}" in line, line
