"""Values to and from the scripts: exact float text, optional arguments, job hashes."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from ...job import AttemptError, Job, JobState


def float_arg(value: float) -> str:
    """Exact text of a float (repr round-trips; Lua's own formatting would not)."""
    return repr(float(value))


def optional_arg(value: str | None) -> str:
    """Optional script argument: '' for None, '~' + text otherwise."""
    return "" if value is None else "~" + value


def fields_from_flat(flat: Sequence[str]) -> dict[str, str]:
    """A script's `HGETALL`-style reply [field, value, ...] as a dict."""
    it = iter(flat)
    return dict(zip(it, it))


def _optional_float(fields: Mapping[str, str], name: str) -> float | None:
    value = fields.get(name)
    return None if value is None else float(value)


def job_from_hash(fields: Mapping[str, str]) -> Job:
    return Job(
        id=fields["id"],
        task=fields["task"],
        queue=fields["queue"],
        payload=fields["payload"],
        state=JobState(fields["state"]),
        priority=int(fields["priority"]),
        attempt=int(fields.get("attempt", 0)),
        max_attempts=int(fields["max_attempts"]),
        run_at=float(fields["run_at"]),
        created_at=float(fields["created_at"]),
        started_at=_optional_float(fields, "started_at"),
        finished_at=_optional_float(fields, "finished_at"),
        lease_token=int(fields.get("lease_token", 0)),
        lease_expires_at=_optional_float(fields, "lease_expires_at"),
        worker_id=fields.get("worker_id"),
        unique_key=fields.get("unique_key"),
        unique_for=_optional_float(fields, "unique_for"),
        result=fields.get("result"),
        errors=tuple(AttemptError.from_dict(e) for e in json.loads(fields.get("errors", "[]"))),
        checkpoint=fields.get("checkpoint"),
        progress=fields.get("progress"),
        cancel_requested=fields.get("cancel_requested") == "1",
        timeout=_optional_float(fields, "timeout"),
        meta=json.loads(fields.get("meta", "{}")),
    )


def job_from_reply(flat: Sequence[str]) -> Job:
    """A job a script returned as a flat [field, value, ...] list."""
    return job_from_hash(fields_from_flat(flat))
