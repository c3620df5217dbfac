"""conveyor.contrib.http against a real HTTP server this test starts, called with the
real clients: httpx, httpx2 (async) and requests. No client is mocked."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import httpx2
import pytest
import requests

from conveyor import Conveyor, Retry, RetryOptions
from conveyor.contrib.http import (
    PermanentHTTPError,
    TransientHTTPError,
    http_outcomes,
    raise_for_status,
    retry_after,
)
from conveyor.model.job import JobState
from conveyor.worker import Worker, WorkerConfig


class Server:
    """`/status/<code>?retry_after=<header>` answers <code>; `/hang` answers when the
    test ends (a client timeout); `/drop` closes the connection without an answer."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.hits: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                outer.hits.append(parts.path)
                if parts.path == "/hang":
                    outer.release.wait(30)
                    return
                if parts.path == "/drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                code = int(parts.path.rsplit("/", 1)[1])
                self.send_response(code)
                for value in parse_qs(parts.query).get("retry_after", []):
                    self.send_header("Retry-After", value)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return self.base + path

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    running = Server()
    yield running
    running.close()


@pytest.fixture
def refused_url() -> str:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/status/200"


def httpx_get(url: str) -> Any:
    return httpx.get(url, timeout=0.5)


def httpx2_get(url: str) -> Any:
    async def get() -> Any:
        async with httpx2.AsyncClient(timeout=0.5) as client:
            return await client.get(url)

    return asyncio.run(get())


def requests_get(url: str) -> Any:
    return requests.get(url, timeout=0.5)


CLIENTS: dict[str, Callable[[str], Any]] = {
    "httpx": httpx_get,
    "httpx2": httpx2_get,
    "requests": requests_get,
}


@pytest.fixture(params=sorted(CLIENTS))
def get(request: pytest.FixtureRequest) -> Callable[[str], Any]:
    return CLIENTS[str(request.param)]


def test_success_passes_the_response_through(server: Server, get: Callable[[str], Any]) -> None:
    response = get(server.url("/status/200"))
    assert raise_for_status(response) is response
    assert raise_for_status(get(server.url("/status/304"))).status_code == 304


def test_429_and_503_retry_after_what_retry_after_says(
    server: Server, get: Callable[[str], Any]
) -> None:
    with pytest.raises(Retry) as seconds:
        raise_for_status(get(server.url("/status/429?retry_after=30")))
    assert seconds.value.after == 30.0
    assert (
        str(seconds.value) == f"HTTP 429 Too Many Requests from {server.url('/status/429')}; "
        "Retry-After 30s"
    )
    in_two_minutes = formatdate(time.time() + 120, usegmt=True)
    with pytest.raises(Retry) as dated:
        raise_for_status(get(server.url(f"/status/503?retry_after={in_two_minutes}")))
    assert dated.value.after is not None and 118.0 < dated.value.after <= 120.0
    with pytest.raises(Retry) as unsaid:
        raise_for_status(get(server.url("/status/503")))
    assert unsaid.value.after is None  # the task's backoff decides
    with pytest.raises(Retry) as capped:
        raise_for_status(get(server.url("/status/429?retry_after=999999")), max_retry_after=60)
    assert capped.value.after == 60.0


def test_retry_after_reads_seconds_and_dates_and_ignores_nonsense(
    server: Server, get: Callable[[str], Any]
) -> None:
    def header(value: str) -> float | None:
        return retry_after(get(server.url(f"/status/503?retry_after={value}")), now=lambda: 1e9)

    assert header("0") == 0.0
    assert header(formatdate(1e9 + 90, usegmt=True)) == 90.0
    assert header(formatdate(1e9 - 90, usegmt=True)) == 0.0  # a date past: now
    assert header("soon") is None and header("-5") is None
    assert retry_after(get(server.url("/status/503"))) is None


@pytest.mark.parametrize("code", [400, 401, 403, 404, 409, 422])
def test_other_4xx_are_permanent(server: Server, get: Callable[[str], Any], code: int) -> None:
    with pytest.raises(PermanentHTTPError) as failed:
        raise_for_status(get(server.url(f"/status/{code}?token=s3cret")))
    assert failed.value.status == code and isinstance(failed.value, ValueError)
    assert failed.value.url == server.url(f"/status/{code}")  # the query string is left out
    assert "s3cret" not in str(failed.value)


