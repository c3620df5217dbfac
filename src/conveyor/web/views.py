"""What the pages show, computed from the admin API: no HTTP here, so it is easy to test."""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from conveyor.backends.params import QueueStats
from conveyor.model import jsontext
from conveyor.model.job import Job, JobState
from conveyor.model.workers import WorkerInfo
from conveyor.observe.minute_stats import Minute, QueueMinute
from conveyor.payloads.view import shown_arguments, shown_payload, shown_result, stored_apart
from conveyor.web.charts import Series, lines, stacked_bars

STATE_ORDER = (
    JobState.AVAILABLE,
    JobState.SCHEDULED,
    JobState.RUNNING,
    JobState.RETRYABLE,
    JobState.DEAD,
    JobState.CANCELLED,
    JobState.COMPLETED,
)
SLOW_AFTER = 30.0  # seconds the oldest job may wait before a queue shows "slow"
BEHIND_AFTER = 300.0


@dataclass(frozen=True, slots=True)
class QueueRow:
    name: str
    counts: dict[str, int]
    oldest_waiting: float | None
    paused: bool
    done_this_minute: int
    failed_this_minute: int
    done_per_minute: float  # average over the last five whole minutes
    failed_per_minute: float
    workers: int  # live workers that serve the queue
    health: str  # ok, slow, behind, paused, no workers
    health_note: str
    # Of the waiting ones: held back by a rate limit, waiting for a concurrency key's slot.
    throttled: int = 0
    held_by_key: int = 0

    @property
    def waiting(self) -> int:
        return self.counts.get("available", 0)


@dataclass(slots=True)
class Overview:
    queues: list[QueueRow]
    totals: dict[str, int]
    workers_up: int
    workers_draining: int
    slots: int
    in_flight: int
    done_this_minute: int
    failed_this_minute: int
    throughput_chart: str
    wait_chart: str
    run_chart: str
    generated_at: float = field(default_factory=time.time)


def queue_health(stats: QueueStats, serving: int, draining: int = 0) -> tuple[str, str]:
    """A one-word verdict an operator can scan: does this queue keep up?"""
    if stats.paused:
        return "paused", "paused: workers claim nothing from it"
    waiting = stats.counts.get(JobState.AVAILABLE, 0)
    oldest = stats.oldest_available_age or 0.0
    if waiting and serving == 0 and draining:
        return "draining", (
            "jobs wait and the workers that serve this queue are draining: "
            "they finish their jobs and take no more"
        )
    if waiting and serving == 0:
        return "no workers", "jobs wait and no live worker serves this queue"
    if oldest > BEHIND_AFTER:
        return "behind", f"the oldest job has waited {format_duration(oldest)}"
    if oldest > SLOW_AFTER:
        return "slow", f"the oldest job has waited {format_duration(oldest)}"
    return "ok", "keeping up"


def build_overview(
    stats: list[QueueStats], workers: list[WorkerInfo], minutes: list[Minute]
) -> Overview:
    live = [w for w in workers if not w.stopping]
    names = sorted({s.queue for s in stats} | {q for m in minutes for q in m.queues})
    by_name = {s.queue: s for s in stats}
    current = minutes[-1] if minutes else Minute(0)
    recent = minutes[-6:-1]
    rows = []
    totals = {state.value: 0 for state in STATE_ORDER}
    for name in names:
        s = by_name.get(name, QueueStats(queue=name))
        serving = sum(1 for w in live if name in w.queues)
        draining = sum(1 for w in workers if w.stopping and name in w.queues)
        now_q = current.queues.get(name, QueueMinute())
        done5 = sum(m.queues[name].counts["completed"] for m in recent if name in m.queues)
        failed5 = sum(m.queues[name].counts["failed"] for m in recent if name in m.queues)
        counts = {state.value: s.counts.get(state, 0) for state in STATE_ORDER}
        for key, n in counts.items():
            totals[key] += n
        health, note = queue_health(s, serving, draining)
        rows.append(
            QueueRow(
                name=name,
                counts=counts,
                oldest_waiting=s.oldest_available_age,
                paused=s.paused,
                done_this_minute=now_q.counts["completed"],
                failed_this_minute=now_q.counts["failed"],
                done_per_minute=done5 / max(len(recent), 1),
                failed_per_minute=failed5 / max(len(recent), 1),
                workers=serving,
                health=health,
                health_note=note,
                throttled=s.throttled,
                held_by_key=s.held_by_key,
            )
        )
    whole = [m.total() for m in minutes]
    throughput = stacked_bars(
        "Jobs finished per minute, last hour",
        [
            Series("completed", [t.counts["completed"] for t in whole], "s-ok"),
            Series("failed", [t.counts["failed"] for t in whole], "s-bad"),
        ],
        width=1240,
    )
    wait = lines(
        "Wait latency (due to started), last hour",
        [
            Series("p50", [t.wait.quantile(0.5) for t in whole], "s-p50"),
            Series("p95", [t.wait.quantile(0.95) for t in whole], "s-p95"),
        ],
    )
    run = lines(
        "Run latency (started to finished), last hour",
        [
            Series("p50", [t.run.quantile(0.5) for t in whole], "s-p50"),
            Series("p95", [t.run.quantile(0.95) for t in whole], "s-p95"),
        ],
    )
    now_total = current.total()
    return Overview(
        queues=rows,
        totals=totals,
        workers_up=len(live),
        workers_draining=len(workers) - len(live),
        slots=sum(w.concurrency for w in live),
        in_flight=sum(w.in_flight for w in workers),
        done_this_minute=now_total.counts["completed"],
        failed_this_minute=now_total.counts["failed"],
        throughput_chart=throughput,
        wait_chart=wait,
        run_chart=run,
    )


