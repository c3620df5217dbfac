"""result_ttl across processes (docs/workflows.md#results): a worker process stores
the expiry as it completes the job; once it passes, a reader in this process is
refused the result with ResultExpired, and a prune run in a third process clears it
(and only it: the job stays listed, completed)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from acceptance_support import HERE, Runs, WorkerProcess

from conveyor.model.errors import ResultExpired
from conveyor.model.job import JobState

pytestmark = pytest.mark.slow

PRUNE = (
    "import asyncio\n"
    "from jobs_app import app\n"
    "asyncio.run(app.admin.prune(completed_before=0, dead_before=0))\n"
    "app.close()\n"
)


def test_a_result_expires_after_its_ttl_and_a_prune_in_another_process_clears_it(
    url: str, runs: Runs, workers: list[WorkerProcess]
) -> None:
    from jobs_app import app, kept_briefly

    workers.append(WorkerProcess(url, runs.path, "-c", "1", "--poll", "0.05"))
    app.rebind(url)
    try:
        handle = kept_briefly.enqueue("kept")
        deadline = time.monotonic() + 60
        job = handle.refresh()
        while job.state is not JobState.COMPLETED:  # polled: the result may expire first
            assert time.monotonic() < deadline, f"still {job.state.value}"
            time.sleep(0.05)
            job = handle.refresh()
        assert job.finished_at is not None and job.result_expires_at == job.finished_at + 1.0
        while True:  # the worker's clock set the expiry; this process's clock reaches it
            try:
                handle.result(timeout=5)
            except ResultExpired:
                break
            assert time.monotonic() < deadline, "the result never expired"
            time.sleep(0.05)
        env = {
            **os.environ,
            "CONVEYOR_URL": url,
            "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        }
        subprocess.run([sys.executable, "-c", PRUNE], env=env, cwd=HERE, check=True, timeout=60)
        job = handle.refresh()
        assert job.state is JobState.COMPLETED and job.result is None
        with pytest.raises(ResultExpired):
            _ = job.result_value
    finally:
        app.close()
