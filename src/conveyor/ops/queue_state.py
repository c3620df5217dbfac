"""Queue state as Prometheus gauges, read through the admin API at scrape time.

Works on every backend, since it only uses `app.admin` and the Inspector: stats
(depth by state, oldest waiting age, paused), workers, the flow loads (the busiest
concurrency keys), the jobs full queues shed, and the circuit breakers' shared records
(state, and transitions counted fleet-wide).

Per-key gauges have bounded cardinality: the `top_keys` keys with the most running
jobs (and those with the most held ones) get a series each; what the others hold is
one `..._other_jobs` series, so a key per user cannot flood the time-series store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from conveyor.backends.params import FlowLoads, FlowQuery, KeyLoad
from conveyor.model.job import JobState
from conveyor.rules.breakers import STATES, BreakerState

DEFAULT_TOP_KEYS = 20  # per-key series per gauge: a sane bound for a Prometheus server

if TYPE_CHECKING:
    from collections.abc import Iterable

    from prometheus_client.metrics_core import Metric

    from conveyor.app import Conveyor
    from conveyor.backends.params import QueueStats
    from conveyor.model.workers import WorkerInfo


class _Snapshot(Collector):
    def __init__(
        self,
        stats: list[QueueStats],
        workers: list[WorkerInfo],
        breakers: dict[str, BreakerState],
        loads: FlowLoads | None = None,
    ) -> None:
        self.stats = stats
        self.workers = workers
        self.breakers = breakers
        self.loads = loads or FlowLoads()

    def collect(self) -> Iterable[Metric]:
        depth = GaugeMetricFamily(
            "conveyor_queue_jobs",
            "Jobs in the backend by queue and state.",
            labels=["queue", "state"],
        )
        oldest = GaugeMetricFamily(
            "conveyor_queue_oldest_waiting_seconds",
            "Age of the oldest available job (0 when none waits).",
            labels=["queue"],
        )
        dead = GaugeMetricFamily(
            "conveyor_queue_dead_letter_jobs", "Dead-letter depth.", labels=["queue"]
        )
        paused = GaugeMetricFamily(
            "conveyor_queue_paused", "1 if the queue is paused.", labels=["queue"]
        )
        running = GaugeMetricFamily(
            "conveyor_queue_running_jobs",
            "Jobs leased by a worker right now (all processes).",
            labels=["queue"],
        )
        throttled = GaugeMetricFamily(
            "conveyor_queue_throttled_jobs",
            "Available jobs held back by a rate limit (waiting for their bucket's tokens).",
            labels=["queue"],
        )
        held = GaugeMetricFamily(
            "conveyor_queue_held_by_key_jobs",
            "Available jobs waiting for a slot of their concurrency key.",
            labels=["queue"],
        )
        for s in self.stats:
            for state in JobState:
                depth.add_metric([s.queue, state.value], s.counts.get(state, 0))
            oldest.add_metric([s.queue], s.oldest_available_age or 0.0)
            dead.add_metric([s.queue], s.counts.get(JobState.DEAD, 0))
            paused.add_metric([s.queue], 1.0 if s.paused else 0.0)
            running.add_metric([s.queue], s.in_flight)
            throttled.add_metric([s.queue], s.throttled)
            held.add_metric([s.queue], s.held_by_key)
        # A counter kept by the backend (QueueStats.shed): exported as one, at scrape time.
        shed = CounterMetricFamily(
            "conveyor_queue_shed_jobs",
            "Waiting jobs a full shed_oldest queue cancelled to admit newer ones.",
            labels=["queue"],
        )
        for s in self.stats:
            shed.add_metric([s.queue], s.shed)
        up = GaugeMetricFamily(
            "conveyor_workers_up",
            "Live workers (announced within their TTL).",
            value=len(self.workers),
        )
        slots = GaugeMetricFamily(
            "conveyor_worker_slots",
            "Concurrency of the live workers.",
            value=sum(w.concurrency for w in self.workers),
        )
        return [
            depth,
            oldest,
            dead,
            paused,
            running,
            throttled,
            held,
            shed,
            up,
            slots,
            *self._keys(),
            *self._breaker_metrics(),
        ]

    def _keys(self) -> list[Metric]:
        loads = self.loads
        keys = GaugeMetricFamily(
            "conveyor_concurrency_keys",
            "Concurrency keys with a running or a held job.",
            value=loads.keys,
        )
        return [
            *_top_and_rest("running", "Running jobs", loads.by_running, loads.running),
            *_top_and_rest("held", "Available jobs waiting for a slot", loads.by_held, loads.held),
            keys,
        ]

    def _breaker_metrics(self) -> list[Metric]:
        state = GaugeMetricFamily(
            "conveyor_breaker_state",
            "1 for the state each circuit "
            "breaker is in (closed, open, half-open), 0 for the others.",
            labels=["breaker", "state"],
        )
        # Counted in the breaker's record by whoever made the transition: fleet-wide,
        # and it survives restarts, as a counter should.
        moves = CounterMetricFamily(
            "conveyor_breaker_transitions",
            "Times each circuit breaker entered a state.",
            labels=["breaker", "to"],
        )
        for name, current in self.breakers.items():
            for each in STATES:
                state.add_metric([name, each], 1.0 if current.state == each else 0.0)
                moves.add_metric([name, each], current.transitions.get(each, 0))
        return [state, moves]


def _top_and_rest(field: str, what: str, top: tuple[KeyLoad, ...], total: int) -> list[Metric]:
    """A series per key of `top` (its `field`), and one for what the other keys hold."""
    name = f"conveyor_concurrency_key_{field}_jobs"
    per_key = GaugeMetricFamily(
        name, f"{what} of the concurrency keys with the most of them (the top N).", labels=["key"]
    )
    for k in top:
        per_key.add_metric([k.key], getattr(k, field))
    rest = GaugeMetricFamily(
        f"conveyor_concurrency_key_{field}_other_jobs",
        f"{what} of the keys not in the top N of {name}.",
        value=total - sum(getattr(k, field) for k in top),
    )
    return [per_key, rest]


async def queue_state_text(app: Conveyor, top_keys: int = DEFAULT_TOP_KEYS) -> bytes:
    """The state gauges in the Prometheus text format, with a series for each of the
    `top_keys` busiest concurrency keys (0: none, only the totals)."""
    loads = await (await app.backend()).flow_loads(FlowQuery(top=top_keys))
    registry = CollectorRegistry()
    registry.register(
        _Snapshot(
            await app.admin.stats(), await app.admin.workers(), await app.admin.breakers(), loads
        )
    )
    return generate_latest(registry)
