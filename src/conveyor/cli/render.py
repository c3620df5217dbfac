"""Plain-text output: aligned tables, times, one job in full. No colour, no
dependencies; output that pipes well into grep and less."""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from conveyor.backends.params import QueueStats
from conveyor.model import jsontext
from conveyor.model.job import Job, JobState
from conveyor.observe.timeline import Event
from conveyor.payloads.view import shown_arguments, stored_apart
from conveyor.rules.rate_limits import RateLimitRegistry, bucket_status

NONE = "-"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns aligned to their widest cell; on a terminal the last column is cut
    to fit the screen (it is the free-text one: errors, results)."""
    cells = [[str(h) for h in headers]] + [[one_line(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    if sys.stdout.isatty():
        room = shutil.get_terminal_size().columns - sum(w + 2 for w in widths[:-1])
        widths[-1] = max(min(widths[-1], room), len(headers[-1]))
    lines = []
    for row in cells:
        padded = [row[i].ljust(widths[i]) for i in range(len(row) - 1)]
        lines.append("  ".join([*padded, clip(row[-1], widths[-1])]).rstrip())
    return "\n".join(lines)


def one_line(value: object) -> str:
    return " ".join(str(value).split())


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def timestamp(epoch: float | None) -> str:
    if epoch is None:
        return NONE
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def duration(seconds: float | None) -> str:
    """Short and human: 850ms, 12s, 4m05s, 3h10m, 2d04h."""
    if seconds is None:
        return NONE
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{seconds:.0f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def relative(epoch: float | None, now: float | None = None) -> str:
    """`12s ago` or `in 12s`."""
    if epoch is None:
        return NONE
    delta = (time.time() if now is None else now) - epoch
    return f"{duration(delta)} ago" if delta >= 0 else f"in {duration(-delta)}"


def last_error(job: Job) -> str:
    if not job.errors:
        return "" if job.corrupt is None else f"cannot be read: {job.corrupt}"
    err = job.errors[-1]
    return f"{err.type}: {err.message}"


def failed_app_version(job: Job) -> str:
    """The application version that ran the last failed attempt: which deploy failed."""
    return (job.errors[-1].app_version if job.errors else "") or NONE


def state_of(job: Job) -> str:
    return job.state.value + (" (corrupt)" if job.corrupt is not None else "")


def job_rows(jobs: Sequence[Job]) -> tuple[list[str], list[list[object]]]:
    headers = ["ID", "TASK", "QUEUE", "STATE", "ATTEMPT", "CREATED", "LAST ERROR"]
    rows: list[list[object]] = [
        [
            j.id,
            j.task,
            j.queue,
            state_of(j),
            f"{j.attempt}/{j.max_attempts}",
            relative(j.created_at),
            last_error(j),
        ]
        for j in jobs
    ]
    return headers, rows


def stats_table(stats: Sequence[QueueStats]) -> str:
    waiting = [JobState.AVAILABLE, JobState.SCHEDULED, JobState.RETRYABLE]
    finished = [JobState.COMPLETED, JobState.CANCELLED, JobState.DEAD]
    # THROTTLED and HELD BY KEY are available jobs too (counted in AVAILABLE): those a
    # rate limit holds back, and those waiting for a slot of their concurrency key.
    headers = [
        "QUEUE",
        "PAUSED",
        *(s.value.upper() for s in waiting),
        "THROTTLED",
        "HELD BY KEY",
        "IN FLIGHT",
        *(s.value.upper() for s in finished),
        "OLDEST AVAILABLE",
    ]
    rows: list[list[object]] = [
        [
            q.queue,
            "yes" if q.paused else "no",
            *(q.counts.get(s, 0) for s in waiting),
            q.throttled,
            q.held_by_key,
            q.in_flight,
            *(q.counts.get(s, 0) for s in finished),
            duration(q.oldest_available_age),
        ]
        for q in stats
    ]
    return table(headers, rows)


def json_text(value: str | None) -> str:
    """Stored JSON text, shown compactly (or the raw text if it does not decode),
    cut to a length a terminal can hold."""
    return NONE if value is None else jsontext.pretty(value, indent=None)


def job_detail(
    job: Job,
    events: Sequence[Event] = (),
    family: Sequence[tuple[str, Sequence[tuple[str, Job | None]]]] = (),
    held_back: str | None = None,
    limits: RateLimitRegistry | None = None,
) -> str:
    """Every field of one job, its parents and children in a workflow (`family`:
    ("parents", [(id, job or None if gone)]), ("children", ...)), its timeline, then
    its errors with their tracebacks. `held_back`: why it waits although due
    (Admin.held_back), shown under its state. `limits`: the app's rate limits, to say
    what holds a rate-limited job back."""
    decoded = shown_arguments(job)  # secrets masked
    apart = stored_apart(job.payload)
    if apart is not None:
        args, kwargs = apart, apart
    elif decoded is None:
        args, kwargs = f"(payload does not decode) {jsontext.cut(job.payload, 2000)}", NONE
    else:
        args = jsontext.dumps(decoded[0]) or "(cannot be shown)"
        kwargs = jsontext.dumps(decoded[1]) or "(cannot be shown)"
    lease = NONE
    if job.state is JobState.RUNNING:
        lease = f"token {job.lease_token}, expires {relative(job.lease_expires_at)}"
    fields: list[tuple[str, object]] = [
        *(
            [("corrupt", f"the stored record cannot be read in full: {job.corrupt}")]
            if job.corrupt is not None
            else []
        ),
        ("id", job.id),
        ("task", job.task),
        ("queue", job.queue),
        ("state", job.state.value + ("  (cancel requested)" if job.cancel_requested else "")),
        *([("held back", held_back)] if held_back is not None else []),
        ("attempt", f"{job.attempt} of {job.max_attempts}"),
        ("priority", job.priority),
        ("args", args),
        ("kwargs", kwargs),
        ("created", f"{timestamp(job.created_at)}  ({relative(job.created_at)})"),
        ("run at", f"{timestamp(job.run_at)}  ({relative(job.run_at)})"),
        ("started", timestamp(job.started_at)),
        ("finished", timestamp(job.finished_at)),
        ("worker", job.worker_id or NONE),
        ("lease", lease),
        ("timeout", NONE if job.timeout is None else duration(job.timeout)),
        (
            "concurrency",
            NONE
            if job.concurrency_key is None
            else f"key {job.concurrency_key}, at most {job.concurrency_limit} running",
        ),
        *(
            [("rate limit", bucket_status(job.rate_key, job.state is JobState.AVAILABLE, limits))]
            if job.rate_key is not None
            else []
        ),
        (
            "unique key",
            NONE
            if job.unique_key is None
            else f"{job.unique_key}"
            + (f" (for {duration(job.unique_for)} after completion)" if job.unique_for else ""),
        ),
        (
            "result",
            stored_apart(job.result) or json_text(job.result)
            if not job.result_expired(None)
            else "(expired: past its result_ttl)",
        ),
        *(
            [
                (
                    "result kept to",
                    f"{timestamp(job.result_expires_at)}  ({relative(job.result_expires_at)})",
                )
            ]
            if job.result_expires_at is not None
            else []
        ),
        ("checkpoint", json_text(job.checkpoint)),
        ("progress", _progress(job.progress)),
        (
            "meta",
            jsontext.cut(jsontext.dumps(job.meta) or "(cannot be shown)") if job.meta else NONE,
        ),
    ]
    width = max(len(name) for name, _ in fields)
    lines = [f"{name.ljust(width)}  {value}" for name, value in fields]
    for title, members in family:
        if members:
            lines += ["", f"{title} ({len(members)})"]
            lines += [
                f"  {i}  "
                + ("(gone: pruned or deleted)" if j is None else f"{j.task}  {j.state.value}")
                for i, j in members
            ]
    if events:
        lines += ["", "timeline"]
        lines += [
            f"  {timestamp(e.at)}  {e.text}" + (f": {one_line(e.detail)}" if e.detail else "")
            for e in events
        ]
    lines.append("")
    lines.append(f"errors ({len(job.errors)})" if job.errors else "errors: none")
    for err in job.errors:
        where = ", ".join(
            p
            for p in (
                err.host and f"on {err.host}",
                err.worker_id and f"worker {err.worker_id}",
                err.app_version and f"app {err.app_version}",
                err.version and f"conveyor {err.version}",
            )
            if p
        )
        lines.append(f"  attempt {err.attempt} at {timestamp(err.at)} {where}".rstrip())
        lines.append(f"    {err.type}: {err.message}")
        for tb_line in err.traceback.rstrip().splitlines():
            lines.append(f"      {tb_line}")
    return "\n".join(lines)


def _progress(value: str | None) -> str:
    if value is None:
        return NONE
    ok, data = jsontext.decode(value)
    if not ok or not isinstance(data, dict):
        return jsontext.cut(value, 200)
    fraction, message = data.get("fraction"), data.get("message")
    shown = f"{fraction * 100:.0f}%" if isinstance(fraction, (int, float)) else NONE
    return f"{shown}  {message}" if message else shown


def job_json(job: Job) -> dict[str, Any]:
    """A job as plain JSON data (JSON columns decoded), for `--json` output."""
    data = asdict(job)
    data["state"] = job.state.value
    for key in ("result", "checkpoint", "progress"):
        ok, value = jsontext.decode(data[key])
        if ok:
            data[key] = value
    decoded = shown_arguments(job)  # secrets masked; a reference stays as stored
    if decoded is not None:
        data["args"], data["kwargs"] = decoded
        del data["payload"]
    return data
