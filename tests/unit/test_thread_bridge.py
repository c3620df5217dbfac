"""Sync calls on the bridge's own threads, their endings handed back to the loop in
batches."""

from __future__ import annotations

import asyncio
import threading

import pytest

from conveyor.worker.thread_bridge import ThreadBridge


async def test_each_call_gets_its_own_value_or_exception() -> None:
    bridge = ThreadBridge(max_threads=4)

    def value(i: int) -> int:
        return i * i

    def fails(i: int) -> int:
        raise (KeyboardInterrupt if i % 2 else ValueError)(str(i))

    # Ignored for mypy: a lambda binding its loop value by default
    futures = [bridge.submit(lambda i=i: value(i)) for i in range(300)]  # type: ignore[misc]
    # Ignored for mypy: a lambda binding its loop value by default
    failing = [bridge.submit(lambda i=i: fails(i)) for i in range(10)]  # type: ignore[misc]
    assert await asyncio.gather(*futures) == [i * i for i in range(300)]
    errors = await asyncio.gather(*failing, return_exceptions=True)
    assert [(type(e).__name__, str(e)) for e in errors] == [
        ("KeyboardInterrupt" if i % 2 else "ValueError", str(i)) for i in range(10)
    ]
    bridge.shutdown(wait=True)


async def test_a_stop_iteration_arrives_as_a_runtime_error() -> None:
    bridge = ThreadBridge(max_threads=1)

    def stops() -> None:
        raise StopIteration("done")

    with pytest.raises(RuntimeError, match="StopIteration: done"):
        await bridge.submit(stops)
    bridge.shutdown(wait=True)


async def test_a_call_given_up_before_a_thread_was_free_never_runs() -> None:
    release = threading.Event()
    ran: list[str] = []
    bridge = ThreadBridge(max_threads=1)
    busy = bridge.submit(release.wait)
    waiting = bridge.submit(lambda: ran.append("waiting"))
    waiting.cancel()  # only the asyncio side: the call must see it and not run
    later = bridge.submit(lambda: ran.append("later"))
    release.set()
    assert await busy is True
    await later
    bridge.shutdown(wait=True)
    assert ran == ["later"]


async def test_threads_are_started_as_calls_need_them_up_to_the_most() -> None:
    release = threading.Event()
    bridge = ThreadBridge(max_threads=3)
    assert await bridge.submit(threading.current_thread) is not None
    # One call at a time needs one thread: it is reused.
    names = {(await bridge.submit(threading.current_thread)).name for _ in range(20)}
    assert names == {"conveyor-job_0"}
    try:
        blocked = [bridge.submit(release.wait) for _ in range(5)]
        assert {t.name for t in threading.enumerate() if t.name.startswith("conveyor-job")} == {
            "conveyor-job_0",
            "conveyor-job_1",
            "conveyor-job_2",
        }
    finally:
        release.set()
    assert await asyncio.gather(*blocked) == [True] * 5
    bridge.shutdown(wait=True)
    assert not [t for t in threading.enumerate() if t.name.startswith("conveyor-job")]


async def test_shutdown_drops_the_calls_no_thread_took_and_ends_every_thread() -> None:
    release = threading.Event()
    ran: list[int] = []
    bridge = ThreadBridge(max_threads=1)
    busy = bridge.submit(release.wait)
    # Ignored for mypy: a lambda binding its loop value by default
    queued = [bridge.submit(lambda i=i: ran.append(i)) for i in range(3)]  # type: ignore[misc]
    bridge.shutdown()
    assert all(f.cancelled() for f in queued)
    with pytest.raises(RuntimeError, match="shut down"):
        bridge.submit(lambda: None)
    release.set()
    assert await busy is True  # the running call ends, and its ending still arrives
    bridge.shutdown(wait=True)
    assert ran == []
    assert not [t for t in threading.enumerate() if t.name.startswith("conveyor-job")]


def test_a_call_ending_after_its_loop_closed_is_dropped_quietly() -> None:
    release = threading.Event()
    raised: list[BaseException | None] = []
    bridges: list[ThreadBridge] = []
    previous_hook = threading.excepthook
    threading.excepthook = lambda args: raised.append(args.exc_value)
    try:

        async def start() -> None:
            bridges.append(ThreadBridge(max_threads=1))
            bridges[0].submit(release.wait)

        asyncio.run(start())  # the loop closes with the call still running
        release.set()
        bridges[0].shutdown(wait=True)
    finally:
        threading.excepthook = previous_hook
    # Handing the ending to a closed loop raised nothing in the bridge's thread.
    assert raised == []
