"""Big arguments and results kept apart from the job: the claim-check.

A job whose arguments' JSON text is over its task's `claim_check_threshold`
(default 256 KB) is stored with a reference instead: `{"$conveyor_blob": {"key":
..., "sha256": ..., "size": ...}}`, the text itself going to the app's blob store
(conveyor.backends.blobs) before the job is inserted. The worker reads the blob back and
checks its size and SHA-256 before the handler runs; a blob that is missing or
fails the check is a `CorruptPayload` naming the reference, and the attempt ends
dead at once (the next attempt would find the same bytes). A store that cannot be
reached is `BackendUnavailable`, which retries like any transient error. Results
over the threshold are kept the same way, and `JobHandle.result()` reads them back.

So a claim moves small rows whatever the arguments weigh, and a worker holding a
big job's lease does not hold up the jobs claimed with it (benchmarks/claim_check.py).

Blobs go with their jobs: `Admin.delete`/`purge` delete those of the jobs they
delete; the prune loop deletes blobs whose job is gone once they are older than
`orphan_grace` (retention-pruned jobs, a job deleted outside Conveyor, a producer
that died between writing the blob and inserting the job).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from conveyor.backends.blobs import BlobStore, ProvidesBlobStore, blob_key, blob_store_from_url
from conveyor.backends.contract import Backend
from conveyor.backends.params import JobFilter, JobPage, ResultSweep
from conveyor.model import validation as valid
from conveyor.model.clock import Clock
from conveyor.model.errors import ConfigurationError, CorruptPayload, ResultExpired
from conveyor.model.job import Job, NewJob

log = logging.getLogger("conveyor.claim_check")

REFERENCE_KEY = "$conveyor_blob"
_REFERENCE_START = '{"' + REFERENCE_KEY + '"'
DEFAULT_THRESHOLD = 256 * 1024
DEFAULT_MAX_PAYLOAD = 10 * 1024 * 1024
DEFAULT_ORPHAN_GRACE = 3600.0
_SWEEP_BATCH = 500
EXPIRE_BATCH = 1000  # results cleared per statement or script call


class _Limits(Protocol):
    @property
    def claim_check_threshold(self) -> int | None: ...
    @property
    def max_payload(self) -> int | None: ...


class _Task(Protocol):
    @property
    def defaults(self) -> _Limits: ...


class ClaimCheckApp(Protocol):
    """What the claim-check needs of its app (a `Conveyor`): its tasks (for their
    limits), its clock and its backend."""

    @property
    def tasks(self) -> Mapping[str, _Task]: ...
    @property
    def clock(self) -> Clock: ...
    async def backend(self) -> Backend: ...


def byte_count(option: str, value: object) -> int:
    if type(value) is not int or value < 0:
        raise ConfigurationError(f"{option}={value!r}: expected a whole number of bytes, >= 0")
    return value


def utf8_size(text: str) -> int:
    """Bytes of `text` as UTF-8 (what a store keeps), without encoding ASCII text."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True, slots=True)
class BlobReference:
    """What a job keeps of an argument or result stored apart."""

    key: str
    sha256: str
    size: int

    def to_text(self) -> str:
        return json.dumps(
            {REFERENCE_KEY: {"key": self.key, "sha256": self.sha256, "size": self.size}},
            separators=(",", ":"),
        )

    def describe(self) -> str:
        return f"blob {self.key} ({self.size:,} bytes, sha256 {self.sha256[:12]}…)"


def reference_in(text: str | None) -> BlobReference | None:
    """The reference stored in place of a payload or result, or None if `text` is
    the value itself."""
    if text is None or not text.startswith(_REFERENCE_START):
        return None
    try:
        ref = json.loads(text)[REFERENCE_KEY]
        found = BlobReference(str(ref["key"]), str(ref["sha256"]), int(ref["size"]))
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    return found


