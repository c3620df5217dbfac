"""The hot statements reach jobs through indexes whatever the table's size: no
sequential scan of the jobs table, so their cost does not grow with the number of
waiting, finished or dead jobs. (At 10,000 rows the planner once chose a hash join
over a full scan for the claim.)"""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
import pytest

from conveyor.backends.claiming import strict_claim
from conveyor.backends.postgres.backend import PostgresBackend
from conveyor.model.job import NewJob

FILL = """INSERT INTO "{schema}".jobs (id, queue, task, payload, state, max_attempts, run_at,
 created_at, finished_at, lease_expires_at, attempt)
SELECT 'j' || g, 'q', 't', '{{}}',
       CASE WHEN g <= 200 THEN 'available' WHEN g <= 300 THEN 'running'
            WHEN g %% 10 = 1 THEN 'dead' WHEN g %% 10 = 2 THEN 'scheduled' ELSE 'completed' END,
       20, 1e9, 0, CASE WHEN g > 300 AND g %% 10 <> 2 THEN 1 END,
       CASE WHEN g > 200 AND g <= 300 THEN 1e9 END, 1
FROM generate_series(1, %(total)s) AS g"""


def scans(plan: dict[str, Any]) -> list[str]:
    found = [f"{plan['Node Type']} {plan.get('Relation Name', '')}".strip()]
    for child in plan.get("Plans", []):
        found += scans(child)
    return found


@pytest.mark.parametrize("total", [2_000, 20_000])
async def test_hot_statements_never_scan_the_jobs_table(
    pg_url: str, schema: str, admin_conn: psycopg.Connection, total: int
) -> None:
    backend = PostgresBackend(pg_url)
    try:
        await backend.migrate()
        admin_conn.execute(FILL.format(schema=schema), {"total": total})
        admin_conn.execute(f'ANALYZE "{schema}".jobs')
        running = [f"j{i}" for i in range(201, 251)]
        statements = {
            "stage_due_jobs": {"now": 1e9},
            "claim_jobs": {
                "queues": ["q", "other"],
                "quotas": [60, 40],
                "ceilings": [100, 100],
                "limit": 100,
                "now": 1e9,
                "worker_id": "w",
                "lease_expires_at": 2e9,
            },
            "find_leases": {"expired_before": 1.5, "worker_ids": ["w"], "limit": 1000},
            "heartbeat_jobs": {"ids": running, "tokens": [0] * 50, "lease_expires_at": 2e9},
            "settle_jobs": {
                "now": 1e9,
                "ids": running,
                "tokens": [0] * 50,
                "states": ["completed"] * 50,
                "results": [None] * 50,
                "errors": [None] * 50,
                "run_ats": [None] * 50,
                "refunds": [False] * 50,
                "result_ttls": [None] * 50,
                "version": "test",
                "done_channel": "d",
            },
            "prune_jobs": {"completed_before": 0.5, "dead_before": 0.5, "now": 1e9, "limit": 1000},
            "expire_results": {"now": 1e9, "limit": 1000},
        }
        for name, params in statements.items():
            with admin_conn.transaction(force_rollback=True):
                # Ignored for mypy: the statements' params dict is typed object
                row = admin_conn.execute(  # type: ignore[call-overload]
                    "EXPLAIN (FORMAT JSON) " + backend._state.queries[name], params
                ).fetchone()
            assert row is not None
            plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
            nodes = scans(plan[0]["Plan"])
            assert "Seq Scan jobs" not in nodes, f"{name} at {total} rows: {nodes}"
            if name == "claim_jobs":
                # Claim order (priority aging included) is the index's order: each queue's
                # candidates are the first entries of its index range, read in order, not
                # a sort of the queue (migration 4); only those few candidates are ranked.
                assert "jobs_claim" in indexes(plan[0]["Plan"]), nodes
                assert not sorted_scans(plan[0]["Plan"]), nodes
            if name == "expire_results":  # by the expiry index, not the completed jobs
                assert "jobs_result_expiry" in indexes(plan[0]["Plan"]), nodes
    finally:
        await backend.close()


