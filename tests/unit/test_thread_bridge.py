"""Sync calls on the pool, their endings handed back to the loop in batches."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from conveyor.worker.thread_bridge import ThreadBridge


async def test_each_call_gets_its_own_value_or_exception() -> None:
    with ThreadPoolExecutor(max_workers=4) as pool:
        bridge = ThreadBridge(pool)

        def value(i: int) -> int:
            return i * i

        def fails(i: int) -> int:
            raise (KeyboardInterrupt if i % 2 else ValueError)(str(i))

        futures = [bridge.submit(lambda i=i: value(i))[0] for i in range(300)]
        failing = [bridge.submit(lambda i=i: fails(i))[0] for i in range(10)]
        assert await asyncio.gather(*futures) == [i * i for i in range(300)]
        errors = await asyncio.gather(*failing, return_exceptions=True)
        assert [(type(e).__name__, str(e)) for e in errors] == [
            ("KeyboardInterrupt" if i % 2 else "ValueError", str(i)) for i in range(10)]


async def test_a_stop_iteration_arrives_as_a_runtime_error() -> None:
    with ThreadPoolExecutor(max_workers=1) as pool:
        def stops() -> None:
            raise StopIteration("done")

        future, _ = ThreadBridge(pool).submit(stops)
        with pytest.raises(RuntimeError, match="StopIteration: done"):
            await future


async def test_a_call_given_up_before_a_thread_was_free_never_runs() -> None:
    release = threading.Event()
    ran: list[str] = []
    with ThreadPoolExecutor(max_workers=1) as pool:
        bridge = ThreadBridge(pool)
        busy, _ = bridge.submit(release.wait)
        waiting, _ = bridge.submit(lambda: ran.append("waiting"))
        waiting.cancel()  # only the asyncio side: the call must see it and not run
        later, _ = bridge.submit(lambda: ran.append("later"))
        release.set()
        assert await busy is True
        await later
    assert ran == ["later"]


def test_a_call_ending_after_its_loop_closed_is_dropped_quietly() -> None:
    release = threading.Event()
    queued: list[Future[None]] = []
    with ThreadPoolExecutor(max_workers=1) as pool:
        async def start() -> None:
            queued.append(ThreadBridge(pool).submit(release.wait)[1])

        asyncio.run(start())  # the loop closes with the call still running
        release.set()
        # Handing the ending to a closed loop raises nothing in the pool's thread.
        assert queued[0].result(timeout=5) is None
