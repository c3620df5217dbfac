"""What a job may carry: the ranges every backend stores exactly, defined once and
checked before any backend sees a job, so a bad value is one `InvalidJob` (a
`ValueError`) naming the field, the value and the range, whatever the backend.

* `priority`: a 32-bit signed integer. PostgreSQL's `integer` column is the narrowest
  store; SQLite integers and Redis sorted-set scores (doubles, exact to 2**53) hold
  every such value exactly, so claim order is the same everywhere.
* `max_attempts`: 1 to 2**31 - 1 (the same column type).
* `run_at`: from 1970 to `RUN_AT_MAX` epoch seconds (in the year 5138): Redis orders
  available jobs by run_at written as 17 digits of microseconds.
* durations: finite seconds, at most `DURATION_MAX` (about 317 years, so now + delay
  stays a valid run_at); `delay` and `unique_for` >= 0, `timeout` and `aging` > 0.
* `id`, `queue`, `task`, `unique_key`: non-empty text of at most `NAME_MAX` characters
  without control characters (PostgreSQL text refuses NUL; newlines and the like
  would forge lines in logs and the command line's output) or lone surrogates (not
  encodable as UTF-8).
* `payload` size: at most the task's `max_payload` bytes of UTF-8 JSON (default 10 MB,
  `Conveyor(max_payload=)`, `app.task(payload=PayloadOptions(max_payload=))`): `PayloadTooLarge`.
* `meta`: a JSON object of plain data, its numbers finite and its strings free of NUL
  (PostgreSQL's jsonb refuses \\u0000) and lone surrogates; `payload`: text without NUL.

Checked where every enqueue passes: `task.make_options` (the options a caller gave),
task registration (a task's defaults) and `check_jobs`, which `Conveyor.enqueue_many`
runs on every job just before the backend (jobs built by hand or changed by
middleware included).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from conveyor.model.errors import InvalidJob, PayloadTooLarge
from conveyor.model.job import NewJob

PRIORITY_MIN, PRIORITY_MAX = -(2**31), 2**31 - 1
MAX_ATTEMPTS_MAX = 2**31 - 1
NAME_MAX = 255
RUN_AT_MAX = 99_999_999_999.0  # 10**11 - 1 s: 17 digits of microseconds
DURATION_MAX = 10_000_000_000.0  # 10**10 s
_META_DEPTH_MAX = 32

# C0 and C1 control characters (NUL, newline, escape ...) and lone surrogates.
_NOT_NAME_TEXT = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_NOT_STORABLE_TEXT = re.compile("[\x00\ud800-\udfff]")

_NAME_RANGE = f"non-empty text of at most {NAME_MAX} characters, without control characters"
_RUN_AT_RANGE = (
    "an aware datetime (or epoch seconds) from 1970-01-01 to "
    f"{datetime.fromtimestamp(RUN_AT_MAX, tz=UTC):%Y-%m-%d} UTC"
)


# --- the rules: is `value`, of exactly its plain type, in range? ----------------------
def _is_whole(value: object, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def _is_name(value: object) -> bool:
    return type(value) is str and 0 < len(value) <= NAME_MAX and not _NOT_NAME_TEXT.search(value)


def _is_seconds(value: object, positive: bool) -> bool:
    return (
        type(value) is float and value <= DURATION_MAX and (value > 0 if positive else value >= 0)
    )  # NaN fails both


def _is_epoch(value: object) -> bool:
    return type(value) is float and 0 <= value <= RUN_AT_MAX  # NaN and inf fail


def _is_payload(value: object) -> bool:
    return type(value) is str and not _NOT_STORABLE_TEXT.search(value)


# --- the checks: the value as stored, or InvalidJob saying what was expected -------------
def priority(value: object, where: str = "") -> int:
    return _whole("priority", value, PRIORITY_MIN, PRIORITY_MAX, where)


def max_attempts(value: object, where: str = "") -> int:
    return _whole("max_attempts", value, 1, MAX_ATTEMPTS_MAX, where)


def concurrency_limit(value: object, where: str = "") -> int:
    return _whole("concurrency_limit", value, 1, MAX_ATTEMPTS_MAX, where)


def _whole(field: str, value: object, low: int, high: int, where: str) -> int:
    # bool is an int to Python, never a priority; an IntEnum member becomes its int
    # (psycopg would store an Enum by its name).
    if isinstance(value, int) and not isinstance(value, bool) and _is_whole(int(value), low, high):
        return int(value)
    raise InvalidJob(field, value, f"a whole number from {low} to {high}", where)


def name(field: str, value: object, where: str = "") -> str:
    """An id, queue, task name or unique key."""
    if isinstance(value, str) and _is_name(str(value)):
        return str(value)
    raise InvalidJob(field, value, _NAME_RANGE, where)


def seconds(field: str, value: object, *, positive: bool = False, where: str = "") -> float:
    """A duration, a timedelta or a number of seconds, as float seconds."""
    number = _as_float(value.total_seconds() if isinstance(value, timedelta) else value)
    if _is_seconds(number, positive):
        return number
    low = "more than 0" if positive else "at least 0"
    raise InvalidJob(
        field,
        value,
        f"a timedelta or a number of seconds, {low} and at most {DURATION_MAX:.0f}",
        where,
    )


def epoch(field: str, value: object, where: str = "") -> float:
    """A point in time (an aware datetime, or epoch seconds) as float epoch seconds."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidJob(
                field,
                value,
                "an aware datetime, not a naive one (times are "
                "UTC), e.g. datetime.now(timezone.utc)",
                where,
            )
        number = value.timestamp()
    else:
        number = _as_float(value)
    if _is_epoch(number):
        return number
    raise InvalidJob(field, value, _RUN_AT_RANGE, where)


