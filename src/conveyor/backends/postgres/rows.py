"""Between rows and Conveyor's types: the SQL text and the parameters it takes."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from conveyor.backends.claiming import claim_rank
from conveyor.backends.codec import job_from_row as decode_row
from conveyor.backends.filtering import ascii_lower
from conveyor.backends.params import JobFilter
from conveyor.backends.sqlfiles import load_queries
from conveyor.model.job import Job


def load_schema_queries(schema: str, channel: str, done_channel: str = "") -> dict[str, str]:
    """The named queries with the schema and channels filled in, as quoted identifiers.

    Both names are validated (lower-case letters, digits, _), so quoting is exact.
    Plain replacement rather than str.format: SQL is full of braces."""
    queries = load_queries(__package__ or "conveyor.backends.postgres")
    return {
        name: text.replace("{schema}", f'"{schema}"')
        .replace("{channel}", f'"{channel}"')
        .replace("{done_channel}", f'"{done_channel}"')
        for name, text in queries.items()
    }


@dataclass(frozen=True, slots=True)
class Positional:
    """A query in the server's placeholders ($1, $2 ...) and the names of its
    parameters in that order, for a raw cursor, which sends the text as it is.
    psycopg turns named placeholders into these on every call once a text is longer
    than it caches (4,096 bytes): the claims are, and that parse was a good share of
    each claim's client CPU (docs/performance.md)."""

    sql: str
    names: tuple[str, ...]

    def args(self, params: Mapping[str, Any]) -> list[Any]:
        return [params[name] for name in self.names]


def positional(sql: str) -> Positional:
    """`sql` with each %(name)s as $n (one n per name, as psycopg numbers them)."""
    names: list[str] = []

    def number(found: re.Match[str]) -> str:
        if found.group(1) is None:
            return "%"  # %% is a literal %
        if found.group(1) not in names:
            names.append(found.group(1))
        return f"${names.index(found.group(1)) + 1}"

    return Positional(re.sub(r"%\((\w+)\)s|%%", number, sql), tuple(names))


def job_from_row(row: Sequence[Any], start: int = 0) -> Job:
    """A Job from a row whose columns from `start` are seq, then codec.COLUMNS."""
    return decode_row(row[start + 1 :])


def claim_order(row: Sequence[Any]) -> tuple[int, float, int]:
    """RETURNING has no order: sort claimed rows (seq, then codec.COLUMNS) in claim
    order (conveyor.backends.claiming.claim_rank), then by insertion."""
    priority, at = claim_rank(row[6], row[9], row[25])
    return (-priority, at, row[0])


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
