"""Every blob store keeps the same contract (conveyor.backends.blobs.BlobStore): bytes back as
written, None when absent, a repeated put changes nothing, delete by job, list by
age (the application clock). The S3 store runs against moto's S3 server started as
its own process on a free port: real HTTP, the real boto3 client, no mocks."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from backends_under_test import BACKENDS, CLEANUPS
from conformance.helpers import RunningWorker, wait_finished

from conveyor import Conveyor
from conveyor.backends.blobs import BlobStore, blob_key, blob_store_from_url
from conveyor.model.clock import ManualClock
from conveyor.worker import WorkerConfig


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 server in its own process; a bucket per test."""
    pytest.importorskip("moto.server", reason="moto[server] is a dev dependency")
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail(f"moto's S3 server did not start on port {port}")
            time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.terminate()
    server.wait(10)


@pytest.fixture
def s3_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    # moto accepts any credentials; boto3 wants some to sign with.
    for name, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        monkeypatch.setenv(name, value)


@pytest.fixture
def s3_url(s3_endpoint: str, s3_credentials: None) -> str:
    import boto3

    bucket = f"conveyor-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    return f"s3://{bucket}/blobs?endpoint_url={s3_endpoint}"


STORES = ["directory", "memory", "postgres", "redis", "s3"]


@pytest.fixture(params=STORES)
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock
) -> AsyncIterator[BlobStore]:
    kind = str(request.param)
    if kind == "directory":
        yield blob_store_from_url(f"file://{tmp_path / 'blobs'}", clock)
        return
    if kind == "s3":
        yield blob_store_from_url(request.getfixturevalue("s3_url"), clock)
        return
    url = await BACKENDS[kind](tmp_path)
    app = Conveyor(url, clock=clock)
    try:
        yield await app.claim_check.store()
    finally:
        await app.aclose()
        app.close()
        await CLEANUPS[kind](url)


async def test_the_store_contract(store: BlobStore, clock: ManualClock) -> None:
    data = "é".encode() + bytes(range(32, 127)) * 1000
    a1 = blob_key("job/a", "args", "11" * 32)
    a2 = blob_key("job/a", "result", "22" * 32)
    b1 = blob_key("job-b", "args", "33" * 32)
    assert await store.get_blob(a1) is None
    await store.put_blob(a1, "job/a", data)
    await store.put_blob(a1, "job/a", data)  # again: nothing changes
    await store.put_blob(a2, "job/a", b"[1]")
    clock.advance(10)
    await store.put_blob(b1, "job-b", b"{}")
    assert await store.get_blob(a1) == data and await store.get_blob(a2) == b"[1]"
    listed = await store.list_blobs(clock() + 1)
    assert {(b.key, b.job_id) for b in listed} == {(a1, "job/a"), (a2, "job/a"), (b1, "job-b")}
    assert {b.key for b in await store.list_blobs(clock() - 5)} == {a1, a2}  # by time written
    assert await store.delete_job_blobs(["job/a", "never-there"]) == 2
    assert await store.get_blob(a1) is None and await store.get_blob(a2) is None
    assert await store.get_blob(b1) == b"{}"
    assert await store.delete_job_blobs(["job/a"]) == 0
    await store.close()


async def test_deleting_a_kind_of_blob_keeps_the_jobs_others(store: BlobStore) -> None:
    args, result = blob_key("job/k", "args", "44" * 32), blob_key("job/k", "result", "55" * 32)
    other = blob_key("job/o", "result", "66" * 32)
    for key, job_id in ((args, "job/k"), (result, "job/k"), (other, "job/o")):
        await store.put_blob(key, job_id, b"1")
    assert await store.delete_job_blobs(["job/k"], kind="result") == 1  # an expired result
    assert await store.get_blob(result) is None
    assert await store.get_blob(args) == b"1" and await store.get_blob(other) == b"1"
    assert {b.key for b in await store.list_blobs(float("inf"))} == {args, other}
    assert await store.delete_job_blobs(["job/k"], kind="result") == 0
    assert await store.delete_job_blobs(["job/k"]) == 1
    await store.close()


async def test_a_sqlite_app_with_an_s3_store_runs_big_jobs(tmp_path: Path, s3_url: str) -> None:
    app = Conveyor(
        f"sqlite:///{tmp_path / 'jobs.db'}", claim_check_threshold=100, blob_store=s3_url
    )
    seen: list[int] = []

    @app.task(name="s3.size")
    def size(data: str) -> str:
        seen.append(len(data))
        return data.upper()

    try:
        handle = await size.enqueue_async("a" * 5000)
        assert not (tmp_path / "jobs.db.blobs").exists()  # the configured store, not the default
        async with RunningWorker(app, WorkerConfig(concurrency=1, poll_interval=0.05)):
            await wait_finished(app, [handle.id])
        assert seen == [5000]
        assert await handle.result_async(timeout=5) == "A" * 5000
        assert len(await (await app.claim_check.store()).list_blobs(float("inf"))) == 2
    finally:
        await app.aclose()
        app.close()


def test_s3_store_urls_never_carry_credentials() -> None:
    from conveyor.model.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="unknown options"):
        blob_store_from_url("s3://bucket/p?secret_key=x", ManualClock())
    with pytest.raises(ConfigurationError, match="known: file, s3"):
        blob_store_from_url("ftp://host/dir", ManualClock())
    assert os.environ.get("CONVEYOR_TEST_NOTHING") is None
