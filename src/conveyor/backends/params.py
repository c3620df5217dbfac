"""The params objects and replies of the backend verbs (`conveyor.backends.contract`):
plain frozen data, no backend, no protocol and no rule here."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from conveyor.model.job import AttemptError, Job, JobState, NewJob
from conveyor.rules.rate_limits import RateLimit


# --- params and replies ----------------------------------------------------------
@dataclass(frozen=True, slots=True)
class QueueQuota:
    """One queue of a claim, how many jobs its first pass may take from it, and the
    most the whole claim (both passes) may take from it (None: no bound beyond the
    claim's limit). A weighted worker sets `ceiling` so that one queue never fills
    the slots kept free for the others (conveyor.backends.claiming)."""

    name: str
    quota: int
    ceiling: int | None = None


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """Claim up to `limit` jobs for `worker_id`, each leased for `lease_seconds`.

    Backends claim in two passes over `queues`, in order: first each queue up to its
    quota, then, while short of `limit`, each queue that gave its whole quota takes
    more (an empty queue's share goes to the others); no queue gives more than its
    ceiling over both passes. Within a queue: priority
    (higher first), then run_at, then insertion order. Build requests with
    `conveyor.backends.claiming.QueuePlan`, the one place that turns a worker's queue list
    (strict order or weights) into quotas.

    `rate_limits`: the buckets the worker's app declares (conveyor.rules.rate_limits). A job
    whose `rate_key` names one is claimed only while its bucket has a whole token, and
    takes one; a job naming a bucket not listed here is not claimed (it waits).
    """

    queues: tuple[QueueQuota, ...]
    limit: int
    worker_id: str
    lease_seconds: float
    rate_limits: tuple[RateLimit, ...] = ()


class ClaimedJobs(list[Job]):
    """What `fetch_jobs` returns: the claimed jobs, and `next_token_at`, the earliest
    time a bucket that held back a waiting job of the claim's queues has a token again
    (None: no job was held back by a rate limit). A worker whose claim came back short
    sleeps until then (or a wake-up) instead of polling."""

    next_token_at: float | None = None

    @classmethod
    def of(cls, jobs: Iterable[Job], next_token_at: float | None) -> ClaimedJobs:
        claimed = cls(jobs)
        claimed.next_token_at = next_token_at
        return claimed


@dataclass(frozen=True, slots=True)
class Lease:
    job_id: str
    token: int


@dataclass(frozen=True, slots=True)
class HeldLease:
    """A running job as a rescuer sees it: enough to end its attempt, fenced."""

    job_id: str
    token: int
    worker_id: str | None
    attempt: int
    max_attempts: int
    lease_expires_at: float | None


@dataclass(frozen=True, slots=True)
class LeaseQuery:
    """Running jobs whose lease expired before `expired_before`, or held by one of
    `worker_ids` (a worker known to be dead). At most `limit`, in no set order."""

    expired_before: float | None = None
    worker_ids: tuple[str, ...] = ()
    limit: int = 1000


@dataclass(frozen=True, slots=True)
class Settlement:
    """The end of one attempt, written by the worker's batched completer (or a rescuer).

    `state` is where the job goes: completed, retryable (with `run_at`), dead,
    available (a lost worker's job, due at once), scheduled/available (snooze or
    release, `refund_attempt=True`), cancelled.
    """

    job_id: str
    token: int
    state: JobState
    result: str | None = None  # JSON text, for completed
    error: AttemptError | None = None
    run_at: float | None = None
    refund_attempt: bool = False
    # Completed with a result kept `result_ttl` seconds (conveyor.rules.results): the backend
    # stores its expiry, finished_at + result_ttl, which the prune loop acts on.
    result_ttl: float | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    lost: frozenset[str] = frozenset()  # leases no longer ours: stop, do not ack
    cancel_requested: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Selects jobs for listing and bulk actions. Empty fields match everything."""

    states: tuple[JobState, ...] = ()
    queues: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    # Type name of the last error, ASCII case-insensitive (`keyerror` finds KeyError):
    # compared with `ascii_lower` on both sides, which SQL's lower() matches.
    error_type: str | None = None
    ids: tuple[str, ...] = ()
    # A case-sensitive substring of the stored arguments' JSON text, as the producer
    # wrote it (compact separators): '"user_id":42' or 'alice@example.org'.
    args_contains: str | None = None


# --- the params of the verbs that take more than one thing ------------------------
@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Extend `leases` by `lease_seconds` from now (`heartbeat_jobs`)."""

    leases: Sequence[Lease]
    lease_seconds: float


@dataclass(frozen=True, slots=True)
class CheckpointWrite:
    """A running job's JSON checkpoint and progress, fenced by its lease."""

    lease: Lease
    checkpoint: str | None
    progress: str | None


@dataclass(frozen=True, slots=True)
class JobWait:
    """Wait for new work on `queues`, at most `timeout` seconds (a hint)."""

    queues: Sequence[str]
    timeout: float


@dataclass(frozen=True, slots=True)
class FinishWait:
    """Wait for job `job_id` to end, at most `timeout` seconds (a hint)."""

    job_id: str
    timeout: float


@dataclass(frozen=True, slots=True)
class Retention:
    """Prune completed jobs finished before `completed_before`, dead ones before
    `dead_before`."""

    completed_before: float
    dead_before: float


@dataclass(frozen=True, slots=True)
class ResultSweep:
    """Clear at most `limit` results whose expiry is `now` or earlier."""

    now: float
    limit: int


@dataclass(frozen=True, slots=True)
class ForcedState:
    """Test hook: write `state` on job `job_id`, through the storage guard."""

    job_id: str
    state: JobState


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of the jobs matching `where`, newest enqueued first: `after` is the
    id of the last job of the previous page (keyset), `offset` rows to skip."""

    where: JobFilter
    limit: int = 50
    offset: int = 0
    after: str | None = None


@dataclass(frozen=True, slots=True)
class BulkAction:
    """An operator's action on at most `limit` jobs matching `where`; `dry_run` says
    which jobs it would act on and changes nothing."""

    where: JobFilter
    limit: int
    dry_run: bool


@dataclass(frozen=True, slots=True)
class QueuePause:
    """Pause (`paused=True`) or resume `queue`."""

    queue: str
    paused: bool


@dataclass(frozen=True, slots=True)
class BucketHold:
    """Rate limit bucket `key` holding `tokens` as of `until` (a time that may be ahead)."""

    key: str
    tokens: float
    until: float


@dataclass(frozen=True, slots=True)
class KeyLimit:
    """A concurrency key's limit set from outside its jobs (None: its jobs' own)."""

    concurrency_key: str
    limit: int | None


@dataclass(frozen=True, slots=True)
class RecordKey:
    """Names one shared record."""

    namespace: str
    key: str


@dataclass(frozen=True, slots=True)
class RecordWrite:
    """A shared record's new `value`, expiring `ttl` seconds after it is written."""

    namespace: str
    key: str
    value: str
    ttl: float | None = None


@dataclass(frozen=True, slots=True)
class RecordSwap:
    """Write `value` only if the record is now `expected` (None: absent)."""

    namespace: str
    key: str
    expected: str | None
    value: str
    ttl: float | None = None


@dataclass(frozen=True, slots=True)
class RecordIncrement:
    """Add `amount` to an integer record; `ttl` applies when the record is created."""

    namespace: str
    key: str
    amount: int = 1
    ttl: float | None = None


@dataclass(frozen=True, slots=True)
class EnqueueIn:
    """Enqueue `jobs` on the caller's own `connection`, inside its transaction."""

    connection: Any
    jobs: Sequence[NewJob]


@dataclass(frozen=True, slots=True)
class TransactionalCompletion:
    """Complete the job of `lease` with `result` (kept `result_ttl` seconds) in a
    transaction that commits only while the lease is current."""

    lease: Lease
    result: str | None = None
    result_ttl: float | None = None


@dataclass(frozen=True, slots=True)
class RecordSwapIn:
    """`RecordSwap` on the caller's own `connection`, inside its transaction."""

    connection: Any
    namespace: str
    key: str
    expected: str | None
    value: str
    ttl: float | None = None


@dataclass(frozen=True, slots=True)
class QueueStats:
    queue: str
    counts: dict[JobState, int] = field(default_factory=dict)
    oldest_available_age: float | None = None  # seconds
    paused: bool = False
    # Available jobs that name a rate limit bucket (docs/flow-control.md): waiting for
    # its tokens, since a claim takes such a job as soon as its bucket has one.
    throttled: int = 0
    # Available jobs parked behind their concurrency key (docs/flow-control.md): waiting
    # for one of the key's slots, however many workers are idle.
    held_by_key: int = 0
    # Waiting jobs a full shed_oldest queue cancelled to admit newer ones, ever: a
    # counter kept by the enqueue that sheds them (pruning does not lower it).
    shed: int = 0

    @property
    def in_flight(self) -> int:
        return self.counts.get(JobState.RUNNING, 0)


@dataclass(frozen=True, slots=True)
class FlowQuery:
    """What `flow_loads` looks at: the jobs of `queue` (None: of every queue), and how
    many keys each of its top lists names at most."""

    queue: str | None = None
    top: int = 20


@dataclass(frozen=True, slots=True)
class KeyLoad:
    """One concurrency key: its running jobs, and its available jobs parked behind
    its limit (held), among the jobs a `FlowQuery` looks at."""

    key: str
    running: int = 0
    held: int = 0


@dataclass(frozen=True, slots=True)
class FlowLoads:
    """What holds a queue's jobs back, for operators (`conveyor queues`, the dashboard's
    queue page, `/metrics`): the keys with the most running jobs and those with the
    most held ones (each at most `top`, ties by key), the totals over every key (so
    what the top lists leave out is `running - sum(...)`), and each rate limit bucket's
    available jobs waiting for its tokens, most first."""

    by_running: tuple[KeyLoad, ...] = ()
    by_held: tuple[KeyLoad, ...] = ()
    running: int = 0  # running jobs that have a concurrency key
    held: int = 0  # available jobs parked behind their key
    keys: int = 0  # keys with a running or a held job
    buckets: tuple[tuple[str, int], ...] = ()
