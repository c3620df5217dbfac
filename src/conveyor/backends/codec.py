"""Stored jobs to `Job`s: the one decoder every backend uses.

A backend hands over a job's raw field values as its driver gives them: a
positional row in `COLUMNS` order (SQLite, PostgreSQL: typed values) or a mapping
of field names to text (Redis hashes, where an absent field takes its default).
Values may be text, bytes, numbers or already-decoded JSON.

Decoding never raises. Each field is decoded on its own, so a field that cannot be
read (not valid JSON, not UTF-8, nested too deeply, not a number, an unknown state)
is named, and the job comes back with `Job.corrupt` saying which field and why,
holding what could be read (id, lease token, queue, task: enough to settle it and
list it) and defaults for the rest. One bad row is then one bad job: the rest of a
claimed batch runs, and listings show the bad one instead of failing.

The careful decoder (`_careful`) is the definition of every rule. The two fast
paths run for every claimed job; they accept only values the careful rules
accept, and hand anything unusual to the careful decoder
(tests/unit/test_codec.py checks that the two agree).

The payload is kept as the producer's text: the worker decodes it once, when it
runs the job (a payload that does not decode is a `CorruptPayload`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from conveyor.model.escaping import excerpt, readable_text
from conveyor.model.job import AttemptError, Job, JobState

# The stored fields of a job, in the order of a positional row.
COLUMNS: tuple[str, ...] = (
    "id",
    "queue",
    "task",
    "payload",
    "state",
    "priority",
    "attempt",
    "max_attempts",
    "run_at",
    "created_at",
    "started_at",
    "finished_at",
    "lease_token",
    "lease_expires_at",
    "worker_id",
    "unique_key",
    "unique_for",
    "result",
    "errors",
    "checkpoint",
    "progress",
    "cancel_requested",
    "timeout",
    "meta",
    "aging",
    "concurrency_key",
    "concurrency_limit",
    "rate_key",
    "result_expires_at",
)
_STATES = {state.value: state for state in JobState}
# Whole numbers fit in 64 bits (a bound parameter of every driver), so any Job read
# can be written back.
_INT_MIN, _INT_END = -(2**63), 2**63
# An unknown state reads as dead: nothing claims or retries a job in it.
UNREADABLE_STATE = JobState.DEAD


class Unreadable(Exception):
    """Why one stored value cannot be read; `fallback` is what the Job holds instead."""

    def __init__(self, reason: str, fallback: Any) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fallback = fallback


# --- the rules: one per kind of field ------------------------------------------------
def is_clean(text: str) -> bool:
    """No lone surrogates (a driver's stand-ins for bytes that are not UTF-8)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _text(raw: Any) -> str:
    if isinstance(raw, str):
        if is_clean(raw):
            return raw
        raise Unreadable(f"not valid UTF-8 ({excerpt(raw)})", readable_text(raw))
    if isinstance(raw, (bytes, bytearray)):
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise Unreadable(f"not valid UTF-8 ({excerpt(raw)})", readable_text(raw)) from None
    if raw is None:
        raise Unreadable("missing", "")
    raise Unreadable(f"not text ({excerpt(raw)})", readable_text(raw))


def _optional_text(raw: Any) -> str | None:
    return None if raw is None else _text(raw)


def _whole(raw: Any) -> int:
    if raw is None:
        raise Unreadable("missing", 0)
    value: int | None = None
    if type(raw) is int:
        value = raw
    elif type(raw) is float and raw.is_integer():
        value = int(raw)
    elif isinstance(raw, (str, bytes)):
        try:
            value = int(raw)
        except ValueError:
            pass
    if value is None:
        raise Unreadable(f"not a whole number ({excerpt(raw)})", 0)
    if not _INT_MIN <= value < _INT_END:
        raise Unreadable(f"out of range ({excerpt(raw)})", 0)
    return value


def _number(raw: Any) -> float:
    if raw is None:
        raise Unreadable("missing", 0.0)
    if type(raw) is float or type(raw) is int:
        return float(raw)
    if isinstance(raw, (str, bytes)):
        try:
            return float(raw)
        except ValueError:
            pass
    raise Unreadable(f"not a number ({excerpt(raw)})", 0.0)


def _optional_number(raw: Any) -> float | None:
    if raw is None:
        return None
    try:
        return _number(raw)
    except Unreadable as exc:
        raise Unreadable(exc.reason, None) from None


def _optional_positive(raw: Any) -> float | None:
    """A positive, finite number of seconds (aging), or None."""
    value = _optional_number(raw)
    if value is not None and not 0 < value < float("inf"):
        raise Unreadable(f"not a positive number ({excerpt(raw)})", None)
    return value


def _optional_limit(raw: Any) -> int | None:
    """A concurrency limit: a whole number of at least 1, or None."""
    try:
        value = None if raw is None else _whole(raw)
    except Unreadable as exc:
        raise Unreadable(exc.reason, None) from None
    if value is not None and value < 1:
        raise Unreadable(f"below 1 ({excerpt(raw)})", None)
    return value


def _state(raw: Any) -> JobState:
    if raw is None:
        raise Unreadable("missing", UNREADABLE_STATE)
    state = _STATES.get(raw) if isinstance(raw, str) else None
    if state is None:
        raise Unreadable(f"unknown state {excerpt(raw)}", UNREADABLE_STATE)
    return state


def _flag(raw: Any) -> bool:
    # 0/1 (SQLite), a boolean (PostgreSQL), "0"/"1" or absent (Redis).
    if raw is None or raw is False or raw == 0 or raw == "0":
        return False
    if raw is True or raw == 1 or raw == "1":
        return True
    raise Unreadable(f"not a flag ({excerpt(raw)})", False)


def _parse(raw: Any) -> Any:
    """JSON text (or bytes) to a value; already-decoded JSON passes through."""
    if isinstance(raw, (str, bytes, bytearray)):
        text = _text(raw)
        try:
            return json.loads(text)
        except RecursionError:
            raise Unreadable("JSON nested too deeply", None) from None
        except ValueError as exc:
            raise Unreadable(f"not valid JSON ({exc}): {excerpt(text)}", None) from None
    return raw


def _json_text(raw: Any) -> str | None:
    """A JSON document kept as text (result, checkpoint, progress)."""
    if raw is None:
        return None
    try:
        text = _text(raw)
        _parse(text)
    except Unreadable as exc:
        raise Unreadable(exc.reason, readable_text(raw)) from None
    return text


def _errors(raw: Any) -> tuple[AttemptError, ...]:
    if raw is None or raw == "[]":
        return ()
    try:
        items = _parse(raw)
    except Unreadable as exc:
        raise Unreadable(exc.reason, ()) from None
    if isinstance(items, tuple) and all(isinstance(e, AttemptError) for e in items):
        return items  # a backend that keeps them decoded
    if not isinstance(items, list):
        raise Unreadable(f"not a list ({excerpt(raw)})", ())
    errors: list[AttemptError] = []
    bad: list[str] = []
    for i, item in enumerate(items):
        try:
            if not isinstance(item, dict):
                raise TypeError
            error = AttemptError.from_dict(item)
        except (TypeError, ValueError, OverflowError):
            bad.append(f"item {i} is not an error record ({excerpt(item)})")
            continue
        texts = (
            error.type,
            error.message,
            error.traceback,
            error.worker_id,
            error.host,
            error.version,
            error.app_version,
        )
        if not all(is_clean(t) for t in texts):  # lone surrogates from JSON escapes
            error = AttemptError(error.attempt, error.at, *map(readable_text, texts))
        errors.append(error)
    if bad:  # the readable records are kept: the last one may say what happened since
        raise Unreadable(", ".join(bad[:3]) + (", ..." if len(bad) > 3 else ""), tuple(errors))
    return tuple(errors)


def _meta(raw: Any) -> dict[str, Any]:
    if raw is None or raw == "{}":
        return {}
    try:
        value = _parse(raw)
    except Unreadable as exc:
        raise Unreadable(exc.reason, {}) from None
    if not isinstance(value, dict):
        raise Unreadable(f"not an object ({excerpt(raw)})", {})
    return value


# Field -> (rule, value when absent from a mapping).
RULES: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "id": (_text, None),
    "queue": (_text, None),
    "task": (_text, None),
    "payload": (_text, None),
    "state": (_state, None),
    "priority": (_whole, None),
    "attempt": (_whole, 0),
    "max_attempts": (_whole, None),
    "run_at": (_number, None),
    "created_at": (_number, None),
    "started_at": (_optional_number, None),
    "finished_at": (_optional_number, None),
    "lease_token": (_whole, 0),
    "lease_expires_at": (_optional_number, None),
    "worker_id": (_optional_text, None),
    "unique_key": (_optional_text, None),
    "unique_for": (_optional_number, None),
    "result": (_json_text, None),
    "errors": (_errors, None),
    "checkpoint": (_json_text, None),
    "progress": (_json_text, None),
    "cancel_requested": (_flag, None),
    "timeout": (_optional_number, None),
    "meta": (_meta, None),
    "aging": (_optional_positive, None),
    "concurrency_key": (_optional_text, None),
    "concurrency_limit": (_optional_limit, None),
    "rate_key": (_optional_text, None),
    "result_expires_at": (_optional_number, None),
}
assert tuple(RULES) == COLUMNS