@pytest.mark.parametrize("code", [500, 502, 504])
def test_other_5xx_are_transient(server: Server, get: Callable[[str], Any], code: int) -> None:
    with pytest.raises(TransientHTTPError) as failed:
        raise_for_status(get(server.url(f"/status/{code}")))
    assert failed.value.status == code and not isinstance(failed.value, ValueError)


def test_the_clients_own_status_errors_are_translated(
    server: Server, get: Callable[[str], Any]
) -> None:
    with pytest.raises(PermanentHTTPError) as failed:
        with http_outcomes():
            get(server.url("/status/404?api_key=s3cret")).raise_for_status()
    # Not chained to the client's error, whose message names the whole URL.
    assert "s3cret" not in "".join(traceback.format_exception(failed.value))
    with pytest.raises(Retry) as retried:
        with http_outcomes():
            get(server.url("/status/429?retry_after=7")).raise_for_status()
    assert retried.value.after == 7.0
    with pytest.raises(TransientHTTPError):
        with http_outcomes():
            get(server.url("/status/500")).raise_for_status()
    with http_outcomes():
        get(server.url("/status/200")).raise_for_status()  # a success raises nothing


def test_timeouts_and_connection_errors_are_transient(
    server: Server, refused_url: str, get: Callable[[str], Any]
) -> None:
    for url in (server.url("/hang?token=s3cret"), refused_url, server.url("/drop")):
        with pytest.raises(TransientHTTPError) as failed:
            with http_outcomes():
                get(url)
        assert failed.value.status == 0
        assert failed.value.url == url.split("?")[0], str(failed.value)
        assert "s3cret" not in "".join(traceback.format_exception(failed.value))


def test_other_errors_pass_unchanged() -> None:
    with pytest.raises(KeyError):
        with http_outcomes():
            raise KeyError("sku")


# --- through a worker --------------------------------------------------------------------
async def test_a_worker_dead_letters_4xx_and_retries_the_rest(
    server: Server, tmp_path: Path
) -> None:
    app = Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}")

    @app.task(
        name="call",
        max_attempts=2,
        retry_on=(TransientHTTPError,),
        retry=RetryOptions(backoff_base=0.01, backoff_cap=0.02),
    )  # a narrow policy: timeouts must be listed
    def call(path: str) -> int:
        with http_outcomes():
            response = requests.get(server.url(path), timeout=0.5)
            response.raise_for_status()
            return response.status_code

    paths = ["/status/404", "/status/500", "/hang", "/status/503?retry_after=0", "/status/200"]
    ids = [(await call.enqueue_async(p)).id for p in paths]
    worker = Worker(app, WorkerConfig(poll_interval=0.05, concurrency=5))
    running = asyncio.create_task(worker.run())

    async def all_finished() -> dict[str, Any] | None:
        jobs = {p: await app.admin.get(i) for p, i in zip(paths, ids, strict=True)}
        return jobs if all(j is not None and j.is_finished for j in jobs.values()) else None

    deadline = time.monotonic() + 30
    while (jobs := await all_finished()) is None:
        assert time.monotonic() < deadline, "jobs not finished in 30 s"
        await asyncio.sleep(0.05)
    worker.stop()
    assert await running == 0
    await app.aclose()
    assert {p: (j.state, j.attempt, [e.type for e in j.errors]) for p, j in jobs.items()} == {
        "/status/404": (JobState.DEAD, 1, ["PermanentHTTPError"]),
        "/status/500": (JobState.DEAD, 2, ["TransientHTTPError"] * 2),
        "/hang": (JobState.DEAD, 2, ["TransientHTTPError"] * 2),
        "/status/503?retry_after=0": (JobState.DEAD, 2, ["Retry"] * 2),
        "/status/200": (JobState.COMPLETED, 1, []),
    }
    assert (
        jobs["/hang"].errors[0].message.startswith(f"ReadTimeout calling {server.url('/hang')}: ")
    )
