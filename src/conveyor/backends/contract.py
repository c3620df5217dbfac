"""The backend contract: four roles, each a small set of verbs (docs/architecture.md,
"The backend seam", says the rules every backend follows). A verb that takes more than
one thing takes one frozen params object (`conveyor.backends.params`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from conveyor.backends import params
from conveyor.model.clock import Clock
from conveyor.model.job import Job, NewJob


@runtime_checkable
class JobLifecycle(Protocol):
    """What producers and workers do to jobs."""

    clock: Clock

    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def migrate(self) -> list[int]:
        """Apply pending numbered migrations; return the versions applied."""

    async def enqueue_jobs(self, jobs: Sequence[NewJob]) -> list[Job]:
        """Insert jobs in one round trip; a duplicate returns the existing job."""

    async def fetch_jobs(self, request: params.ClaimRequest) -> params.ClaimedJobs:
        """Stage due jobs, then claim as `request` says, atomically."""

    async def settle_jobs(self, settlements: Sequence[params.Settlement]) -> list[str]:
        """Apply attempt outcomes; return the ids whose token was stale."""

    async def heartbeat_jobs(self, heartbeat: params.Heartbeat) -> params.HeartbeatReply:
        """Extend the leases still held; say which are lost or asked to cancel."""

    async def checkpoint_job(self, checkpoint_write: params.CheckpointWrite) -> bool:
        """Store JSON progress fenced by the lease; False if the lease was lost."""

    async def wait_for_jobs(self, job_wait: params.JobWait) -> None:
        """Return when new work may be there (a hint) or after the timeout."""

    async def find_leases(self, query: params.LeaseQuery) -> list[params.HeldLease]:
        """Running jobs whose lease expired or whose worker is gone."""

    async def prune_jobs(self, retention: params.Retention) -> int:
        """Delete finished jobs past retention, never inside a live `unique_for` window."""

    async def expire_results(self, result_sweep: params.ResultSweep) -> list[str]:
        """Clear expired results (found by an index); return those jobs' ids."""

    async def get_job(self, job_id: str) -> Job | None: ...


@runtime_checkable
class Inspector(Protocol):
    """What operators read and do."""

    async def list_jobs(self, job_page: params.JobPage) -> list[Job]:
        """One page of the jobs matching a filter, newest enqueued first."""

    async def count_jobs(self, where: params.JobFilter) -> int: ...
    async def cancel_job(self, job_id: str) -> Job | None:
        """Cancel a waiting job; flag a running one (cooperative). None if unknown."""

    async def redrive_jobs(self, bulk_action: params.BulkAction) -> list[Job]:
        """Send dead (or cancelled) jobs back to available, oldest failure first."""

    async def delete_jobs(self, bulk_action: params.BulkAction) -> list[str]:
        """Delete finished jobs (never active ones); return their ids."""

    async def cancel_jobs(self, bulk_action: params.BulkAction) -> list[str]:
        """Cancel waiting jobs in one atomic step; return their ids."""

    async def task_names(self, where: params.JobFilter) -> list[str]:
        """The distinct task names of the jobs matching `where`, sorted."""

    async def dependants_of(self, job_id: str) -> list[str]:
        """The ids of the jobs that were blocked on this one, in enqueue order."""

    async def parents_of(self, job_id: str) -> list[str]:
        """The ids of the jobs this one was enqueued to wait on, as given."""

    async def queue_stats(self) -> list[params.QueueStats]: ...


@runtime_checkable
class FlowState(Protocol):
    """Flow control's state: pauses, rate buckets, key limits and what they hold back."""

    async def pause_queue(self, queue_pause: params.QueuePause) -> None: ...
    async def queue_paused(self, queue: str) -> bool:
        """Whether `queue` is paused (one flag read)."""

    async def hold_rate_bucket(self, bucket_hold: params.BucketHold) -> None:
        """Store a rate limit bucket's tokens as of a time that may be ahead."""

    async def set_key_limit(self, key_limit: params.KeyLimit) -> None:
        """Hold a concurrency key to a limit from now on (None: its jobs' own)."""

    async def key_limit(self, concurrency_key: str) -> int | None:
        """The limit set for the key, None if none is."""

    async def count_running_of_key(self, concurrency_key: str) -> int:
        """How many jobs of a concurrency key run now."""

    async def flow_loads(self, query: params.FlowQuery) -> params.FlowLoads:
        """What holds a queue's jobs back: top keys by running and held, buckets."""


@runtime_checkable
class SharedRecords(Protocol):
    """Text values under (namespace, key), shared by every worker, each verb atomic."""

    async def get_record(self, record_key: params.RecordKey) -> str | None: ...
    async def list_records(self, namespace: str) -> dict[str, str]:
        """Every live (key -> value) of a namespace."""

    async def put_record(self, record_write: params.RecordWrite) -> None:
        """Store the value, replacing any previous one (and its TTL)."""

    async def put_record_if_absent(self, record_write: params.RecordWrite) -> bool:
        """Store the value only if no live record has that key; True if stored."""

    async def compare_and_set_record(self, record_swap: params.RecordSwap) -> bool:
        """Replace the record only if it is now the expected value; True if replaced."""

    async def incr_record(self, record_increment: params.RecordIncrement) -> int:
        """Add to an integer record (absent counts as 0); return the new value."""

    async def delete_record(self, record_key: params.RecordKey) -> bool:
        """Delete the record; True if a live one was there."""


@runtime_checkable
class Backend(JobLifecycle, Inspector, FlowState, SharedRecords, Protocol):
    """Everything a backend does: the four roles."""