def _careful(raw: Mapping[str, Any]) -> Job:
    """Every field by its rule; the unreadable ones named in `corrupt`."""
    values: dict[str, Any] = {}
    problems: list[str] = []
    for name, (rule, absent) in RULES.items():
        value = raw.get(name, absent)
        try:
            values[name] = rule(value)
        except Unreadable as exc:
            values[name] = exc.fallback
            problems.append(f"{name}: {exc.reason}")
    if values["max_attempts"] < 1:
        if not any(p.startswith("max_attempts:") for p in problems):
            problems.append(f"max_attempts: below 1 ({values['max_attempts']})")
        values["max_attempts"] = 1
    return Job(**values, corrupt="; ".join(problems) or None)


def last_error_type(errors: Any) -> str | None:
    """The type name of the last readable error of a stored history, or None (for
    filters that read only this field; a corrupt history has no last error)."""
    try:
        records = _errors(errors)
    except Unreadable as exc:
        records = exc.fallback
    return records[-1].type if records else None


# --- the fast paths ----------------------------------------------------------------------
def _clean_or_none(text: Any) -> bool:
    return text is None or (type(text) is str and (text.isascii() or is_clean(text)))


def _json_ok(text: Any) -> bool:
    """A JSON text field (result, checkpoint, progress) that needs no careful look."""
    if text is None:
        return True
    if type(text) is not str or not is_clean(text):
        return False
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _float_or_none(value: Any) -> bool:
    return value is None or type(value) is float