def _checked(
    ref: BlobReference, data: bytes | None, job_id: str, what: str, store: BlobStore
) -> str:
    if data is None:
        raise CorruptPayload(f"job {job_id}: its {what} {ref.describe()} is missing from {store!r}")
    digest = hashlib.sha256(data).hexdigest()
    if digest != ref.sha256 or len(data) != ref.size:
        raise CorruptPayload(
            f"job {job_id}: its {what} {ref.describe()} fails its check: the store holds "
            f"{len(data):,} bytes with sha256 {digest[:12]}…"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:  # matched the hash, so the producer wrote it: never ours
        raise CorruptPayload(f"job {job_id}: its {what} {ref.describe()} is not UTF-8") from None


class ClaimCheck:
    """The app's claim-check: its limits, its store, and the moves in and out."""

    def __init__(
        self,
        app: ClaimCheckApp,
        threshold: int,
        max_payload: int,
        store: str | BlobStore | None,
        orphan_grace: float,
    ) -> None:
        self.app = app
        self.threshold = byte_count("claim_check_threshold", threshold)
        self.max_payload = byte_count("max_payload", max_payload)
        self.orphan_grace = orphan_grace
        # The app's clock as it is at each call: `Conveyor.rebind` may change it.
        self._configured = (
            blob_store_from_url(store, lambda: app.clock()) if isinstance(store, str) else store
        )

    # --- limits -------------------------------------------------------------------
    def threshold_of(self, task_name: str) -> int:
        task = self.app.tasks.get(task_name)
        limit = None if task is None else task.defaults.claim_check_threshold
        return self.threshold if limit is None else limit

    def max_payload_of(self, task_name: str) -> int:
        task = self.app.tasks.get(task_name)
        limit = None if task is None else task.defaults.max_payload
        return self.max_payload if limit is None else limit

    def checked(self, jobs: Iterable[NewJob]) -> list[NewJob]:
        """`conveyor.model.validation.check_jobs`, each job held to its task's max_payload."""
        return valid.check_jobs(jobs, self.max_payload_of)

    def needs_offload(self, jobs: Sequence[NewJob]) -> bool:
        # Under the threshold in characters, so surely under it in bytes (at most 4 each).
        return any(
            len(job.payload) * 4 > self.threshold_of(job.task)
            and utf8_size(job.payload) > self.threshold_of(job.task)
            for job in jobs
        )

    # --- the store ------------------------------------------------------------------
    async def store(self, backend: Backend | None = None) -> BlobStore:
        if self._configured is not None:
            return self._configured
        backend = backend or await self.app.backend()
        if not isinstance(backend, ProvidesBlobStore):
            raise ConfigurationError(
                f"{type(backend).__name__} keeps no blobs: pass Conveyor(blob_store=...) "
                "(file:///dir or s3://bucket/prefix) to store big payloads"
            )
        return backend.default_blob_store()

    async def _put(self, job_id: str, kind: str, text: str) -> BlobReference:
        data = text.encode("utf-8")
        digest = hashlib.sha256(data).hexdigest()
        ref = BlobReference(blob_key(job_id, kind, digest), digest, len(data))
        await (await self.store()).put_blob(ref.key, job_id, data)
        return ref

    # --- arguments ----------------------------------------------------------------
    async def offload(self, jobs: Sequence[NewJob]) -> list[NewJob]:
        """`jobs` with every payload over its threshold written to the store and
        replaced by its reference. Blobs are written before the jobs are inserted:
        an insert that then fails leaves orphans, which the prune loop deletes."""
        if not self.needs_offload(jobs):
            return list(jobs)
        out = []
        for job in jobs:
            if utf8_size(job.payload) > self.threshold_of(job.task):
                ref = await self._put(job.id, "args", job.payload)
                job = replace(job, payload=ref.to_text())
            out.append(job)
        return out

    async def arguments_text(self, job: Job) -> str:
        """The job's arguments as the producer wrote them, read back and checked when
        they were stored apart. CorruptPayload if the blob is missing or changed."""
        ref = reference_in(job.payload)
        if ref is None:
            return job.payload
        store = await self.store()
        return _checked(ref, await store.get_blob(ref.key), job.id, "argument", store)

    # --- results ------------------------------------------------------------------
    async def stored_result(self, job: Job, text: str) -> str | None:
        """What to store as the result of `job`: `text`, or a reference to it in the
        store when it is over the threshold; None (logged) when it is over
        max_payload or the store cannot take it: the handler's effects happened, so
        the job completes, as it does with a result JSON cannot carry."""
        size = utf8_size(text)
        # A small result that looks like a reference is stored apart too, so that
        # every stored reference is one.
        if size <= self.threshold_of(job.task) and not text.startswith(_REFERENCE_START):
            return text
        if size > self.max_payload_of(job.task):
            log.warning(
                "job %s (%s) returned %d bytes of JSON, over max_payload %d; result dropped",
                job.id,
                job.task,
                size,
                self.max_payload_of(job.task),
            )
            return None
        try:
            return (await self._put(job.id, "result", text)).to_text()
        except Exception as exc:
            log.warning(
                "job %s (%s): its result could not be stored apart (%s); result dropped",
                job.id,
                job.task,
                exc,
            )
            return None

    async def result_text(self, job: Job) -> str | None:
        ref = reference_in(job.result)
        if ref is None:
            return job.result
        store = await self.store()
        return _checked(ref, await store.get_blob(ref.key), job.id, "result", store)

    async def result_value(self, job: Job) -> Any:
        """The job's result as a value (read back first when stored apart); ValueError
        if its JSON cannot be read (nested too deeply included); ResultExpired from its
        expiry on (result_ttl, by the app's clock), even before the prune cleared it."""
        if job.result_expired(self.app.clock()):
            raise ResultExpired(job.id, job.result_expires_at or 0.0)
        text = await self.result_text(job)
        try:
            return None if text is None else json.loads(text)
        except RecursionError:
            raise ValueError("nested too deeply") from None

    # --- deleting -----------------------------------------------------------------
    async def delete_with_jobs(self, job_ids: Sequence[str]) -> int:
        if not job_ids:
            return 0
        return await (await self.store()).delete_job_blobs(job_ids)

    async def expire_results(self, backend: Backend, now: float) -> int:
        """Clear every result whose expiry (result_ttl, conveyor.rules.results) is `now`
        or earlier, in batches, deleting those stored apart but not the jobs' arguments:
        the jobs are still listed. Returns how many were cleared."""
        cleared = 0
        while True:
            ids = await backend.expire_results(ResultSweep(now=now, limit=EXPIRE_BATCH))
            if ids:
                await (await self.store(backend)).delete_job_blobs(ids, kind="result")
            cleared += len(ids)
            if len(ids) < EXPIRE_BATCH:
                return cleared

    async def sweep_orphans(self, backend: Backend, now: float) -> int:
        """Delete blobs older than `orphan_grace` whose job no longer exists."""
        store = await self.store(backend)
        blobs = await store.list_blobs(now - self.orphan_grace)
        job_ids = list(dict.fromkeys(b.job_id for b in blobs))
        gone: list[str] = []
        for start in range(0, len(job_ids), _SWEEP_BATCH):
            chunk = job_ids[start : start + _SWEEP_BATCH]
            alive = {
                j.id
                for j in await backend.list_jobs(
                    JobPage(where=JobFilter(ids=tuple(chunk)), limit=len(chunk))
                )
            }
            gone += [i for i in chunk if i not in alive]
        return await store.delete_job_blobs(gone) if gone else 0
