"""Between rows and Conveyor's types: the SQL text and the parameters it takes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from psycopg.types.json import Jsonb

from ...job import AttemptError, Job, JobState
from ..base import JobFilter, ascii_lower
from ..sqlfiles import load_queries

# Column order of every query that returns jobs (see `job_columns` in queries.sql).
_COLUMNS = ("seq id queue task payload state priority attempt max_attempts run_at created_at "
            "started_at finished_at lease_token lease_expires_at worker_id unique_key unique_for "
            "result errors checkpoint progress cancel_requested timeout meta").split()


def load_schema_queries(schema: str, channel: str) -> dict[str, str]:
    """The named queries with the schema and channel filled in, as quoted identifiers.

    Both names are validated (lower-case letters, digits, _), so quoting is exact.
    Plain replacement rather than str.format: SQL is full of braces."""
    queries = load_queries(__package__ or "conveyor.backends.postgres")
    return {name: text.replace("{schema}", f'"{schema}"').replace("{channel}", f'"{channel}"')
            for name, text in queries.items()}


def job_from_row(row: Sequence[Any], start: int = 0) -> Job:
    """A Job from a row whose columns from `start` follow `_COLUMNS` (seq is skipped).
    Positional on purpose: this runs for every claimed and enqueued job."""
    (_seq, id_, queue, task, payload, state, priority, attempt, max_attempts, run_at, created_at,
     started_at, finished_at, lease_token, lease_expires_at, worker_id, unique_key, unique_for,
     result, errors, checkpoint, progress, cancel_requested, timeout, meta) = row[start:]
    if isinstance(errors, str):  # text from the claim query; '[]' needs no parse
        errors = json.loads(errors) if errors != "[]" else None
    if isinstance(meta, str):
        meta = json.loads(meta) if meta != "{}" else None
    return Job(
        id=id_, task=task, queue=queue, payload=payload, state=JobState(state),
        priority=priority, attempt=attempt, max_attempts=max_attempts, run_at=run_at,
        created_at=created_at, started_at=started_at, finished_at=finished_at,
        lease_token=lease_token, lease_expires_at=lease_expires_at, worker_id=worker_id,
        unique_key=unique_key, unique_for=unique_for, result=result,
        errors=tuple(AttemptError.from_dict(e) for e in errors) if errors else (),
        checkpoint=checkpoint, progress=progress, cancel_requested=bool(cancel_requested),
        timeout=timeout, meta=dict(meta) if meta else {},
    )


def claim_order(row: Sequence[Any]) -> tuple[int, float, int]:
    """RETURNING has no order: sort claimed rows by priority desc, run_at, insertion."""
    return (-row[6], row[9], row[0])


def filter_params(where: JobFilter) -> dict[str, Any]:
    def as_list(values: Sequence[str]) -> list[str] | None:
        return [str(v) for v in values] if values else None

    return {
        "states": as_list(where.states),
        "queues": as_list(where.queues),
        "tasks": as_list(where.tasks),
        "ids": as_list(where.ids),
        "error_type": None if where.error_type is None else ascii_lower(where.error_type),
        "args_contains": where.args_contains,
    }


def opt_float(value: float | None) -> float | None:
    # Arrays are dumped with one type: an int among floats would not fit float8[].
    return None if value is None else float(value)


def jsonb(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value)
