"""A circuit breaker (docs/downstreams.md) with real worker processes and a fake
downstream that fails for a while: while the breaker is open no job of its task is
claimed, each half-open spell lets one probe through, the other tasks' jobs never
wait, and once the downstream is back the backlog drains."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from acceptance_support import Runs, WorkerProcess

from conveyor import Conveyor
from conveyor.downstreams.breaker_records import read_breaker
from conveyor.model.job import JobState
from conveyor.rules.breakers import CLOSED, HALF_OPEN, OPEN, BreakerState

pytestmark = pytest.mark.slow

OUTAGE = 10.0  # seconds the downstream fails, from its first request
JOBS = 30
# An opening stops the claims once its bucket hold is written, one round trip after
# the breaker's record: a claim in that gap may still take a job (docs/downstreams.md).
OPENING_TAKES = 0.25


@dataclass(frozen=True)
class Hit:
    at: float
    job: str
    attempt: int
    claimed_at: float
    status: int


class Downstream:
    """An HTTP server answering 503 for OUTAGE seconds after its first request, then 200;
    it keeps every request it got."""

    def __init__(self) -> None:
        self.hits: list[Hit] = []
        self.first: float | None = None
        self.lock = threading.Lock()
        downstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                now = time.time()
                with downstream.lock:
                    downstream.first = downstream.first or now
                    status = 503 if now < downstream.first + OUTAGE else 200
                    downstream.hits.append(
                        Hit(
                            now,
                            query["job"][0],
                            int(query["attempt"][0]),
                            float(query["claimed"][0]),
                            status,
                        )
                    )
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    def recovered_at(self) -> float | None:
        return None if self.first is None else self.first + OUTAGE

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def downstream(monkeypatch: pytest.MonkeyPatch) -> Iterator[Downstream]:
    server = Downstream()
    monkeypatch.setenv("DOWNSTREAM_URL", server.url)  # the worker processes inherit it
    yield server
    server.close()


def breaker_state(url: str) -> BreakerState:
    async def read() -> BreakerState:
        app = Conveyor(url)
        try:
            return await read_breaker(await app.backend(), "downstream")
        finally:
            await app.aclose()

    return asyncio.run(read())


def wait(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        time.sleep(0.05)


def test_a_breaker_holds_a_failing_downstreams_jobs_across_processes(
    url: str, runs: Runs, workers: list[WorkerProcess], downstream: Downstream
) -> None:
    from jobs_app import call_downstream, work

    app = Conveyor(url)
    try:
        calls = [h.id for h in app.enqueue_many([call_downstream.message() for _ in range(JOBS)])]
        for _ in range(2):
            workers.append(WorkerProcess(url, runs.path, "-q", "downstream,default", "-c", "4"))
        wait(lambda: breaker_state(url).state == OPEN, 30, "the breaker open")
        # Other tasks' jobs run while it is open: all of them before the downstream is back.
        others = [h.id for h in app.enqueue_many([work.message(0.0) for _ in range(20)])]
        wait(
            lambda: all(app.jobs.get(i).state is JobState.COMPLETED for i in others),  # type: ignore[union-attr]
            30,
            "the other task's jobs completed",
        )
        recovered_at = downstream.recovered_at()
        assert recovered_at is not None and time.time() < recovered_at
        wait(
            lambda: all(app.jobs.get(i).state is JobState.COMPLETED for i in calls),  # type: ignore[union-attr]
            60,
            "the backlog drained after the recovery",
        )
    finally:
        app.close()
    state = breaker_state(url)
    assert state.state == CLOSED and state.history[-1].reason == "probe succeeded"
    hits = list(downstream.hits)
    # Every job succeeded once, and only once the downstream was back.
    assert sorted(h.job for h in hits if h.status == 200) == sorted(calls)
    assert all(h.at >= recovered_at for h in hits if h.status == 200)
    # Each spell of the breaker: no claim while open, one (the probe) while half-open.
    spells = list(zip(state.history, state.history[1:], strict=False))
    assert spells, state.history
    for entered, left in spells:
        claimed = [h for h in hits if entered.at <= h.claimed_at < left.at]
        if entered.target == OPEN:
            late = [h for h in claimed if h.claimed_at >= entered.at + OPENING_TAKES]
            assert late == [], (entered, left, late)
        elif entered.target == HALF_OPEN:
            assert len(claimed) == 1, (entered, left, claimed)
    probes = sum(t.target == HALF_OPEN for t in state.history)
    assert probes >= OUTAGE // 2 - 1  # a probe each cooldown (2 s) or so, while it failed
    assert [t.target for t in state.history][:2] == [OPEN, HALF_OPEN]
