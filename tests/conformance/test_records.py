"""Small shared records (live workers, schedule state, rate windows, breakers):
the atomic verbs of `SharedRecords`, on every backend."""

from __future__ import annotations

import asyncio

import pytest

from conveyor import Conveyor
from conveyor.backends.contract import Backend
from conveyor.backends.params import RecordIncrement, RecordKey, RecordSwap, RecordWrite
from conveyor.model.clock import ManualClock


async def test_put_get_replace_delete(backend: Backend) -> None:
    assert await backend.list_records("schedules") == {}
    await backend.put_record(RecordWrite(namespace="schedules", key="nightly", value='{"last": 1}'))
    await backend.put_record(RecordWrite(namespace="schedules", key="hourly", value='{"last": 2}'))
    await backend.put_record(RecordWrite(namespace="workers", key="w1", value='{"pid": 3}'))
    await backend.put_record(RecordWrite(namespace="schedules", key="nightly", value='{"last": 4}'))
    assert await backend.list_records("schedules") == {
        "hourly": '{"last": 2}',
        "nightly": '{"last": 4}',
    }
    await backend.delete_record(RecordKey(namespace="schedules", key="hourly"))
    await backend.delete_record(RecordKey(namespace="schedules", key="never-there"))
    assert await backend.list_records("schedules") == {"nightly": '{"last": 4}'}
    assert await backend.list_records("workers") == {"w1": '{"pid": 3}'}


async def test_ttl_expires_unless_written_again(backend: Backend, clock: ManualClock) -> None:
    await backend.put_record(RecordWrite(namespace="workers", key="a", value='"a"', ttl=10))
    await backend.put_record(RecordWrite(namespace="workers", key="b", value='"b"', ttl=10))
    await backend.put_record(RecordWrite(namespace="workers", key="forever", value='"f"'))
    clock.advance(8)
    await backend.put_record(RecordWrite(namespace="workers", key="a", value='"a2"', ttl=10))
    clock.advance(3)
    assert await backend.list_records("workers") == {"a": '"a2"', "forever": '"f"'}


async def test_get_record_sees_only_live_records(backend: Backend, clock: ManualClock) -> None:
    assert await backend.get_record(RecordKey(namespace="limits", key="k")) is None
    await backend.put_record(RecordWrite(namespace="limits", key="k", value="v1", ttl=5))
    assert await backend.get_record(RecordKey(namespace="limits", key="k")) == "v1"
    clock.advance(5)  # expires at exactly now + ttl
    assert await backend.get_record(RecordKey(namespace="limits", key="k")) is None
    assert await backend.list_records("limits") == {}
    assert (
        await backend.delete_record(RecordKey(namespace="limits", key="k")) is False
    )  # nothing live was there
    await backend.put_record(RecordWrite(namespace="limits", key="k", value="v2"))
    assert await backend.delete_record(RecordKey(namespace="limits", key="k")) is True


async def test_put_if_absent_takes_a_free_or_expired_key_only(
    backend: Backend, clock: ManualClock
) -> None:
    assert (
        await backend.put_record_if_absent(
            RecordWrite(namespace="locks", key="a", value="w1", ttl=10)
        )
        is True
    )
    assert (
        await backend.put_record_if_absent(
            RecordWrite(namespace="locks", key="a", value="w2", ttl=10)
        )
        is False
    )
    assert await backend.get_record(RecordKey(namespace="locks", key="a")) == "w1"
    clock.advance(10)
    assert (
        await backend.put_record_if_absent(
            RecordWrite(namespace="locks", key="a", value="w2", ttl=10)
        )
        is True
    )
    assert await backend.get_record(RecordKey(namespace="locks", key="a")) == "w2"