def job_from_row(row: Sequence[Any]) -> Job:
    """A Job from typed values in `COLUMNS` order (the SQL backends)."""
    (
        id_,
        queue,
        task,
        payload,
        state,
        priority,
        attempt,
        max_attempts,
        run_at,
        created_at,
        started_at,
        finished_at,
        lease_token,
        lease_expires_at,
        worker_id,
        unique_key,
        unique_for,
        result,
        errors,
        checkpoint,
        progress,
        cancel_requested,
        timeout,
        meta,
        aging,
        concurrency_key,
        concurrency_limit,
        rate_key,
        result_expires_at,
    ) = row
    try:
        if not (
            type(id_) is str
            and is_clean(id_)
            and type(queue) is str
            and is_clean(queue)
            and type(task) is str
            and is_clean(task)
            and type(payload) is str
            and is_clean(payload)
            and type(priority) is int
            and type(attempt) is int
            and type(max_attempts) is int
            and type(lease_token) is int
            and 1 <= max_attempts < _INT_END
            and _INT_MIN <= priority < _INT_END
            and _INT_MIN <= attempt < _INT_END
            and _INT_MIN <= lease_token < _INT_END
            and type(run_at) is float
            and type(created_at) is float
            and _float_or_none(started_at)
            and _float_or_none(finished_at)
            and _float_or_none(lease_expires_at)
            and _float_or_none(unique_for)
            and _float_or_none(timeout)
            and _float_or_none(result_expires_at)
            and (aging is None or (type(aging) is float and 0 < aging < float("inf")))
            and _clean_or_none(concurrency_key)
            and _clean_or_none(rate_key)
            and (
                concurrency_limit is None
                or (type(concurrency_limit) is int and 1 <= concurrency_limit < _INT_END)
            )
            and _clean_or_none(worker_id)
            and _clean_or_none(unique_key)
            and (
                cancel_requested is False
                or cancel_requested is True
                or cancel_requested == 0
                or cancel_requested == 1
            )
            and _json_ok(result)
            and _json_ok(checkpoint)
            and _json_ok(progress)
        ):
            raise ValueError
        job = Job(
            id=id_,
            task=task,
            queue=queue,
            payload=payload,
            state=_STATES[state],
            priority=priority,
            attempt=attempt,
            max_attempts=max_attempts,
            run_at=run_at,
            created_at=created_at,
            started_at=started_at,
            finished_at=finished_at,
            lease_token=lease_token,
            lease_expires_at=lease_expires_at,
            worker_id=worker_id,
            unique_key=unique_key,
            unique_for=unique_for,
            result=result,
            errors=() if errors == "[]" else _errors(errors),
            checkpoint=checkpoint,
            progress=progress,
            cancel_requested=bool(cancel_requested),
            timeout=timeout,
            meta={} if meta == "{}" else _meta(meta),
            aging=aging,
            rate_key=rate_key,
            concurrency_key=concurrency_key,
            concurrency_limit=concurrency_limit,
            result_expires_at=result_expires_at,
        )
    except (AttributeError, KeyError, TypeError, ValueError, Unreadable):
        return _careful(dict(zip(COLUMNS, row, strict=True)))
    return job


