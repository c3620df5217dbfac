"""Blob stores: where arguments and results too big for a job row are kept
(the claim-check, see conveyor.payloads.claim_check and docs/payloads.md).

A blob belongs to one job: it is written under a key that starts with a digest
of the job's id (`blob_key`), next to the job's id and the time it was written, so
that the blobs of deleted jobs can be deleted by job id, and blobs whose job is
gone can be found (`list_blobs`) and swept by the prune loop.

Stores, chosen from the backend URL unless `Conveyor(blob_store=...)` names one:
a directory next to the SQLite file, a table in the PostgreSQL schema, keys under
the Redis prefix, or an S3-compatible bucket (`s3://bucket/prefix`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable
from urllib.parse import parse_qs, urlsplit

from conveyor.model.clock import Clock
from conveyor.model.errors import ConfigurationError

KINDS = ("args", "result")


@dataclass(frozen=True, slots=True)
class StoredBlob:
    """One blob as a listing shows it: enough to tell whether its job is gone."""

    key: str
    job_id: str
    created_at: float  # epoch seconds from the application clock


def job_digest(job_id: str) -> str:
    """A fixed-length, file-name-safe stand-in for a job id (ids may hold `/`)."""
    return hashlib.sha256(job_id.encode("utf-8")).hexdigest()[:32]


def blob_key(job_id: str, kind: str, sha256: str) -> str:
    """`<job digest>.<kind>.<content digest>`: the content is part of the name, so a
    second enqueue under the id of a live job never overwrites that job's blob."""
    if kind not in KINDS:
        raise ValueError(f"blob kind must be one of {KINDS}, not {kind!r}")
    return f"{job_digest(job_id)}.{kind}.{sha256[:16]}"


def digest_of_key(key: str) -> str:
    return key.partition(".")[0]


def is_of(key: str, kind: str | None) -> bool:
    """Whether the blob under `key` holds a job's `kind` (None: any kind)."""
    return kind is None or key.split(".")[1:2] == [kind]


@runtime_checkable
class BlobStore(Protocol):
    """Bytes by key. Every verb is safe to repeat: a put of a key already there
    (same job, same content) changes nothing; a delete of what is gone deletes nothing."""

    async def put_blob(self, key: str, job_id: str, data: bytes) -> None: ...

    async def get_blob(self, key: str) -> bytes | None:
        """The blob's bytes, or None when no blob has that key."""
        ...

    async def delete_job_blobs(self, job_ids: Sequence[str], kind: str | None = None) -> int:
        """Delete every blob of these jobs (only those of `kind`, "args" or "result",
        when given); return how many were deleted."""
        ...

    async def list_blobs(self, created_before: float, limit: int = 1000) -> list[StoredBlob]:
        """At most `limit` blobs written before `created_before`, oldest first (Redis
        dates every blob of a job by its first: the sweep judges jobs, not blobs)."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class ProvidesBlobStore(Protocol):
    """A backend that can keep blobs itself (a table, keys under its prefix, a
    directory beside its file): the default store when none is configured."""

    def default_blob_store(self) -> BlobStore: ...


def blob_store_from_url(url: str, clock: Clock) -> BlobStore:
    """`file:///absolute/dir` or `s3://bucket/prefix?endpoint_url=...&region=...`.

    S3 credentials come from boto3's usual chain (environment, config files, the
    instance role), never from the URL, so the URL can be logged."""
    parts = urlsplit(url)
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    if parts.scheme == "file":
        if not parts.path:
            raise ConfigurationError(f"blob store URL {url!r}: expected file:///absolute/dir")
        from conveyor.backends.blobs.directory import DirectoryBlobStore

        return DirectoryBlobStore(Path(parts.path), clock)
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ConfigurationError(f"blob store URL {url!r}: expected s3://bucket/prefix")
        unknown = set(options) - {"endpoint_url", "region"}
        if unknown:
            raise ConfigurationError(
                f"blob store URL {url!r}: unknown options {sorted(unknown)}; "
                "known: endpoint_url, region"
            )
        from conveyor.backends.blobs.s3 import S3BlobStore

        return S3BlobStore(
            parts.netloc,
            parts.path.lstrip("/"),
            clock,
            endpoint_url=options.get("endpoint_url"),
            region=options.get("region"),
        )
    raise ConfigurationError(
        f"unknown blob store scheme {parts.scheme!r} in {url!r}; known: file, s3"
    )
