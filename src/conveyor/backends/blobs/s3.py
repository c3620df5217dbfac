"""Blobs in an S3-compatible bucket (AWS S3, MinIO, Ceph, R2 ...) through boto3.

boto3 because it is the reference client of the S3 API, maintained by AWS, and
speaks to every S3-compatible server through `endpoint_url`; it brings the usual
credential chain (environment, config files, instance roles) and retries with
backoff. Its calls block, so each runs in a thread (`asyncio.to_thread`).

Each object is `<prefix><key>`, with the job id and the time it was written (by
the application clock) as object metadata, for the orphan sweep.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote, unquote

from conveyor.backends.blobs import StoredBlob, job_digest
from conveyor.model.clock import Clock
from conveyor.model.errors import BackendUnavailable, ConfigurationError

_DELETE_BATCH = 1000  # DeleteObjects takes at most 1000 keys


class S3BlobStore:
    def __init__(
        self,
        bucket: str,
        prefix: str,
        clock: Clock,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        client: Any = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix if not prefix or prefix.endswith("/") else prefix + "/"
        self.clock = clock
        self._endpoint_url, self._region = endpoint_url, region
        self._client = client

    def __repr__(self) -> str:
        return f"<S3BlobStore s3://{self.bucket}/{self.prefix}>"

    @property
    def client(self) -> Any:
        if self._client is None:
            try:
                import boto3
            except ModuleNotFoundError as exc:
                raise ConfigurationError(
                    "the s3 blob store needs boto3: pip install 'conveyor[s3]'"
                ) from exc
            self._client = boto3.client(
                "s3", endpoint_url=self._endpoint_url, region_name=self._region
            )
        return self._client

    async def _call(self, method: str, **params: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return await asyncio.to_thread(getattr(self.client, method), **params)
        except ClientError:
            raise  # an answer from the server: the caller decides (NoSuchKey ...)
        except BotoCoreError as exc:  # no answer: connection, timeout, credentials
            raise BackendUnavailable(f"{self!r}: {exc}") from exc

    async def put_blob(self, key: str, job_id: str, data: bytes) -> None:
        await self._call(
            "put_object",
            Bucket=self.bucket,
            Key=self.prefix + key,
            Body=data,
            Metadata={"job-id": quote(job_id), "created-at": repr(self.clock())},
        )

    async def get_blob(self, key: str) -> bytes | None:
        from botocore.exceptions import ClientError

        try:
            reply = await self._call("get_object", Bucket=self.bucket, Key=self.prefix + key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise BackendUnavailable(f"{self!r}: {exc}") from exc
        body: bytes = await asyncio.to_thread(reply["Body"].read)
        return body

    async def _keys(self, prefix: str) -> list[str]:
        keys: list[str] = []
        token: str | None = None
        while True:
            params: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
            if token:
                params["ContinuationToken"] = token
            page = await self._call("list_objects_v2", **params)
            keys += [item["Key"] for item in page.get("Contents", [])]
            token = page.get("NextContinuationToken")
            if not token:
                return keys

    async def delete_job_blobs(self, job_ids: Sequence[str], kind: str | None = None) -> int:
        keys: list[str] = []
        for digest in {job_digest(i) for i in job_ids}:
            keys += await self._keys(self.prefix + digest + "." + (kind + "." if kind else ""))
        for start in range(0, len(keys), _DELETE_BATCH):
            chunk = keys[start : start + _DELETE_BATCH]
            await self._call(
                "delete_objects",
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True},
            )
        return len(keys)

    async def list_blobs(self, created_before: float, limit: int = 1000) -> list[StoredBlob]:
        from botocore.exceptions import ClientError

        found = []
        for full_key in await self._keys(self.prefix):
            try:
                head = await self._call("head_object", Bucket=self.bucket, Key=full_key)
                meta = head.get("Metadata", {})
                stored = StoredBlob(
                    full_key[len(self.prefix) :], unquote(meta["job-id"]), float(meta["created-at"])
                )
            except ClientError:
                continue  # deleted meanwhile
            except (KeyError, ValueError):
                continue  # not one of ours: left alone
            if stored.created_at < created_before:
                found.append(stored)
        found.sort(key=lambda b: b.created_at)
        return found[:limit]

    async def close(self) -> None:
        pass
