"""SQLite's wake-up datagrams (backends/sqlite/wakeup.py): the sender keeps the folder's
listing between sends, and still reaches a listener bound just after a send; the last
listener to close removes the database's folder. (Where
the folder's mtime is coarse, that listener may share the listing's tick, which
RACY_SECONDS covers; this machine's ext4 keeps nanoseconds, so that case does not
arise here.)"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor.backends.sqlite.wakeup import WakeupListener, WakeupSender, wakeup_folder


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "w.db")


@pytest.fixture
def sender(db: str) -> Iterator[WakeupSender]:
    sender = WakeupSender(db)
    yield sender
    sender.close()


async def woken(listener: WakeupListener) -> bool:
    try:
        await asyncio.wait_for(listener.event.wait(), 2.0)
    except TimeoutError:
        return False
    listener.event.clear()
    return True


async def test_a_listener_bound_right_after_a_send_gets_the_next_one(
    db: str, sender: WakeupSender
) -> None:
    sender.notify()  # no folder yet: nobody to wake, nothing raised
    first = WakeupListener(db)
    try:
        sender.notify()
        second = WakeupListener(db)  # within the same mtime tick as the listing above
        try:
            sender.notify()
            assert await woken(first) and await woken(second)
        finally:
            second.close()
        sender.notify()  # the closed one's socket is gone from the folder
        assert await woken(first)
    finally:
        first.close()


async def test_a_dead_listeners_socket_is_removed_and_the_others_still_woken(
    db: str, sender: WakeupSender
) -> None:
    alive = WakeupListener(db)
    dead_path = os.path.join(wakeup_folder(db), "dead.sock")
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(dead_path)
    dead.close()  # a worker killed before it removed its socket
    try:
        sender.notify()
        assert not os.path.exists(dead_path)
        assert await woken(alive)
        sender.notify()
        assert await woken(alive)
    finally:
        alive.close()


async def test_the_last_listener_to_close_removes_the_folder_and_a_new_one_is_reached(
    db: str, sender: WakeupSender
) -> None:
    folder = wakeup_folder(db)
    first, second = WakeupListener(db), WakeupListener(db)
    first.close()
    assert os.listdir(folder) == [os.path.basename(second.path)]  # kept for second
    second.close()
    assert not os.path.exists(folder)  # a suite's database per test left one each
    sender.notify()  # no folder: nobody to wake, nothing raised
    third = WakeupListener(db)  # the folder made again
    try:
        sender.notify()
        assert await woken(third)
    finally:
        third.close()
    assert not os.path.exists(folder)


async def test_a_folder_removed_between_makedirs_and_bind_is_made_again(
    db: str, sender: WakeupSender, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = wakeup_folder(db)
    real_makedirs = os.makedirs
    calls = []

    def makedirs_then_lose_it(path: str, *args: Any, **kwargs: Any) -> None:
        real_makedirs(path, *args, **kwargs)
        calls.append(path)
        if len(calls) == 1:  # the last other listener closes right after: rmdir
            os.rmdir(path)

    monkeypatch.setattr(os, "makedirs", makedirs_then_lose_it)
    listener = WakeupListener(db)
    monkeypatch.undo()
    try:
        assert calls == [folder, folder]  # the first bind failed, the second succeeded
        sender.notify()
        assert await woken(listener)
    finally:
        listener.close()
