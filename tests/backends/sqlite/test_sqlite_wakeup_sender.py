"""SQLite's wake-up datagrams (backends/sqlite/wakeup.py): the sender keeps the folder's
listing between sends, and still reaches a listener bound just after a send. (Where
the folder's mtime is coarse, that listener may share the listing's tick, which
RACY_SECONDS covers; this machine's ext4 keeps nanoseconds, so that case does not
arise here.)"""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

from conveyor.backends.sqlite.wakeup import WakeupListener, WakeupSender, wakeup_folder


async def woken(listener: WakeupListener) -> bool:
    try:
        await asyncio.wait_for(listener.event.wait(), 2.0)
    except TimeoutError:
        return False
    listener.event.clear()
    return True


async def test_a_listener_bound_right_after_a_send_gets_the_next_one(tmp_path: Path) -> None:
    db = str(tmp_path / "w.db")
    sender = WakeupSender(db)
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
        sender.close()


async def test_a_dead_listeners_socket_is_removed_and_the_others_still_woken(
        tmp_path: Path) -> None:
    db = str(tmp_path / "w.db")
    alive = WakeupListener(db)
    dead_path = os.path.join(wakeup_folder(db), "dead.sock")
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(dead_path)
    dead.close()  # a worker killed before it removed its socket
    sender = WakeupSender(db)
    try:
        sender.notify()
        assert not os.path.exists(dead_path)
        assert await woken(alive)
        sender.notify()
        assert await woken(alive)
    finally:
        alive.close()
        sender.close()
