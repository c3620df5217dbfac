"""Adaptive concurrency (docs/downstreams.md) with real worker processes against a
real HTTP downstream on loopback that serves `CAPACITY` calls at once and answers 429
to the rest: two `conveyor worker` processes, each with more slots than the
downstream takes, find its capacity through the backend. After the warm-up the
fleet's throughput is within 20 % of the capacity and fewer than 5 % of its calls
are refused. The window is the default 1 s; the warm-up is cut from the issue's 30 s
to 12 s by starting at 6 (the climb to 10 takes four windows, the processes a few
seconds to start)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from acceptance_support import Runs, WorkerProcess
from downstream_bounds import assert_near_capacity

from conveyor import Conveyor

pytestmark = pytest.mark.slow

CAPACITY = 10
SERVICE = 0.3  # seconds a call takes
WARM_UP, MEASURED = 12.0, 10.0


class Downstream(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.in_flight = 0
        self.served: list[float] = []
        self.refused: list[float] = []


class _Handler(BaseHTTPRequestHandler):
    server: Downstream

    def do_GET(self) -> None:
        server = self.server
        with server.lock:
            refused = server.in_flight >= CAPACITY
            if refused:
                server.refused.append(time.monotonic())
            else:
                server.in_flight += 1
        if refused:
            self.send_response(429)
        else:
            time.sleep(SERVICE)
            with server.lock:
                server.in_flight -= 1
                server.served.append(time.monotonic())
            self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def downstream() -> Iterator[Downstream]:
    server = Downstream()
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_worker_processes_settle_near_the_downstreams_capacity(
    url: str,
    runs: Runs,
    workers: list[WorkerProcess],
    downstream: Downstream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from jobs_app import adaptive_call

    app = Conveyor(url)
    try:
        app.enqueue_many([adaptive_call.message() for _ in range(2000)])
    finally:
        app.close()
    monkeypatch.setenv("DOWNSTREAM_URL", f"http://127.0.0.1:{downstream.server_port}/")
    start = time.monotonic()
    for _ in range(2):
        workers.append(WorkerProcess(url, runs.path, "-c", "16"))
    time.sleep(WARM_UP + MEASURED)  # the test's span, not a synchronisation
    assert_near_capacity(
        downstream.served, downstream.refused, start + WARM_UP, MEASURED, CAPACITY / SERVICE
    )