def sorted_scans(plan: dict[str, Any], under_sort: bool = False) -> list[str]:
    """Scans of the jobs table whose rows a sort orders (before a limit): what an index
    in claim order makes needless."""
    found = []
    if plan.get("Relation Name") == "jobs" and under_sort:
        found.append(plan["Node Type"])
    sort = under_sort or "Sort" in plan["Node Type"]
    if plan["Node Type"] in ("WindowAgg", "Aggregate", "Hash Join", "Nested Loop", "Hash"):
        sort = False  # a sort above these orders derived rows, not a table scan
    for child in plan.get("Plans", []):
        found += sorted_scans(child, sort)
    return found


def plan_of(conn: psycopg.Connection, statement: str, params: dict[str, Any]) -> dict[str, Any]:
    """The planner's plan of `statement` (EXPLAIN, in a transaction rolled back)."""
    with conn.transaction(force_rollback=True):
        row = conn.execute("EXPLAIN (FORMAT JSON) " + statement, params).fetchone()
    assert row is not None
    plan: dict[str, Any] = row[0][0]["Plan"]
    return plan


def indexes(plan: dict[str, Any]) -> set[str]:
    found = {plan["Index Name"]} if "Index Name" in plan else set()
    for child in plan.get("Plans", []):
        found |= indexes(child)
    return found


async def test_outcome_writes_and_heartbeats_cost_follows_the_batch_not_running_jobs(
    pg_url: str, schema: str, admin_conn: psycopg.Connection
) -> None:
    """With 20,000 jobs running (many workers), a batch of 50 finds its rows by id."""
    backend = PostgresBackend(pg_url)
    try:
        await backend.migrate()
        admin_conn.execute(
            f"""INSERT INTO "{schema}".jobs (id, queue, task, payload, state, max_attempts, run_at,
                created_at, lease_expires_at, attempt)
                SELECT 'j' || g, 'q', 't', '{{}}', 'running', 20, 0, 0, 1e9, 1
                FROM generate_series(1, 20000) AS g"""
        )
        admin_conn.execute(f'ANALYZE "{schema}".jobs')
        ids = [f"j{i}" for i in range(100, 150)]
        statements = {
            "heartbeat_jobs": {"ids": ids, "tokens": [0] * 50, "lease_expires_at": 2e9},
            "settle_jobs": {
                "now": 1e9,
                "ids": ids,
                "tokens": [0] * 50,
                "states": ["completed"] * 50,
                "results": [None] * 50,
                "errors": [None] * 50,
                "run_ats": [None] * 50,
                "refunds": [False] * 50,
                "result_ttls": [None] * 50,
                "version": "test",
                "done_channel": "d",
            },
        }
        for name, params in statements.items():
            plan = plan_of(admin_conn, backend._state.queries[name], params)
            assert "Seq Scan jobs" not in scans(plan), name
            assert "jobs_lease" not in indexes(plan) and "jobs_id_key" in indexes(plan), (
                name,
                indexes(plan),
            )
    finally:
        await backend.close()


