"""Blobs as files in one directory: the default store of the SQLite backend
(`<database file>.blobs/`, beside the database).

Each file is one JSON header line (the job id and when the blob was written, by
the application clock) followed by the bytes. A file is written whole under a
temporary name and renamed into place, so a reader sees the whole blob or none,
even if the writer dies halfway; a temporary file left by such a writer is swept
with the orphans.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from conveyor.backends.blobs import StoredBlob, is_of, job_digest
from conveyor.model.clock import Clock

_TEMP_PREFIX = ".tmp-"


class DirectoryBlobStore:
    def __init__(self, root: Path, clock: Clock) -> None:
        self.root = root
        self.clock = clock

    def __repr__(self) -> str:
        return f"<DirectoryBlobStore {self.root}>"

    async def put_blob(self, key: str, job_id: str, data: bytes) -> None:
        header = json.dumps({"job": job_id, "at": self.clock()}).encode() + b"\n"
        await asyncio.to_thread(self._write, key, header, data)

    def _write(self, key: str, header: bytes, data: bytes) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(prefix=_TEMP_PREFIX, dir=self.root)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(header)
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temp, self.root / key)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise

    async def get_blob(self, key: str) -> bytes | None:
        return await asyncio.to_thread(self._read, key)

    def _read(self, key: str) -> bytes | None:
        try:
            with open(self.root / key, "rb") as blob:
                blob.readline()  # the header
                return blob.read()
        except FileNotFoundError:
            return None

    async def delete_job_blobs(self, job_ids: Sequence[str], kind: str | None = None) -> int:
        return await asyncio.to_thread(self._delete, {job_digest(i) for i in job_ids}, kind)

    def _delete(self, digests: set[str], kind: str | None) -> int:
        deleted = 0
        for path in self._files():
            if path.name.partition(".")[0] in digests and is_of(path.name, kind):
                path.unlink(missing_ok=True)
                deleted += 1
        return deleted

    def _files(self) -> list[Path]:
        try:
            return [p for p in self.root.iterdir() if p.is_file()]
        except FileNotFoundError:
            return []

    async def list_blobs(self, created_before: float, limit: int = 1000) -> list[StoredBlob]:
        return await asyncio.to_thread(self._list, created_before, limit)

    def _list(self, created_before: float, limit: int) -> list[StoredBlob]:
        found = []
        for path in self._files():
            if path.name.startswith(_TEMP_PREFIX):
                self._sweep_temp(path, created_before)
                continue
            try:
                with open(path, "rb") as blob:
                    header = json.loads(blob.readline())
                stored = StoredBlob(path.name, str(header["job"]), float(header["at"]))
            except FileNotFoundError:
                continue  # deleted meanwhile
            except (ValueError, KeyError, TypeError):
                continue  # not one of ours: left alone
            if stored.created_at < created_before:
                found.append(stored)
        found.sort(key=lambda b: b.created_at)
        return found[:limit]

    def _sweep_temp(self, path: Path, created_before: float) -> None:
        """A temporary file of a writer that died before its rename. Judged by the
        file's own time: its header may be incomplete."""
        try:
            if path.stat().st_mtime < created_before:
                path.unlink(missing_ok=True)
        except FileNotFoundError:
            pass

    async def close(self) -> None:
        pass