# --- formatting for templates ------------------------------------------------------------
def format_duration(seconds: float | None) -> str:
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min {seconds % 60:.0f} s"
    if seconds < 86400:
        return f"{seconds // 3600:.0f} h {seconds % 3600 // 60:.0f} min"
    return f"{seconds // 86400:.0f} d {seconds % 86400 // 3600:.0f} h"


def format_time(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def format_ago(epoch: float | None, now: float | None = None) -> str:
    if epoch is None:
        return "-"
    delta = (now if now is not None else time.time()) - epoch
    if delta < 0:
        return f"in {format_duration(-delta)}"
    return f"{format_duration(delta)} ago"


def payload_json(job: Job) -> str:
    """The job page's arguments: masked, or the reference of arguments stored apart."""
    return jsontext.pretty(shown_payload(job))


def result_json(job: Job) -> str:
    return jsontext.pretty(shown_result(job))


def pretty_json(text: str | None) -> str:
    """Stored JSON re-indented, or as stored when it is not JSON (escaped by the
    template), cut to a length a page can hold."""
    return jsontext.pretty(text)


def pretty_value(value: object) -> str:
    """A decoded value (a job's meta) as indented JSON, cut like pretty_json."""
    return jsontext.cut(jsontext.dumps(value, indent=2) or "(too deeply nested to show)")


def progress_of(job: Job) -> tuple[float, str] | None:
    ok, data = jsontext.decode(job.progress)
    if not ok or not isinstance(data, dict):
        return None
    try:
        fraction = float(data.get("fraction") or 0.0)
    except (TypeError, ValueError):
        return None
    return max(0.0, min(1.0, fraction)), str(data.get("message") or "")


def args_preview(job: Job, limit: int = 80) -> str:
    decoded = shown_arguments(job)  # secrets masked
    apart = stored_apart(job.payload)
    if apart is not None:
        text = apart
    elif decoded is None:  # a corrupt payload: shown as stored
        text = job.payload
    else:
        args, kwargs = decoded
        parts = [jsontext.dumps(a) or "?" for a in args]
        parts += [f"{k}={jsontext.dumps(v) or '?'}" for k, v in kwargs.items()]
        text = ", ".join(parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def last_error(job: Job) -> str:
    if not job.errors:
        return ""
    e = job.errors[-1]
    return f"{e.type}: {e.message}"


# A frame of Conveyor itself (installed, or run from a source checkout) and of the
# standard library: what runs a handler, not what the handler did.
_OWN_FRAME = re.compile(r'^  File "[^"]*[/\\](?:site-packages|src)[/\\]conveyor[/\\]')
_STDLIB_FRAME = re.compile(r'^  File "[^"]*[/\\]lib[/\\]python3[.\d]*[/\\](?!site-packages)')


def user_traceback(text: str) -> str:
    """A traceback without the frames that lead to the handler (Conveyor's executor
    and the thread pool that runs it): each traceback of a chain starts at the first
    frame of the job's own code. A traceback with no such frame is shown whole."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        out.append(lines[i])
        if lines[i].startswith("Traceback (most recent call last):"):
            frames: list[list[str]] = []
            i += 1
            while i < len(lines) and lines[i].startswith("  "):
                if lines[i].startswith("  File ") or not frames:
                    frames.append([])
                frames[-1].append(lines[i])
                i += 1
            first = next(
                (
                    n
                    for n, f in enumerate(frames)
                    if not (_OWN_FRAME.match(f[0]) or _STDLIB_FRAME.match(f[0]))
                ),
                0,
            )
            if first:
                out.append(
                    f"  ({first} frame{'s' if first > 1 else ''} of Conveyor's worker hidden)"
                )
            out += [line for frame in frames[first:] for line in frame]
            continue
        i += 1
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")