async def test_a_fair_claim_reads_the_first_index_entries_and_no_key_table_scan(
    pg_url: str, schema: str, admin_conn: psycopg.Connection
) -> None:
    """Tenant fairness (migration 5): with 20,000 keyed jobs over 1,000 keys waiting,
    the claim still reads the first entries of jobs_claim in order (the vtime is an
    index column, not a sort), and the enqueue's reservation upserts each key's row by
    its primary key."""
    backend = PostgresBackend(pg_url)
    try:
        await backend.migrate()
        admin_conn.execute(
            f"""INSERT INTO "{schema}".jobs (id, queue, task, payload, state, max_attempts, run_at,
                created_at, fair_vtime)
                SELECT 'j' || g, 'q', 't', '{{}}', 'available', 20, 0, 0, 1000 * (g / 1000 + 1)
                FROM generate_series(1, 20000) AS g"""
        )
        admin_conn.execute(
            f"""INSERT INTO "{schema}".fair_keys (queue, key, last_vtime)
                SELECT 'q', 'tenant:' || g, 20000 FROM generate_series(1, 1000) AS g"""
        )
        admin_conn.execute(f"""INSERT INTO "{schema}".fair_queues VALUES ('q', 1000)""")
        for table in ("jobs", "fair_keys", "fair_queues"):
            admin_conn.execute(f'ANALYZE "{schema}".{table}')
        statements = {
            "claim_jobs": {
                "queues": ["q", "other"],
                "quotas": [60, 40],
                "ceilings": [100, 100],
                "limit": 100,
                "now": 1e9,
                "worker_id": "w",
                "lease_expires_at": 2e9,
            },
            "assign_fair_vtimes": {
                "schema": schema,
                "fair_queues": ["q", "q"],
                "fair_keys": ["tenant:7", "tenant:8"],
                "fair_steps": [1000, 1000],
            },
        }
        for name, params in statements.items():
            # Ignored for mypy: the statements' params dict is typed object
            plan = plan_of(admin_conn, backend._state.queries[name], params)  # type: ignore[arg-type]
            nodes = scans(plan)
            assert not {"Seq Scan jobs", "Seq Scan fair_keys"} & set(nodes), (name, nodes)
            if name == "claim_jobs":
                assert "jobs_claim" in indexes(plan) and not sorted_scans(plan), nodes
            else:  # an upsert of the batch's keys, not a read of every key's row
                assert plan["Conflict Arbiter Indexes"] == ["fair_keys_pkey"], plan
    finally:
        await backend.close()


async def test_the_rated_claim_reads_each_lane_from_its_index(
    pg_url: str, schema: str, admin_conn: psycopg.Connection
) -> None:
    """A claim that carries rate limits: 20,000 jobs of a throttled bucket ahead of a
    few hundred free ones in one queue. Each lane is the first entries of its index
    (jobs_claim for the free jobs, jobs_rate_claim for a bucket's), read in order; no
    scan of the table, no sort of a lane."""
    backend = PostgresBackend(pg_url)
    try:
        await backend.migrate()
        admin_conn.execute(
            f"""INSERT INTO "{schema}".jobs (id, queue, task, payload, state, max_attempts,
                run_at, created_at, rate_key)
                SELECT 'j' || g, 'q', 't', '{{}}', 'available', 20, g, 0,
                       CASE WHEN g <= 20000 THEN 'slow' END
                FROM generate_series(1, 20300) AS g"""
        )
        admin_conn.execute(
            f"""INSERT INTO "{schema}".rate_buckets VALUES ('slow', 0, 1e9, 0.001, 1),
                ('fast', 100, 1e9, 1000, 100)"""
        )
        admin_conn.execute(f'ANALYZE "{schema}".jobs')
        params = {
            "queues": ["q", "other"],
            "quotas": [60, 40],
            "ceilings": [100, 100],
            "limit": 100,
            "now": 1e9,
            "worker_id": "w",
            "lease_expires_at": 2e9,
            "rate_keys": ["slow", "fast"],
            "rates": [0.001, 1000.0],
            "bursts": [1, 100],
        }
        plan = plan_of(admin_conn, backend._state.queries["claim_rated_jobs"], params)
        assert "Seq Scan jobs" not in scans(plan), scans(plan)
        assert {"jobs_claim", "jobs_rate_claim"} <= indexes(plan), indexes(plan)
        assert not sorted_scans(plan), scans(plan)
    finally:
        await backend.close()


def generic_plan_of(
    conn: psycopg.Connection, session: str, statement: str, params: dict[str, Any]
) -> dict[str, Any]:
    """The plan a claim runs on: the statement prepared on a connection set up as the
    claim lane's (`session`), then its plan for the same values, with the generic plan
    forced (the parameters unknown to the planner). In a transaction rolled back, which
    also undoes the session's settings."""
    with conn.transaction(force_rollback=True):
        conn.execute(session.encode(), prepare=False)
        conn.execute(statement, params, prepare=True)
        row = conn.execute(
            "SELECT name, parameter_types::text[] FROM pg_prepared_statements "
            "WHERE NOT from_sql ORDER BY prepare_time DESC LIMIT 1"
        ).fetchone()
        assert row is not None
        name, types = row
        order: list[str] = []
        for found in re.finditer(r"%\((\w+)\)[sb]", statement):
            if found.group(1) not in order:
                order.append(found.group(1))
        args = ", ".join(f"%s::{t}" for t in types)
        cur = psycopg.ClientCursor(conn)
        cur.execute(f"EXPLAIN (FORMAT JSON) EXECUTE {name}({args})", [params[k] for k in order])
        explained = cur.fetchone()
    assert explained is not None
    assert conn.execute("SHOW plan_cache_mode").fetchone() == ("auto",)  # undone
    plan: dict[str, Any] = explained[0][0]["Plan"]
    return plan


