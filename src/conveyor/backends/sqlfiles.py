"""Load SQL kept in `.sql` files: named queries and numbered migrations.

A queries file holds blocks headed `-- name: some_query`; the text up to the
next header is that query. A block headed `-- fragment: some_part` is not a query
but a piece several queries share (a filter, a column list): each query writes it
as `{some_part}` and gets the text spliced in at load, so the piece is written once
and the queries cannot drift apart. Migrations are files named `NNNN_description.sql`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

_HEADER = re.compile(r"^--\s*(name|fragment):\s*(\w+)\s*$", re.MULTILINE)
_COMMENT_LINE = re.compile(r"^\s*--.*\n?", re.MULTILINE)
_MIGRATION = re.compile(r"^(\d{4})_\w+\.sql$")


def load_queries(package: str, filename: str = "queries.sql") -> dict[str, str]:
    where = f"{package}/{filename}"
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    parts = _HEADER.split(text)
    queries: dict[str, str] = {}
    fragments: dict[str, str] = {}
    for kind, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        if name in queries or name in fragments:
            raise ValueError(f"{where}: {name!r} defined twice")
        if kind == "fragment":
            # Its comments describe the fragment; spliced mid-line, a trailing one
            # would comment out the rest of the query.
            fragments[name] = _COMMENT_LINE.sub("", body).strip()
        else:
            # Its comments stay out of it too: psycopg caches its parsing of a query
            # text only up to 4,096 bytes, and the comments took the plain claim past
            # that (it was parsed again on every call; docs/performance.md).
            queries[name] = _COMMENT_LINE.sub("", body).strip().rstrip(";")
    texts = [*queries.values(), *fragments.values()]
    for name in fragments:
        placeholder = "{" + name + "}"
        if not any(placeholder in text for text in texts):
            raise ValueError(
                f"{where}: fragment {name!r} is not used by any query (write it as {placeholder})"
            )
    # A fragment may use other fragments, defined before or after it.
    for _ in range(len(fragments)):
        for name, fragment in fragments.items():
            for other, text in fragments.items():
                fragments[other] = text.replace("{" + name + "}", fragment)
    for name, fragment in fragments.items():
        placeholder = "{" + name + "}"
        for query, sql in queries.items():
            queries[query] = sql.replace(placeholder, fragment)
    return queries


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations(package: str) -> list[Migration]:
    folder = resources.files(package).joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        match = _MIGRATION.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), entry.name, entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise ValueError(f"{package}: migrations must be numbered 1..N without gaps: {versions}")
    return found
