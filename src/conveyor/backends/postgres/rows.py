"""Between rows and Conveyor's types: the SQL text and the parameters it takes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg.types.json import Jsonb

from ...job import AttemptError, Job, JobState
from ..base import JobFilter
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
    """A Job from a row whose columns from `start` follow `_COLUMNS` (seq is skipped)."""
    r = dict(zip(_COLUMNS, row[start:], strict=True))
    return Job(
        id=r["id"], task=r["task"], queue=r["queue"], payload=r["payload"],
        state=JobState(r["state"]), priority=r["priority"], attempt=r["attempt"],
        max_attempts=r["max_attempts"], run_at=r["run_at"], created_at=r["created_at"],
        started_at=r["started_at"], finished_at=r["finished_at"], lease_token=r["lease_token"],
        lease_expires_at=r["lease_expires_at"], worker_id=r["worker_id"],
        unique_key=r["unique_key"], unique_for=r["unique_for"], result=r["result"],
        errors=tuple(AttemptError.from_dict(e) for e in r["errors"] or ()),
        checkpoint=r["checkpoint"], progress=r["progress"],
        cancel_requested=bool(r["cancel_requested"]), timeout=r["timeout"],
        meta=dict(r["meta"] or {}),
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
        "error_type": where.error_type,
    }


def opt_float(value: float | None) -> float | None:
    # Arrays are dumped with one type: an int among floats would not fit float8[].
    return None if value is None else float(value)


def jsonb(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value)
