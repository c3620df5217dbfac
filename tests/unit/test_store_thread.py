"""The SQLite backend's thread (conveyor.backends.sqlite.store_thread): calls in order,
on one thread, their errors to the caller, and a caller that stops waiting harms nobody."""

from __future__ import annotations

import asyncio
import threading

import pytest

from conveyor.backends.sqlite.store_thread import StoreThread


async def test_calls_run_in_order_on_one_thread_other_than_the_loops() -> None:
    worker = StoreThread("test-store")
    seen: list[tuple[int, int]] = []
    try:
        results = await asyncio.gather(
            *(
                # Ignored for mypy: append() in a lambda for its effect
                worker.run(lambda i=i: seen.append((i, threading.get_ident())) or i)  # type: ignore[func-returns-value, misc]
                for i in range(50)
            )
        )
    finally:
        worker.stop()
    assert results == list(range(50))
    assert [i for i, _ in seen] == list(range(50))
    threads = {ident for _, ident in seen}
    assert len(threads) == 1 and threading.get_ident() not in threads


async def test_an_error_reaches_the_caller_and_the_thread_goes_on() -> None:
    worker = StoreThread("test-store")

    def fail() -> None:
        raise ValueError("from the store")

    try:
        with pytest.raises(ValueError, match="from the store"):
            await worker.run(fail)
        assert await worker.run(lambda: 7) == 7
    finally:
        worker.stop()


async def test_a_cancelled_caller_leaves_the_loop_and_the_thread_working() -> None:
    loop = asyncio.get_running_loop()
    errors: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    worker = StoreThread("test-store")
    release = threading.Event()
    try:
        waiting = worker.run(lambda: release.wait(5) and "late")
        waiting.cancel()
        release.set()
        # Answers come back in order: the late one's hand-back has run (and raised
        # nothing) by the time the next call's answer arrives.
        assert await worker.run(lambda: "next") == "next"
    finally:
        worker.stop()
    assert waiting.cancelled()
    assert errors == []
