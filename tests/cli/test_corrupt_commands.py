"""A worker process next to corrupt jobs, and the commands that show them.

The jobs' stored fields are damaged behind Conveyor's back (raw SQL on the test's
SQLite file): a meta that is not UTF-8, a payload nested 100,000 deep, a state that
does not exist. The worker runs the healthy jobs and kills the corrupt ones at
once; `jobs list`, `jobs show` and `stats` answer instead of failing.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal

from cli_harness import Cli, wait_until
from conformance.raw_store import RawValue, SqliteRawStore

from conveyor import Conveyor
from conveyor.model.job import JobState

DEEP = "[" * 100_000 + "]" * 100_000


def corrupt(url: str, job_id: str, field: str, value: RawValue) -> None:
    async def write() -> None:
        store = SqliteRawStore(url)
        try:
            assert await store.write(job_id, field, value)
        finally:
            await store.close()

    asyncio.run(write())


def test_a_worker_and_the_commands_next_to_corrupt_jobs(
    cli: Cli, inspector: Conveyor, db_url: str
) -> None:
    healthy = [cli.enqueue("add", str(n), "1") for n in range(3)]
    bad_meta, deep, odd = (cli.enqueue("add", "7", "7") for _ in range(3))
    corrupt(db_url, bad_meta, "meta", b"\xff\xfe")
    corrupt(db_url, deep, "payload", DEEP)
    corrupt(db_url, odd, "state", "paused")

    worker = cli.start_worker("-c", "4", "--poll", "0.1")
    wait_until(
        lambda: all(inspector.jobs.get(j).is_finished for j in [*healthy, bad_meta, deep]),  # type: ignore[union-attr]
        "the healthy and the corrupt jobs finished",
    )
    later = cli.enqueue("add", "40", "2")  # the worker keeps claiming
    wait_until(lambda: inspector.jobs.get(later).is_finished, "a job enqueued afterwards ran")  # type: ignore[union-attr]
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    for job_id in [*healthy, later]:
        assert inspector.jobs.get(job_id).state is JobState.COMPLETED  # type: ignore[union-attr]
    meta_job, deep_job = inspector.jobs.get(bad_meta), inspector.jobs.get(deep)
    assert (meta_job.state, meta_job.attempt, meta_job.errors[-1].type) == (  # type: ignore[union-attr]
        JobState.DEAD,
        1,
        "CorruptJob",
    )
    assert (deep_job.state, deep_job.attempt, deep_job.errors[-1].type) == (  # type: ignore[union-attr]
        JobState.DEAD,
        1,
        "CorruptPayload",
    )
    assert "nested too deeply" in deep_job.errors[-1].message  # type: ignore[union-attr]
    assert f"job {bad_meta} (add) cannot be read, so it is not run" in worker.log()

    listing = cli("jobs", "list").ok().out
    [meta_row] = [line for line in listing.splitlines() if line.startswith(bad_meta)]
    assert "dead (corrupt)" in meta_row and "CorruptJob" in meta_row
    [odd_row] = [line for line in listing.splitlines() if line.startswith(odd)]
    assert "dead (corrupt)" in odd_row and "cannot be read: state: unknown state" in odd_row
    lines = [json.loads(line) for line in cli("jobs", "list", "--json").ok().out.splitlines()]
    assert {d["id"]: d["corrupt"] is not None for d in lines} == {
        **{j: False for j in [*healthy, later, deep]},
        bad_meta: True,
        odd: True,
    }
    shown = cli("jobs", "show", deep).ok().out
    [args_line] = [line for line in shown.splitlines() if line.startswith("args ")]
    assert args_line.endswith(
        "(payload does not decode) " + "[" * 2000 + "… (198,000 more characters)"
    )
    # The label's column is as wide as the longest label shown (not fixed here).
    assert re.search(
        r"^corrupt +the stored record cannot be read in full: meta: not valid "
        "UTF-8",
        cli("jobs", "show", bad_meta).ok().out,
        re.MULTILINE,
    )
    assert cli("jobs", "show", deep, "--json").ok().out  # data, in full
    stats = cli("stats").ok().out
    assert "default" in stats
    dead = cli("jobs", "list", "--state", "dead", "--error-type", "CorruptPayload").ok().out
    assert [line.split()[0] for line in dead.splitlines()[1:]] == [deep]
