"""A job's payload and id, made at every enqueue; a task's payload and result options,
checked once when the task is registered: the claim-check limits, redaction, payload
hygiene (docs/payloads.md) and how long its results are kept (`result_ttl`,
conveyor.rules.results)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from conveyor.model.clock import Duration
from conveyor.model.errors import ConfigurationError, InvalidJob, SerializationError
from conveyor.payloads.claim_check import byte_count
from conveyor.rules.hygiene import check_mode
from conveyor.rules.results import result_ttl_seconds


def new_job_id() -> str:
    """Random, roughly time-ordered ids (UUIDv7-like) keep indexes append-mostly."""
    millis = time.time_ns() // 1_000_000
    return f"{millis << 80 | int.from_bytes(os.urandom(10), 'big'):032x}"


_JSON = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def _payload_encoder() -> Callable[[Any], str]:
    """`_JSON.encode`, without its per-call set-up: `encode` builds the C encoder
    afresh on every call, half of what a small payload costs. A fresh table of the
    containers being encoded per call (what catches a circular reference) is all the
    C encoder needs. `_JSON.encode` where the C encoder is missing, or is not called
    as in this Python's own `json.encoder`."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return _JSON.encode

    def encode(value: Any) -> str:
        return "".join(
            make(
                {},
                _JSON.default,
                json.encoder.encode_basestring_ascii,
                None,
                ":",
                ",",
                False,
                False,
                False,
            )(value, 0)
        )

    sample = {"args": [1, 2.5, "é", None, [True]], "kwargs": {"k": {"x": -0.0}}}
    try:
        if encode(sample) == _JSON.encode(sample):
            return encode
    except Exception:
        pass
    return _JSON.encode


_encode_json = _payload_encoder()


def encode_payload(task_name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    try:
        return _encode_json({"args": list(args), "kwargs": kwargs})
    except (TypeError, ValueError) as exc:
        raise SerializationError(
            f"arguments of {task_name} cannot be stored as JSON ({exc}); pass plain data "
            "(str, int, float, bool, None, list, dict) such as ids instead of objects"
        ) from None


def payload_defaults(
    task_name: str,
    *,
    claim_check_threshold: int | None = None,
    max_payload: int | None = None,
    redact: Sequence[str] = (),
    payload_hygiene: str | None = None,
    result_ttl: Duration | None = None,
) -> dict[str, Any]:
    """The payload fields of a task's `TaskDefaults`, checked (docs/payloads.md)."""
    try:
        return {
            "claim_check_threshold": None
            if claim_check_threshold is None
            else byte_count("claim_check_threshold", claim_check_threshold),
            "max_payload": None if max_payload is None else byte_count("max_payload", max_payload),
            "payload_hygiene": None
            if payload_hygiene is None
            else check_mode(payload_hygiene, "this task"),
            "redact": frozenset(_argument_names(redact)),
            "result_ttl": None if result_ttl is None else result_ttl_seconds(result_ttl),
        }
    except (ConfigurationError, InvalidJob) as exc:
        raise ConfigurationError(f"task {task_name}: {exc}") from None


def _argument_names(redact: object) -> Sequence[str]:
    if (
        isinstance(redact, str)
        or not isinstance(redact, (tuple, list, set, frozenset))
        or not all(isinstance(k, str) and k for k in redact)
    ):
        raise ConfigurationError(f"redact= takes a tuple of argument names, not {redact!r}")
    return list(redact)
