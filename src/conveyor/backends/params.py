"""The params objects and replies of the backend verbs (`conveyor.backends.contract`),
and the rules every backend applies to them the same way: which jobs a bulk
cancel or a redrive acts on, how an error type is folded, how queue stats are
built from rows. Plain frozen data: no backend and no protocol here."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from conveyor.model.escaping import readable_text
from conveyor.model.job import AttemptError, Job, JobState
from conveyor.rules.rate_limits import RateLimit

_STATE_NAMES = {state.value: state for state in JobState}


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


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
WAITING_STATES = (JobState.SCHEDULED, JobState.AVAILABLE, JobState.RETRYABLE)


def ascii_lower(text: str) -> str:
    """Lower-case ASCII letters only, as SQLite's lower() does: every backend folds
    the error type the same way, whatever the database's locale."""
    return text.translate(_ASCII_LOWER)


def waiting_scope(where: JobFilter) -> JobFilter | None:
    """The filter `cancel_jobs` acts on: its waiting states (every waiting state by
    default), or None when it names none (nothing to cancel)."""
    states = tuple(s for s in (where.states or WAITING_STATES) if s in WAITING_STATES)
    return replace(where, states=states) if states else None


def redrive_scope(where: JobFilter) -> JobFilter:
    """The filter a redrive acts on: dead jobs by default; only dead or cancelled ones
    may be redriven. Every backend calls this, so they refuse the same inputs."""
    states = where.states or (JobState.DEAD,)
    if not set(states) <= {JobState.DEAD, JobState.CANCELLED}:
        raise ValueError("only dead or cancelled jobs can be redriven")
    return replace(where, states=states)


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


def flow_loads_from_rows(
    top: int, key_rows: Iterable[Sequence[Any]], bucket_rows: Iterable[Sequence[Any]] = ()
) -> FlowLoads:
    """FlowLoads from rows (key, running, held) and (bucket, throttled jobs); a key or
    a bucket may come in several rows (summed). Every backend ranks through here."""
    loads: dict[str, list[int]] = {}
    for key, running, held in key_rows:
        entry = loads.setdefault(readable_text(key), [0, 0])
        entry[0] += int(running)
        entry[1] += int(held)
    keyed = [KeyLoad(k, r, h) for k, (r, h) in sorted(loads.items()) if r or h]
    buckets = _per_queue(bucket_rows)  # summed by name, as readable text
    return FlowLoads(
        by_running=tuple(
            sorted((k for k in keyed if k.running), key=lambda k: (-k.running, k.key))[:top]
        ),
        by_held=tuple(sorted((k for k in keyed if k.held), key=lambda k: (-k.held, k.key))[:top]),
        running=sum(k.running for k in keyed),
        held=sum(k.held for k in keyed),
        keys=len(keyed),
        buckets=tuple(
            sorted(((b, n) for b, n in buckets.items() if n), key=lambda item: (-item[1], item[0]))
        ),
    )


def queue_stats_from_rows(
    now: float,
    counts_by_queue_and_state: Iterable[Sequence[Any]],
    oldest_available_by_queue: Iterable[Sequence[Any]],
    queue_flags: Iterable[Sequence[Any]],
    throttled_by_queue: Iterable[Sequence[Any]] = (),
    parked_by_queue: Iterable[Sequence[Any]] = (),
    shed_by_queue: Iterable[Sequence[Any]] = (),
) -> list[QueueStats]:
    """Stats from rows: (queue, state, count), (queue, earliest available run_at),
    (queue, paused), (queue, available jobs with a rate limit bucket), (queue, available
    jobs parked behind their concurrency key), (queue, jobs shed ever). Shared so every
    backend lists the same queues: those with jobs, a pause flag or shed jobs, by name.

    Values a corrupt job may have put there never fail the stats: a state that is
    not one of JobState is counted in no state (listings show such a job, marked
    corrupt), a queue name that is not text is shown as readable text, an earliest
    run_at that is not a number gives no age."""
    counts: dict[str, dict[JobState, int]] = {}
    for queue, state, n in counts_by_queue_and_state:
        known = _STATE_NAMES.get(state) if isinstance(state, str) else None
        if known is not None:
            by_state = counts.setdefault(readable_text(queue), {})
            by_state[known] = by_state.get(known, 0) + n
    oldest = {
        readable_text(queue): float(run_at)
        for queue, run_at in oldest_available_by_queue
        if isinstance(run_at, (int, float))
    }
    paused = {readable_text(queue): bool(flag) for queue, flag in queue_flags}
    throttled, parked = _per_queue(throttled_by_queue), _per_queue(parked_by_queue)
    shed = _per_queue(shed_by_queue)
    return [
        QueueStats(
            queue=name,
            counts=counts.get(name, {}),
            oldest_available_age=None if name not in oldest else max(0.0, now - oldest[name]),
            paused=paused.get(name, False),
            throttled=throttled.get(name, 0),
            held_by_key=parked.get(name, 0),
            shed=shed.get(name, 0),
        )
        for name in sorted(set(counts) | set(paused) | set(shed))
    ]


def _per_queue(rows: Iterable[Sequence[Any]]) -> dict[str, int]:
    """(queue, count) rows summed by queue, its name as readable text."""
    out: dict[str, int] = {}
    for queue, n in rows:
        out[readable_text(queue)] = out.get(readable_text(queue), 0) + int(n)
    return out