async def test_compare_and_set(backend: Backend, clock: ManualClock) -> None:
    assert (
        await backend.compare_and_set_record(
            RecordSwap(namespace="b", key="stripe", expected="closed", value="open")
        )
        is False
    )
    assert (
        await backend.compare_and_set_record(
            RecordSwap(namespace="b", key="stripe", expected=None, value="closed")
        )
        is True
    )
    assert (
        await backend.compare_and_set_record(
            RecordSwap(namespace="b", key="stripe", expected=None, value="x")
        )
        is False
    )
    assert (
        await backend.compare_and_set_record(
            RecordSwap(namespace="b", key="stripe", expected="open", value="x")
        )
        is False
    )
    assert (
        await backend.compare_and_set_record(
            RecordSwap(namespace="b", key="stripe", expected="closed", value="open", ttl=30)
        )
        is True
    )
    assert await backend.get_record(RecordKey(namespace="b", key="stripe")) == "open"
    clock.advance(30)  # the TTL of the value set by compare-and-set
    assert await backend.get_record(RecordKey(namespace="b", key="stripe")) is None
    assert (
        await backend.compare_and_set_record(
            RecordSwap(namespace="b", key="stripe", expected="open", value="closed")
        )
        is False
    )
    assert (
        await backend.compare_and_set_record(
            RecordSwap(namespace="b", key="stripe", expected=None, value="closed")
        )
        is True
    )


async def test_incr_counts_in_a_fixed_window(backend: Backend, clock: ManualClock) -> None:
    assert await backend.incr_record(RecordIncrement(namespace="rate", key="stripe:1", ttl=60)) == 1
    clock.advance(30)
    assert (
        await backend.incr_record(
            RecordIncrement(namespace="rate", key="stripe:1", amount=4, ttl=60)
        )
        == 5
    )
    clock.advance(29)  # the window opened by the first incr is still live
    assert await backend.incr_record(RecordIncrement(namespace="rate", key="stripe:1", ttl=60)) == 6
    clock.advance(1)  # 60 s after the first incr: a new window
    assert await backend.incr_record(RecordIncrement(namespace="rate", key="stripe:1", ttl=60)) == 1
    assert (
        await backend.incr_record(RecordIncrement(namespace="rate", key="forever", amount=-3)) == -3
    )
    assert await backend.get_record(RecordKey(namespace="rate", key="forever")) == "-3"


async def test_incr_refuses_a_record_that_is_not_a_number(backend: Backend) -> None:
    await backend.put_record(RecordWrite(namespace="rate", key="k", value='{"not": "a number"}'))
    with pytest.raises(ValueError, match="not an integer"):
        await backend.incr_record(RecordIncrement(namespace="rate", key="k"))
    assert await backend.get_record(RecordKey(namespace="rate", key="k")) == '{"not": "a number"}'


@pytest.mark.parametrize("ttl", [0, -1, float("nan"), float("inf")])
async def test_a_ttl_must_be_a_positive_number(backend: Backend, ttl: float) -> None:
    with pytest.raises(ValueError, match="ttl"):
        await backend.put_record(RecordWrite(namespace="r", key="k", value="v", ttl=ttl))
    assert await backend.get_record(RecordKey(namespace="r", key="k")) is None


async def test_atomic_verbs_under_concurrent_writers(backend_url: str, clock: ManualClock) -> None:
    """Four clients (own connections, own event-loop tasks) race on the same keys."""
    apps = [Conveyor(backend_url, clock=clock) for _ in range(4)]
    try:
        backends = [await a.backend() for a in apps]

        async def counting(b: Backend) -> list[int]:
            return [
                await b.incr_record(RecordIncrement(namespace="race", key="counter", ttl=600))
                for _ in range(50)
            ]

        seen = [n for got in await asyncio.gather(*(counting(b) for b in backends)) for n in got]
        assert sorted(seen) == list(range(1, 201))  # every increment applied once, none lost

        takes = await asyncio.gather(
            *(
                b.put_record_if_absent(
                    RecordWrite(namespace="race", key="lock", value=f"w{i}", ttl=600)
                )
                for i, b in enumerate(backends)
                for _ in range(5)
            )
        )
        assert takes.count(True) == 1
        winner = await backends[0].get_record(RecordKey(namespace="race", key="lock"))
        assert winner in {f"w{i}" for i in range(4)}

        async def cas_loop(b: Backend) -> int:
            conflicts = 0
            for _ in range(25):
                while True:
                    current = await b.get_record(RecordKey(namespace="race", key="cas"))
                    new = str(int(current or "0") + 1)
                    if await b.compare_and_set_record(
                        RecordSwap(namespace="race", key="cas", expected=current, value=new)
                    ):
                        break
                    conflicts += 1
            return conflicts

        await asyncio.gather(*(cas_loop(b) for b in backends))
        assert (
            await backends[0].get_record(RecordKey(namespace="race", key="cas")) == "100"
        )  # no update lost
    finally:
        for a in apps:
            await a.aclose()