@pytest.mark.parametrize("total", [2_000, 50_000])
async def test_the_claims_generic_plans_read_each_lane_from_its_index(
    pg_url: str, schema: str, admin_conn: psycopg.Connection, total: int
) -> None:
    """Claims run on their generic plans (the claim lane, queries.sql claim_session),
    planned without the request's values: those too are index walks of each lane, no
    scan of the table, no sort of a lane, at any size. Half the jobs name a throttled
    bucket, ahead of the free ones in claim order; half of each are fair."""
    backend = PostgresBackend(pg_url)
    try:
        await backend.migrate()
        admin_conn.execute(
            f"""INSERT INTO "{schema}".jobs (id, queue, task, payload, state, max_attempts,
                run_at, created_at, rate_key, fair_vtime)
                SELECT 'j' || g, CASE WHEN g %% 3 = 0 THEN 'q' ELSE 'other' END, 't', '{{}}',
                       'available', 20, g, 0, CASE WHEN g <= %(total)s / 2 THEN 'slow' END,
                       CASE WHEN g %% 2 = 0 THEN 1000 * (g %% 100 + 1) ELSE 0 END
                FROM generate_series(1, %(total)s) AS g""",
            {"total": total},
        )
        admin_conn.execute(
            f"""INSERT INTO "{schema}".rate_buckets VALUES ('slow', 0, 1e9, 0.001, 1),
                ('fast', 100, 1e9, 1000, 100)"""
        )
        admin_conn.execute(f'ANALYZE "{schema}".jobs')
        claim = {
            "queues": ["q", "other"],
            "quotas": [60, 40],
            "ceilings": [99, 99],
            "limit": 100,
            "now": 1e9,
            "worker_id": "w",
            "lease_expires_at": 2e9,
        }
        rated = {
            **claim,
            "rate_keys": ["slow", "fast"],
            "rates": [0.001, 1000.0],
            "bursts": [1, 100],
        }
        for name, params, lanes in (
            ("claim_jobs", claim, {"jobs_claim"}),
            ("claim_rated_jobs", rated, {"jobs_claim", "jobs_rate_claim"}),
        ):
            plan = generic_plan_of(
                admin_conn,
                backend._state.queries["claim_session"],
                backend._state.queries[name],
                params,
            )
            assert "Seq Scan jobs" not in scans(plan), (name, scans(plan))
            assert lanes <= indexes(plan), (name, indexes(plan))
            assert not sorted_scans(plan), (name, scans(plan))
    finally:
        await backend.close()


async def test_claims_run_on_the_claim_lane_and_other_verbs_keep_custom_plans(
    pg_url: str, schema: str
) -> None:
    """The claim lane's connection has generic plans and no JIT; the pool's, which
    serve the admin filters, keep the server's defaults."""
    backend = PostgresBackend(pg_url)
    try:
        await backend.migrate()
        await backend.enqueue_jobs(
            [NewJob(id=f"j{n}", task="t", payload="{}", queue="q") for n in range(3)]
        )
        for n in range(3):
            claimed = await backend.fetch_jobs(strict_claim(["q"], 1, "w", 30.0))
            assert [job.id for job in claimed] == [f"j{n}"]

        async def settings(conn: Any) -> list[tuple[Any, ...]]:
            cur = await conn.execute(
                "SELECT current_setting('plan_cache_mode'), current_setting('jit')"
            )
            return list(await cur.fetchall())

        assert await backend._state.claim_connection.run(settings) == [
            ("force_generic_plan", "off")
        ]
        pooled = await backend._state.run(settings)
        assert pooled[0][0] == "auto", pooled
    finally:
        await backend.close()
