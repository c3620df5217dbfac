"""Cross-process wake-ups for SQLite, which has no LISTEN/NOTIFY of its own.

Each idle worker binds a Unix datagram socket in a folder named after the
database file; a producer, after its commit, sends one small datagram to every
socket there. A datagram is only a hint (workers still poll as a fallback), so
a lost or stale one costs nothing: sockets of killed workers are removed by the
first producer that finds nobody listening.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import tempfile
import time
import uuid


def wakeup_folder(db_path: str, channel: str = "") -> str:
    """The folder of one database's listeners: idle workers (no channel), or "done":
    those waiting for a job's end (job.result())."""
    # Socket paths are limited to ~107 bytes, so the folder is named by a hash.
    digest = hashlib.sha1(os.path.realpath(db_path).encode()).hexdigest()[:16]
    return os.path.join(
        tempfile.gettempdir(),
        f"conveyor-{os.getuid()}",
        f"{digest}-{channel}" if channel else digest,
    )


class WakeupSender:
    """Sends after each commit. The folder's listing is kept between sends and read
    again when the folder's mtime changes (a listener came or went): listing it at
    every enqueue was a noticeable share of it (docs/performance.md). A
    timestamp is coarse (a clock tick, a few ms), so a listing taken within
    RACY_SECONDS of the mtime it saw is not trusted: a socket bound in the same tick
    after it would not change the mtime again."""

    RACY_SECONDS = 0.05

    def __init__(self, db_path: str, channel: str = "") -> None:
        self.folder = wakeup_folder(db_path, channel)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setblocking(False)
        # The folder's mtime when listed (None: not to be trusted) and the sockets then.
        # One tuple, assigned at once: the sync facade's threads send concurrently.
        self._listing: tuple[int | None, list[str]] = (None, [])

    def notify(self) -> None:
        for path in self._listeners():
            try:
                self.sock.sendto(b"!", path)
            except BlockingIOError:
                pass  # its buffer is full of wake-ups already
            except (ConnectionRefusedError, FileNotFoundError):
                try:
                    os.unlink(path)  # a worker that died without cleaning up
                except FileNotFoundError:
                    pass
            except OSError:
                pass

    def _listeners(self) -> list[str]:
        # No folder until a worker of this database first waits: while there is none,
        # os.access asks without raising (a FileNotFoundError cost more than a listing).
        listed_mtime, paths = self._listing
        if listed_mtime is None and not paths and not os.access(self.folder, os.F_OK):
            return []
        try:
            mtime_ns = os.stat(self.folder).st_mtime_ns
        except FileNotFoundError:
            self._listing = (None, [])
            return []
        if mtime_ns != listed_mtime:
            listed_at = time.time_ns()
            try:
                names = os.listdir(self.folder)
            except FileNotFoundError:
                return []
            paths = [os.path.join(self.folder, name) for name in names if name.endswith(".sock")]
            racy = listed_at - mtime_ns < self.RACY_SECONDS * 1e9
            self._listing = (None if racy else mtime_ns, paths)
        return paths

    def close(self) -> None:
        self.sock.close()


class WakeupListener:
    """One idle worker's (or result waiter's) socket in its database's folder. The last
    listener to close removes the folder: a test suite makes a database per test, and
    the empty folders were left in /tmp for good."""

    BIND_TRIES = 5

    def __init__(self, db_path: str, channel: str = "") -> None:
        self.folder = wakeup_folder(db_path, channel)
        self.path = os.path.join(self.folder, f"{uuid.uuid4().hex}.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setblocking(False)
        for attempt in range(1, self.BIND_TRIES + 1):
            os.makedirs(self.folder, mode=0o700, exist_ok=True)
            try:
                self.sock.bind(self.path)
                break
            except FileNotFoundError:  # the last listener before us removed the folder
                if attempt == self.BIND_TRIES:
                    self.sock.close()
                    raise
        self.event = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.sock.fileno(), self._on_readable)

    def _on_readable(self) -> None:
        try:
            while True:
                self.sock.recv(64)
        except (BlockingIOError, InterruptedError):
            pass
        self.event.set()

    async def wait(self, timeout: float) -> None:
        try:
            await asyncio.wait_for(self.event.wait(), timeout)
        except TimeoutError:
            pass
        self.event.clear()

    def close(self) -> None:
        self._loop.remove_reader(self.sock.fileno())
        self.sock.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        try:
            os.rmdir(self.folder)  # only when empty: another listener's socket keeps it
        except OSError:
            pass
