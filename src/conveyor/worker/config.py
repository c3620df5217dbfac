"""Worker settings, with defaults that recover a dead host's jobs within 15 s."""

from __future__ import annotations

from dataclasses import dataclass

from conveyor.context import DEFAULT_DEAD_RETENTION


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    queues: tuple[str, ...] = ("default",)
    # None: serve `queues` in strict order. Else one weight per queue: each claim is
    # shared out by weight (conveyor.backends.claiming).
    queue_weights: tuple[float, ...] | None = None
    concurrency: int = 10
    # A lease lasts `lease` seconds and is renewed every `heartbeat_interval`.
    # Recovery of a dead worker's job takes at most lease + rescue_interval.
    lease: float = 10.0
    heartbeat_interval: float | None = None  # None: lease / 3
    heartbeats: bool = True  # off only in tests that simulate a stalled worker
    rescue_interval: float = 5.0
    # Liveness (conveyor.worker.liveness): on a backend with a signal the kernel ends
    # when a process dies (all three built-in ones), a killed worker's jobs come back
    # in well under a second instead of after lease + rescue_interval. Others' signals
    # are looked at every `liveness_interval`; a worker counts as dead once its signal
    # has been gone for `liveness_grace` (a live one takes a lost signal back sooner).
    liveness: bool = True
    liveness_interval: float = 0.25
    liveness_grace: float = 0.25
    poll_interval: float = 1.0  # wake-ups are hints; this is the fallback
    fetch_batch: int = 200  # most jobs claimed in one statement
    grace_period: float = 30.0  # drain time after the first SIGTERM
    prune_interval: float = 60.0
    completed_retention: float = 24 * 3600.0
    dead_retention: float = DEFAULT_DEAD_RETENTION
    thread_pool_size: int | None = None  # sync tasks; None: concurrency
    stats_interval: float = 5.0  # per-minute throughput records (conveyor.observe.minute_stats)
    # Claim at most this many jobs, then drain and return (pool children recycle so).
    max_jobs: int | None = None
    # Run what is due, then return (`conveyor worker --burst`): once a claim finds
    # nothing, no job is running and every outcome is written. Jobs due later (delayed,
    # snoozed, a retry's backoff) are left for the next run; the schedules do not run.
    burst: bool = False
    # A sync handler past its hard time limit cannot be stopped inside its process:
    # with this set the worker returns its other jobs and stops (cold), so that the
    # process can exit and be replaced. Pool children set it.
    stop_on_runaway: bool = False
    # Enqueue the app's periodic schedules from this worker too. Safe on every
    # replica (each tick is enqueued once); off for workers that should only run jobs.
    scheduler: bool = True

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not self.queues:
            raise ValueError("a worker needs at least one queue")
        if self.queue_weights is not None and len(self.queue_weights) != len(self.queues):
            raise ValueError("give one weight per queue, or none")
        if self.lease <= 0:
            raise ValueError("lease must be positive")
        if self.liveness_interval <= 0 or self.liveness_grace < 0:
            raise ValueError("liveness_interval must be positive and liveness_grace not negative")
        if self.max_jobs is not None and self.max_jobs < 1:
            raise ValueError("max_jobs must be at least 1")

    @property
    def heartbeat_every(self) -> float:
        return self.heartbeat_interval or self.lease / 3
