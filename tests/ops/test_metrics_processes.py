"""/metrics served by a worker process, and several processes in multiprocess mode."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from conveyor.observe.metrics import default_metrics, serve_metrics


def test_a_process_serves_its_own_metrics_on_a_port() -> None:
    server = serve_metrics(0)
    try:
        default_metrics().enqueued.labels("port-test", "t").inc(3)
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as r:
            body = r.read().decode()
        assert 'conveyor_jobs_enqueued_total{queue="port-test",task="t"} 3.0' in body
        assert "# TYPE conveyor_job_run_seconds histogram" in body
    finally:
        server.close()


CHILD = """
import sys
from conveyor.observe.metrics import default_metrics
m = default_metrics()
m.completed.labels("mail", "send").inc(int(sys.argv[1]))
m.in_flight.labels("mail", "send").inc(int(sys.argv[1]))
if sys.argv[2] == "clean":  # what `conveyor worker` does on its way out
    from conveyor.observe.metrics import mark_process_dead
    mark_process_dead()
"""

READER = """
from prometheus_client import generate_latest
from conveyor.observe.metrics import exposition_registry
print(generate_latest(exposition_registry()).decode())
"""


def test_multiprocess_mode_adds_up_every_process(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for n, exit_kind in (("2", "clean"), ("5", "crashed")):
        subprocess.run([sys.executable, "-c", CHILD, n, exit_kind], env=env, check=True, timeout=60)
    out = subprocess.run(
        [sys.executable, "-c", READER],
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    ).stdout
    assert 'conveyor_jobs_completed_total{queue="mail",task="send"} 7.0' in out.splitlines()
    # In-flight sums the processes not marked dead: a crashed one stays until its pid's
    # files are cleaned (clear the directory when the service restarts).
    assert 'conveyor_jobs_in_flight{queue="mail",task="send"} 5.0' in out.splitlines()
