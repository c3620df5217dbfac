"""Small shared records: live workers and schedule state live here."""

from __future__ import annotations

from conveyor.backends.base import Backend
from conveyor.timeutil import ManualClock


async def test_put_get_replace_delete(backend: Backend) -> None:
    assert await backend.get_meta("schedules") == {}
    await backend.put_meta("schedules", "nightly", '{"last": 1}')
    await backend.put_meta("schedules", "hourly", '{"last": 2}')
    await backend.put_meta("workers", "w1", '{"pid": 3}')
    await backend.put_meta("schedules", "nightly", '{"last": 4}')
    assert await backend.get_meta("schedules") == {"hourly": '{"last": 2}', "nightly": '{"last": 4}'}
    await backend.delete_meta("schedules", "hourly")
    await backend.delete_meta("schedules", "never-there")
    assert await backend.get_meta("schedules") == {"nightly": '{"last": 4}'}
    assert await backend.get_meta("workers") == {"w1": '{"pid": 3}'}


async def test_ttl_expires_unless_written_again(backend: Backend, clock: ManualClock) -> None:
    await backend.put_meta("workers", "a", '"a"', ttl=10)
    await backend.put_meta("workers", "b", '"b"', ttl=10)
    await backend.put_meta("workers", "forever", '"f"')
    clock.advance(8)
    await backend.put_meta("workers", "a", '"a2"', ttl=10)
    clock.advance(3)
    assert await backend.get_meta("workers") == {"a": '"a2"', "forever": '"f"'}
