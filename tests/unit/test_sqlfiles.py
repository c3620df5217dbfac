"""The queries loader: named queries, and fragments spliced into them."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from conveyor.backends.sqlfiles import load_queries


@pytest.fixture
def queries_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], str]:
    """Writes `sql` as the queries.sql of a new importable package; returns its name."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(sql: str) -> str:
        name = f"queries_{uuid.uuid4().hex}"  # imported packages stay in sys.modules
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
        (tmp_path / name / "queries.sql").write_text(sql)
        return name

    return write


def test_a_fragment_is_spliced_into_every_query_that_names_it(
    queries_package: Callable[[str], str],
) -> None:
    package = queries_package("""
-- fragment: only_red
-- Said once here; this comment stays out of the queries.
colour = 'red'

-- name: list_red
SELECT id FROM things WHERE {only_red} ORDER BY id;

-- name: count_red
SELECT count(*) FROM things WHERE {only_red}
""")
    assert load_queries(package) == {
        "list_red": "SELECT id FROM things WHERE colour = 'red' ORDER BY id",
        "count_red": "SELECT count(*) FROM things WHERE colour = 'red'",
    }


def test_an_unused_fragment_is_an_error_naming_it(queries_package: Callable[[str], str]) -> None:
    package = queries_package("""
-- fragment: only_red
colour = 'red'

-- name: list_all
SELECT id FROM things
""")
    with pytest.raises(ValueError, match="fragment 'only_red' is not used"):
        load_queries(package)


def test_a_name_defined_twice_is_an_error(queries_package: Callable[[str], str]) -> None:
    package = queries_package("""
-- fragment: things
id
-- name: things
SELECT {things} FROM things
""")
    with pytest.raises(ValueError, match="'things' defined twice"):
        load_queries(package)


def test_comment_lines_stay_out_of_the_queries(queries_package: Callable[[str], str]) -> None:
    """A query's own comments are not sent: psycopg caches its parsing of a query only
    up to 4,096 bytes (the plain claim's comments took it past that)."""
    package = queries_package("""
-- name: list_red
-- Why red: said here, not sent with each call.
SELECT id FROM things
    -- nor this one
WHERE colour = 'red' -- a trailing comment ends at its line
""")
    assert load_queries(package) == {
        "list_red": (
            "SELECT id FROM things\nWHERE colour = 'red' -- a trailing comment ends at its line"
        ),
    }
