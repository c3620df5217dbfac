"""A task's payload and result options, checked once when the task is registered:
the claim-check limits, redaction, payload hygiene (docs/payloads.md) and how long
its results are kept (`result_ttl`, conveyor.results)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .claim_check import byte_count
from .errors import ConfigurationError, InvalidJob
from .hygiene import check_mode
from .results import result_ttl_seconds
from .timeutil import Duration


def payload_defaults(task_name: str, *, claim_check_threshold: int | None = None,
                     max_payload: int | None = None, redact: Sequence[str] = (),
                     payload_hygiene: str | None = None,
                     result_ttl: Duration | None = None) -> dict[str, Any]:
    """The payload fields of a task's `TaskDefaults`, checked (docs/payloads.md)."""
    try:
        return {
            "claim_check_threshold": None if claim_check_threshold is None
            else byte_count("claim_check_threshold", claim_check_threshold),
            "max_payload": None if max_payload is None else byte_count("max_payload",
                                                                       max_payload),
            "payload_hygiene": None if payload_hygiene is None
            else check_mode(payload_hygiene, "this task"),
            "redact": frozenset(_argument_names(redact)),
            "result_ttl": None if result_ttl is None else result_ttl_seconds(result_ttl),
        }
    except (ConfigurationError, InvalidJob) as exc:
        raise ConfigurationError(f"task {task_name}: {exc}") from None


def _argument_names(redact: object) -> Sequence[str]:
    if (isinstance(redact, str) or not isinstance(redact, (tuple, list, set, frozenset))
            or not all(isinstance(k, str) and k for k in redact)):
        raise ConfigurationError(f"redact= takes a tuple of argument names, not {redact!r}")
    return list(redact)