def job_from_fields(fields: Mapping[str, Any], job_id: str | None = None) -> Job:
    """A Job from a mapping of field names to text (Redis), absent fields taking their
    defaults. `job_id`, when given, is the id the job is stored under (its key): it
    wins over the stored `id` field, so a job is always settled where it lives."""
    get = fields.get
    try:
        id_ = fields["id"] if job_id is None else job_id
        queue, task, payload = fields["queue"], fields["task"], fields["payload"]
        worker_id, unique_key, rate_key = get("worker_id"), get("unique_key"), get("rate_key")
        result, checkpoint, progress = get("result"), get("checkpoint"), get("progress")
        cancel = get("cancel_requested")
        if not (
            is_clean(id_)
            and is_clean(queue)
            and is_clean(task)
            and is_clean(payload)
            and _clean_or_none(worker_id)
            and _clean_or_none(unique_key)
            and _json_ok(result)
            and _json_ok(checkpoint)
            and _json_ok(progress)
            and (cancel is None or cancel == "1" or cancel == "0")
            and _clean_or_none(rate_key)
        ):
            raise ValueError
        started_at, finished_at = get("started_at"), get("finished_at")
        lease_expires_at, unique_for, timeout, expires = (
            get("lease_expires_at"),
            get("unique_for"),
            get("timeout"),
            get("result_expires_at"),
        )
        errors, meta, aging = get("errors"), get("meta"), get("aging")
        aging = None if aging is None else float(aging)
        if aging is not None and not 0 < aging < float("inf"):
            raise ValueError
        concurrency_key, concurrency_limit = get("concurrency_key"), get("concurrency_limit")
        if not (
            _clean_or_none(concurrency_key)
            and (
                concurrency_limit is None
                or (concurrency_limit.isdigit() and 1 <= int(concurrency_limit) < _INT_END)
            )
        ):
            raise ValueError
        priority, attempt = int(fields["priority"]), int(get("attempt", 0))
        max_attempts, lease_token = int(fields["max_attempts"]), int(get("lease_token", 0))
        if not (
            max_attempts >= 1
            and _INT_MIN <= priority < _INT_END
            and _INT_MIN <= attempt < _INT_END
            and max_attempts < _INT_END
            and _INT_MIN <= lease_token < _INT_END
        ):
            raise ValueError
        job = Job(
            id=id_,
            task=task,
            queue=queue,
            payload=payload,
            state=_STATES[fields["state"]],
            priority=priority,
            attempt=attempt,
            max_attempts=max_attempts,
            run_at=float(fields["run_at"]),
            created_at=float(fields["created_at"]),
            started_at=None if started_at is None else float(started_at),
            finished_at=None if finished_at is None else float(finished_at),
            lease_token=lease_token,
            lease_expires_at=None if lease_expires_at is None else float(lease_expires_at),
            worker_id=worker_id,
            unique_key=unique_key,
            unique_for=None if unique_for is None else float(unique_for),
            result=result,
            errors=() if errors is None or errors == "[]" else _errors(errors),
            checkpoint=checkpoint,
            progress=progress,
            cancel_requested=cancel == "1",
            timeout=None if timeout is None else float(timeout),
            meta={} if meta is None or meta == "{}" else _meta(meta),
            aging=aging,
            concurrency_key=concurrency_key,
            rate_key=rate_key,
            concurrency_limit=None if concurrency_limit is None else int(concurrency_limit),
            result_expires_at=None if expires is None else float(expires),
        )
    except (AttributeError, KeyError, TypeError, ValueError, Unreadable):
        return _careful(fields if job_id is None else {**fields, "id": job_id})
    return job
