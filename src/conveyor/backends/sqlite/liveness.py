"""A worker's liveness on SQLite: a lock file held with flock.

Every worker on the machine locks a file of its own, `<db>-workers/<id>.lock`,
with `flock(LOCK_EX)` for its whole life. The kernel drops the lock when the
process dies, however it dies; another worker that can take the lock for a
moment (LOCK_NB) knows the holder is gone. A file is only ever at its path while
locked by its worker (made under a temporary name, locked, then renamed into
place), and only removed when nobody holds it, so a missing file proves nothing
(not judged: lease fallback) and a free one proves the holder dead. Free files
no announced worker names any more are removed by the next look.

Token: `flock:<file name>`. A file lock lives as long as the process: there is no
server to restart and no connection to lose.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
import uuid
from collections.abc import Mapping
from urllib.parse import quote

from conveyor.backends.liveness import SignalHolder
from conveyor.backends.sqlite.state import SqliteState

SIGNAL = "lock file"
_PREFIX = "flock"
_STALE_TEMP = 60.0  # seconds after which an unrenamed temporary file is debris


def liveness_folder(db_path: str) -> str:
    return os.path.realpath(db_path) + "-workers"


def lock_file_name(worker_id: str) -> str:
    return quote(worker_id, safe="") + ".lock"


class LockFileHolder(SignalHolder):
    def __init__(self, db_path: str, worker_id: str) -> None:
        super().__init__(SIGNAL, worker_id)
        self.folder = liveness_folder(db_path)
        self.path = os.path.join(self.folder, lock_file_name(worker_id))
        self._fd: int | None = None

    async def _take(self) -> str:
        os.makedirs(self.folder, exist_ok=True)
        temp = f"{self.path}.{uuid.uuid4().hex[:8]}.tmp"
        fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.write(fd, f"{self.worker_id}\n".encode())
            os.rename(temp, self.path)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        self._fd = fd
        return f"{_PREFIX}:{os.path.basename(self.path)}"

    async def _watch(self) -> None:
        await asyncio.Event().wait()  # a file lock cannot be lost while the process lives

    async def _close(self) -> None:
        # The file stays: free, it reads as dead (as after a kill) until the next look
        # of any worker removes it, once no record names it.
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _is_free(path: str, remove: bool) -> bool | None:
    """True if nobody holds the file's lock (removing it, if asked, while we hold
    it), False if someone does, None if there is no such file."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        if remove:
            with contextlib.suppress(OSError):
                os.unlink(path)
        return True
    finally:
        os.close(fd)  # drops our lock too


def dead_workers(db_path: str, candidates: Mapping[str, str]) -> set[str]:
    folder = liveness_folder(db_path)
    names = {
        worker_id: token.partition(":")[2]
        for worker_id, token in candidates.items()
        if token.partition(":")[0] == _PREFIX
    }
    dead = {
        worker_id
        for worker_id, name in names.items()
        if name == lock_file_name(worker_id) and _is_free(os.path.join(folder, name), remove=False)
    }
    _remove_debris(folder, set(names.values()))
    return dead


def _remove_debris(folder: str, announced: set[str]) -> None:
    """Free lock files no announced worker names (their record is gone: settled by
    a rescue, or expired), and temporary files a killed starter left."""
    try:
        entries = os.listdir(folder)
    except FileNotFoundError:
        return
    for name in entries:
        path = os.path.join(folder, name)
        if name.endswith(".lock") and name not in announced:
            _is_free(path, remove=True)
        elif name.endswith(".tmp"):
            with contextlib.suppress(OSError):
                if time.time() - os.stat(path).st_mtime > _STALE_TEMP:
                    os.unlink(path)


class SqliteLiveness:
    """The WorkerLiveness capability on SQLite: a lock file per worker, beside the
    database file."""

    liveness_signal = SIGNAL

    def __init__(self, state: SqliteState) -> None:
        self.state = state

    async def hold_liveness(self, worker_id: str) -> LockFileHolder:
        holder = LockFileHolder(self.state.path, worker_id)
        await holder.start(timeout=10.0)
        return holder

    async def dead_workers(self, candidates: Mapping[str, str]) -> set[str]:
        # A few file system calls per worker on this machine: cheaper than a thread hop.
        return dead_workers(self.state.path, candidates)
