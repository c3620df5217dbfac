"""The sync facade's portal (conveyor/model/portal.py): a coroutine run on the portal's loop
gives its caller's thread its value, its exception (BaseException included), a
cancellation, or a timeout after which it goes on running."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Iterator

import pytest

from conveyor.model.portal import Portal


class Stop(BaseException):
    """Not an Exception: what a handler's `except Exception` would let through."""


@pytest.fixture
def portal() -> Iterator[Portal]:
    portal = Portal("test-portal")
    yield portal
    portal.stop()


def test_the_value_and_the_errors_reach_the_calling_thread(portal: Portal) -> None:
    async def value() -> int:
        await asyncio.sleep(0)
        return 7

    async def fails() -> None:
        raise ValueError("bad input")

    async def stops() -> None:
        raise Stop()

    async def cancelled() -> None:
        raise asyncio.CancelledError()

    assert [portal.call(value()) for _ in range(3)] == [7, 7, 7]
    with pytest.raises(ValueError, match="bad input"):
        portal.call(fails())
    with pytest.raises(Stop):
        portal.call(stops())
    with pytest.raises(concurrent.futures.CancelledError):
        portal.call(cancelled())
    assert portal.call(value()) == 7  # the loop lives on after each of them


def test_a_call_that_times_out_goes_on_running(portal: Portal) -> None:
    ran: list[str] = []

    async def make_gate() -> asyncio.Event:
        return asyncio.Event()

    gate = portal.call(make_gate())

    async def waits() -> str:
        await gate.wait()
        ran.append("finished")
        return "late"

    with pytest.raises(TimeoutError):
        portal.call(waits(), timeout=0.05)
    assert ran == []

    async def open_gate_and_yield() -> None:
        gate.set()
        for _ in range(3):
            await asyncio.sleep(0)

    portal.call(open_gate_and_yield())
    assert ran == ["finished"]


def test_a_call_from_the_portals_own_loop_is_refused(portal: Portal) -> None:
    async def inner() -> None:
        return None

    async def outer() -> str:
        coro = inner()
        try:
            portal.call(coro)
        except RuntimeError as exc:
            return str(exc)
        return "no error"

    assert "deadlock" in portal.call(outer())
