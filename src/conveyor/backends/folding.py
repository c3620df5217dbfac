"""Rows folded into the inspector's replies the same way by every backend: queue stats
and flow loads from the rows each backend reads its own way."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from conveyor.backends.params import FlowLoads, KeyLoad, QueueStats
from conveyor.model.escaping import readable_text
from conveyor.model.job import JobState

_STATE_NAMES = {state.value: state for state in JobState}


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
