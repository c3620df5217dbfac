"""Small shared records (live workers, schedule state, rate windows, breakers):
the atomic verbs of `SharedRecords`, on every backend."""

from __future__ import annotations

import asyncio

import pytest

from conveyor import Conveyor
from conveyor.backends.contract import Backend
from conveyor.model.clock import ManualClock


async def test_put_get_replace_delete(backend: Backend) -> None:
    assert await backend.list_records("schedules") == {}
    await backend.put_record("schedules", "nightly", '{"last": 1}')
    await backend.put_record("schedules", "hourly", '{"last": 2}')
    await backend.put_record("workers", "w1", '{"pid": 3}')
    await backend.put_record("schedules", "nightly", '{"last": 4}')
    assert await backend.list_records("schedules") == {
        "hourly": '{"last": 2}',
        "nightly": '{"last": 4}',
    }
    await backend.delete_record("schedules", "hourly")
    await backend.delete_record("schedules", "never-there")
    assert await backend.list_records("schedules") == {"nightly": '{"last": 4}'}
    assert await backend.list_records("workers") == {"w1": '{"pid": 3}'}


async def test_ttl_expires_unless_written_again(backend: Backend, clock: ManualClock) -> None:
    await backend.put_record("workers", "a", '"a"', ttl=10)
    await backend.put_record("workers", "b", '"b"', ttl=10)
    await backend.put_record("workers", "forever", '"f"')
    clock.advance(8)
    await backend.put_record("workers", "a", '"a2"', ttl=10)
    clock.advance(3)
    assert await backend.list_records("workers") == {"a": '"a2"', "forever": '"f"'}


async def test_get_record_sees_only_live_records(backend: Backend, clock: ManualClock) -> None:
    assert await backend.get_record("limits", "k") is None
    await backend.put_record("limits", "k", "v1", ttl=5)
    assert await backend.get_record("limits", "k") == "v1"
    clock.advance(5)  # expires at exactly now + ttl
    assert await backend.get_record("limits", "k") is None
    assert await backend.list_records("limits") == {}
    assert await backend.delete_record("limits", "k") is False  # nothing live was there
    await backend.put_record("limits", "k", "v2")
    assert await backend.delete_record("limits", "k") is True


async def test_put_if_absent_takes_a_free_or_expired_key_only(
    backend: Backend, clock: ManualClock
) -> None:
    assert await backend.put_record_if_absent("locks", "a", "w1", ttl=10) is True
    assert await backend.put_record_if_absent("locks", "a", "w2", ttl=10) is False
    assert await backend.get_record("locks", "a") == "w1"
    clock.advance(10)
    assert await backend.put_record_if_absent("locks", "a", "w2", ttl=10) is True
    assert await backend.get_record("locks", "a") == "w2"


async def test_compare_and_set(backend: Backend, clock: ManualClock) -> None:
    assert await backend.compare_and_set_record("b", "stripe", "closed", "open") is False
    assert await backend.compare_and_set_record("b", "stripe", None, "closed") is True
    assert await backend.compare_and_set_record("b", "stripe", None, "x") is False
    assert await backend.compare_and_set_record("b", "stripe", "open", "x") is False
    assert await backend.compare_and_set_record("b", "stripe", "closed", "open", ttl=30) is True
    assert await backend.get_record("b", "stripe") == "open"
    clock.advance(30)  # the TTL of the value set by compare-and-set
    assert await backend.get_record("b", "stripe") is None
    assert await backend.compare_and_set_record("b", "stripe", "open", "closed") is False
    assert await backend.compare_and_set_record("b", "stripe", None, "closed") is True


async def test_incr_counts_in_a_fixed_window(backend: Backend, clock: ManualClock) -> None:
    assert await backend.incr_record("rate", "stripe:1", ttl=60) == 1
    clock.advance(30)
    assert await backend.incr_record("rate", "stripe:1", 4, ttl=60) == 5
    clock.advance(29)  # the window opened by the first incr is still live
    assert await backend.incr_record("rate", "stripe:1", ttl=60) == 6
    clock.advance(1)  # 60 s after the first incr: a new window
    assert await backend.incr_record("rate", "stripe:1", ttl=60) == 1
    assert await backend.incr_record("rate", "forever", -3) == -3
    assert await backend.get_record("rate", "forever") == "-3"


async def test_incr_refuses_a_record_that_is_not_a_number(backend: Backend) -> None:
    await backend.put_record("rate", "k", '{"not": "a number"}')
    with pytest.raises(ValueError, match="not an integer"):
        await backend.incr_record("rate", "k")
    assert await backend.get_record("rate", "k") == '{"not": "a number"}'


@pytest.mark.parametrize("ttl", [0, -1, float("nan"), float("inf")])
async def test_a_ttl_must_be_a_positive_number(backend: Backend, ttl: float) -> None:
    with pytest.raises(ValueError, match="ttl"):
        await backend.put_record("r", "k", "v", ttl=ttl)
    assert await backend.get_record("r", "k") is None


async def test_atomic_verbs_under_concurrent_writers(backend_url: str, clock: ManualClock) -> None:
    """Four clients (own connections, own event-loop tasks) race on the same keys."""
    apps = [Conveyor(backend_url, clock=clock) for _ in range(4)]
    try:
        backends = [await a.backend() for a in apps]

        async def counting(b: Backend) -> list[int]:
            return [await b.incr_record("race", "counter", ttl=600) for _ in range(50)]

        seen = [n for got in await asyncio.gather(*(counting(b) for b in backends)) for n in got]
        assert sorted(seen) == list(range(1, 201))  # every increment applied once, none lost

        takes = await asyncio.gather(
            *(
                b.put_record_if_absent("race", "lock", f"w{i}", ttl=600)
                for i, b in enumerate(backends)
                for _ in range(5)
            )
        )
        assert takes.count(True) == 1
        winner = await backends[0].get_record("race", "lock")
        assert winner in {f"w{i}" for i in range(4)}

        async def cas_loop(b: Backend) -> int:
            conflicts = 0
            for _ in range(25):
                while True:
                    current = await b.get_record("race", "cas")
                    new = str(int(current or "0") + 1)
                    if await b.compare_and_set_record("race", "cas", current, new):
                        break
                    conflicts += 1
            return conflicts

        await asyncio.gather(*(cas_loop(b) for b in backends))
        assert await backends[0].get_record("race", "cas") == "100"  # no update lost
    finally:
        for a in apps:
            await a.aclose()