def _as_float(value: object) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:  # an int too large for a float
            return math.inf
    return math.nan  # not a number: fails every range check


def meta(value: object, where: str = "") -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidJob("meta", value, "a dict of plain JSON data", where)
    problem = _json_problem(value, 0)
    if problem is not None:
        raise InvalidJob("meta", value, f"a dict of plain JSON data ({problem})", where)
    return value


def _json_problem(value: object, depth: int) -> str | None:
    """Why `value` is not JSON every backend stores as given, or None."""
    if isinstance(value, str):
        return (
            None
            if not _NOT_STORABLE_TEXT.search(value)
            else (f"{value!r} holds a NUL character or a lone surrogate")
        )
    if value is None or isinstance(value, int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{value!r} is not a JSON number"
    if depth >= _META_DEPTH_MAX:
        return f"nested deeper than {_META_DEPTH_MAX} levels"
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"key {key!r} is not a string"
            problem = _json_problem(key, depth) or _json_problem(item, depth + 1)
            if problem is not None:
                return problem
        return None
    if isinstance(value, (list, tuple)):
        for item in value:
            problem = _json_problem(item, depth + 1)
            if problem is not None:
                return problem
        return None
    return f"a {type(value).__name__} is not JSON"


def payload(value: object, where: str = "") -> str:
    if isinstance(value, str) and _is_payload(str(value)):
        return str(value)
    raise InvalidJob("payload", value, "JSON text without NUL characters", where)


WEIGHT_MIN, WEIGHT_MAX = 0.01, 1000.0  # conveyor.rules.fairness: steps of 100,000 to 1 units


def _is_weight(value: object) -> bool:
    return type(value) is float and WEIGHT_MIN <= value <= WEIGHT_MAX  # NaN fails


def fairness_weight(value: object, where: str = "") -> float:
    """A fairness key's weight: a number from WEIGHT_MIN to WEIGHT_MAX."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and _is_weight(float(value)):
        return float(value)
    raise InvalidJob(
        "fairness_weight", value, f"a number from {WEIGHT_MIN:g} to {WEIGHT_MAX:g}", where
    )


# --- whole jobs ---------------------------------------------------------------------------
def check_job(job: NewJob) -> NewJob:
    """`job` if every field is in range, or a copy with plain values where a field
    held a subclass or another number type (an IntEnum priority, a StrEnum queue: psycopg
    would store an Enum by its name); InvalidJob naming the first field that is not."""
    # The usual job (plain values) passes on the rules alone, at a third of the cost
    # of the checks below; they decide everything else.
    if (
        _is_name(job.id)
        and _is_name(job.task)
        and _is_name(job.queue)
        and _is_payload(job.payload)
        and _is_whole(job.priority, PRIORITY_MIN, PRIORITY_MAX)
        and _is_whole(job.max_attempts, 1, MAX_ATTEMPTS_MAX)
        and (job.run_at is None or _is_epoch(job.run_at))
        and (job.unique_key is None or _is_name(job.unique_key))
        and (job.unique_for is None or _is_seconds(job.unique_for, positive=False))
        and (job.timeout is None or _is_seconds(job.timeout, positive=True))
        and (job.aging is None or _is_seconds(job.aging, positive=True))
        and (job.rate_key is None or _is_name(job.rate_key))
        and (job.bound is None or _is_whole(job.bound.max_waiting, 1, MAX_ATTEMPTS_MAX))
        and (job.fairness_key is None or _is_name(job.fairness_key))
        and (job.fairness_weight is None or _is_weight(job.fairness_weight))
        and _is_concurrency(job.concurrency_key, job.concurrency_limit)
        and type(job.meta) is dict
        and (not job.meta or _json_problem(job.meta, 0) is None)
    ):
        return job
    try:
        return replace(
            job,
            id=name("id", job.id),
            task=name("task", job.task),
            queue=name("queue", job.queue),
            payload=payload(job.payload),
            priority=priority(job.priority),
            max_attempts=max_attempts(job.max_attempts),
            run_at=None if job.run_at is None else epoch("run_at", job.run_at),
            unique_key=None if job.unique_key is None else name("unique_key", job.unique_key),
            unique_for=None if job.unique_for is None else seconds("unique_for", job.unique_for),
            timeout=None if job.timeout is None else seconds("timeout", job.timeout, positive=True),
            meta=meta(job.meta),
            aging=None if job.aging is None else seconds("aging", job.aging, positive=True),
            concurrency_key=None
            if job.concurrency_key is None
            else name("concurrency_key", job.concurrency_key),
            concurrency_limit=_concurrency_limit_of(job),
            rate_key=None if job.rate_key is None else name("rate_key", job.rate_key),
            bound=None
            if job.bound is None
            else replace(
                job.bound,
                max_waiting=_whole("max_waiting", job.bound.max_waiting, 1, MAX_ATTEMPTS_MAX, ""),
            ),
            fairness_key=None
            if job.fairness_key is None
            else name("fairness_key", job.fairness_key),
            fairness_weight=None
            if job.fairness_weight is None
            else fairness_weight(job.fairness_weight),
        )
    except InvalidJob as exc:
        raise InvalidJob(exc.field, exc.value, exc.expected, f"job {job.id!r}") from None


def _is_concurrency(key: object, limit: object) -> bool:
    """A key and its limit come together, or neither does."""
    return (key is None and limit is None) or (
        _is_name(key) and _is_whole(limit, 1, MAX_ATTEMPTS_MAX)
    )


def _concurrency_limit_of(job: NewJob) -> int | None:
    if job.concurrency_key is None and job.concurrency_limit is None:
        return None
    if job.concurrency_key is None:
        raise InvalidJob("concurrency_key", None, "a key for the concurrency_limit given")
    if job.concurrency_limit is None:
        raise InvalidJob("concurrency_limit", None, "a limit for the concurrency_key given")
    return concurrency_limit(job.concurrency_limit)


def payload_size(job: NewJob, limit: int) -> None:
    """PayloadTooLarge when the payload's UTF-8 text is over `limit` bytes."""
    if len(job.payload) * 4 <= limit:  # at most 4 bytes a character: surely under
        return
    size = len(job.payload.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise PayloadTooLarge(size, limit, f"job {job.id!r} ({job.task})")


def check_jobs(
    jobs: Iterable[NewJob], max_payload: Callable[[str], int] | None = None
) -> list[NewJob]:
    """Every job checked before any is stored: a batch with one bad job stores none.
    `max_payload(task name)` is the largest payload in bytes each job may carry."""
    checked = [check_job(job) for job in jobs]
    if max_payload is not None:
        for job in checked:
            payload_size(job, max_payload(job.task))
    return checked
