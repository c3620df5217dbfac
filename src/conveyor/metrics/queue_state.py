"""Queue state as Prometheus gauges, read through the admin API at scrape time.

Works on every backend, since it only uses `app.admin`: stats (depth by state,
oldest waiting age, paused), workers, the per-minute records of the workers, and the
circuit breakers' shared records (state, and transitions counted fleet-wide).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..breakers import STATES, BreakerState
from ..job import JobState

if TYPE_CHECKING:
    from collections.abc import Iterable

    from prometheus_client.metrics_core import Metric

    from ..admin import WorkerInfo
    from ..app import Conveyor
    from ..backends.base import QueueStats


class _Snapshot(Collector):
    def __init__(self, stats: list[QueueStats], workers: list[WorkerInfo],
                 breakers: dict[str, BreakerState]) -> None:
        self.stats = stats
        self.workers = workers
        self.breakers = breakers

    def collect(self) -> Iterable[Metric]:
        depth = GaugeMetricFamily("conveyor_queue_jobs", "Jobs in the backend by queue and "
                                  "state.", labels=["queue", "state"])
        oldest = GaugeMetricFamily("conveyor_queue_oldest_waiting_seconds", "Age of the oldest "
                                   "available job (0 when none waits).", labels=["queue"])
        dead = GaugeMetricFamily("conveyor_queue_dead_letter_jobs", "Dead-letter depth.",
                                 labels=["queue"])
        paused = GaugeMetricFamily("conveyor_queue_paused", "1 if the queue is paused.",
                                   labels=["queue"])
        running = GaugeMetricFamily("conveyor_queue_running_jobs", "Jobs leased by a worker "
                                    "right now (all processes).", labels=["queue"])
        throttled = GaugeMetricFamily("conveyor_queue_throttled_jobs", "Available jobs held "
                                      "back by a rate limit (waiting for their bucket's "
                                      "tokens).", labels=["queue"])
        held = GaugeMetricFamily("conveyor_queue_held_by_key_jobs", "Available jobs waiting "
                                 "for a slot of their concurrency key.", labels=["queue"])
        for s in self.stats:
            for state in JobState:
                depth.add_metric([s.queue, state.value], s.counts.get(state, 0))
            oldest.add_metric([s.queue], s.oldest_available_age or 0.0)
            dead.add_metric([s.queue], s.counts.get(JobState.DEAD, 0))
            paused.add_metric([s.queue], 1.0 if s.paused else 0.0)
            running.add_metric([s.queue], s.in_flight)
            throttled.add_metric([s.queue], s.throttled)
            held.add_metric([s.queue], s.held_by_key)
        up = GaugeMetricFamily("conveyor_workers_up", "Live workers (announced within their "
                               "TTL).", value=len(self.workers))
        slots = GaugeMetricFamily("conveyor_worker_slots", "Concurrency of the live workers.",
                                  value=sum(w.concurrency for w in self.workers))
        return [depth, oldest, dead, paused, running, throttled, held, up, slots,
                *self._breaker_metrics()]

    def _breaker_metrics(self) -> list[Metric]:
        state = GaugeMetricFamily("conveyor_breaker_state", "1 for the state each circuit "
                                  "breaker is in (closed, open, half-open), 0 for the others.",
                                  labels=["breaker", "state"])
        # Counted in the breaker's record by whoever made the transition: fleet-wide,
        # and it survives restarts, as a counter should.
        moves = CounterMetricFamily("conveyor_breaker_transitions", "Times each circuit "
                                    "breaker entered a state.", labels=["breaker", "to"])
        for name, current in self.breakers.items():
            for each in STATES:
                state.add_metric([name, each], 1.0 if current.state == each else 0.0)
                moves.add_metric([name, each], current.transitions.get(each, 0))
        return [state, moves]


async def queue_state_text(app: Conveyor) -> bytes:
    """The state gauges in the Prometheus text format."""
    registry = CollectorRegistry()
    registry.register(_Snapshot(await app.admin.stats(), await app.admin.workers(),
                                await app.admin.breakers()))
    return generate_latest(registry)
