"""`conveyor dashboard`, and `conveyor worker --log-format json --metrics-port`."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import urllib.error
import urllib.request

from cli_harness import HERE, Cli, wait_until

from conveyor import Conveyor
from conveyor.model.job import JobState


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""  # not listening yet


def test_dashboard_refuses_to_listen_off_localhost_without_auth(cli: Cli) -> None:
    result = cli("dashboard", "example_app:app", "--host", "0.0.0.0", timeout=60)
    assert result.code == 2
    assert result.err.startswith(
        "conveyor: error: refusing to listen on 0.0.0.0 without authentication"
    )
    assert len(result.err.strip().splitlines()) == 1
    short = cli("dashboard", "--url", cli.url, "--host", "0.0.0.0", "--token", "short")
    assert short.code == 2 and "at least 16 characters" in short.err
    env = {**cli.env, "CONVEYOR_DASHBOARD_BASIC_AUTH": "no-colon"}
    assert "USER:PASSWORD" in cli("dashboard", "example_app:app", env=env).err


def test_dashboard_serves_with_a_token_from_the_environment(cli: Cli) -> None:
    job_id = cli.enqueue("add", "1", "2")
    port = free_port()
    token = "a-token-that-is-long-enough"
    env = {**cli.env, "CONVEYOR_DASHBOARD_TOKEN": token}
    proc = subprocess.Popen(
        [*cli.command(), "dashboard", "example_app:app", "--port", str(port), "--host", "0.0.0.0"],
        cwd=HERE,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: get(base + "/")[0] == 401, "the dashboard listening")
        auth = {"Authorization": f"Bearer {token}"}
        status, body = get(f"{base}/jobs/{job_id}", auth)
        assert status == 200 and '<span class="badge st-available big" id="job-state">' in body
        status, body = get(base + "/metrics", auth)
        assert 'conveyor_queue_jobs{queue="default",state="available"} 1.0' in body.splitlines()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    # A graceful stop; uvicorn (0.29+) then re-raises the signal it caught.
    assert proc.returncode in (0, -signal.SIGTERM), out
    assert "Application shutdown complete." in out
    assert f"dashboard for {cli.url} on http://0.0.0.0:{port}/" in out
    assert token not in out  # the secret never reaches the logs


def test_worker_json_logs_and_metrics_port(cli: Cli, inspector: Conveyor) -> None:
    add = cli.enqueue("add", "2", "3")
    poison = cli.enqueue("parse_total", "twelve")
    port = free_port()
    worker = cli.start_worker("--poll", "0.1", "--log-format", "json", "--metrics-port", str(port))
    wait_until(
        lambda: (
            inspector.jobs.get(poison).state is JobState.DEAD  # type: ignore[union-attr]
            and inspector.jobs.get(add).state is JobState.COMPLETED  # type: ignore[union-attr]
        ),
        "both jobs finished",
    )
    status, body = get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    lines = body.splitlines()
    assert 'conveyor_jobs_completed_total{queue="default",task="add"} 1.0' in lines
    assert (
        'conveyor_jobs_failed_total{error_type="ValueError",queue="default",task="parse_total"} 1.0'
    ) in lines
    assert 'conveyor_jobs_dead_total{queue="default",task="parse_total"} 1.0' in lines
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.log()

    records = [json.loads(line) for line in worker.log().splitlines() if line.strip()]
    assert all({"ts", "level", "logger", "message"} <= set(r) for r in records)
    failed = [r for r in records if r.get("job_id") == poison]
    assert len(failed) == 1
    assert failed[0]["task"] == "parse_total" and failed[0]["queue"] == "default"
    assert failed[0]["attempt"] == 1 and failed[0]["correlation_id"] == poison
    assert failed[0]["level"] == "warning" and "ValueError" in failed[0]["message"]
    # Arguments are not logged: "twelve" appears only where the handler's own error
    # message quotes it (ValueError: could not convert string to float: 'twelve').
    quoting = [r for r in records if "twelve" in json.dumps(r)]
    assert quoting == failed and "could not convert" in failed[0]["message"]
    assert any(r["message"].startswith("metrics on http://127.0.0.1:") for r in records)


def test_worker_metrics_port_in_use_is_a_usage_error(cli: Cli) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        result = cli("worker", "example_app:app", "--metrics-port", str(busy.getsockname()[1]))
    assert result.code == 2 and "cannot serve metrics on 127.0.0.1:" in result.err


def test_a_pool_serves_its_childrens_metrics_on_one_port_and_logs_json(
    cli: Cli, inspector: Conveyor, tmp_path: object
) -> None:
    adds = [cli.enqueue("add", str(n), "1") for n in range(6)]
    poison = cli.enqueue("parse_total", "twelve")
    port = free_port()
    worker = cli.start_worker(
        "-p", "2", "-c", "2", "--poll", "0.1", "--log-format", "json", "--metrics-port", str(port)
    )
    wait_until(
        lambda: (
            all(inspector.jobs.get(j).state is JobState.COMPLETED for j in adds)  # type: ignore[union-attr]
            and inspector.jobs.get(poison).state is JobState.DEAD  # type: ignore[union-attr]
        ),
        "6 jobs completed and 1 dead by the pool",
    )

    def completed() -> float:
        status, body = get(f"http://127.0.0.1:{port}/metrics")
        for line in body.splitlines() if status == 200 else []:
            if line.startswith('conveyor_jobs_completed_total{queue="default",task="add"}'):
                return float(line.split()[-1])
        return 0.0

    # Summed over both children (each counts in its own file of the shared folder).
    wait_until(lambda: completed() == 6.0, "6 completions on the pool's one metrics port")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.log()
    # Supervisor and children alike write JSON lines; the child's line about the dead
    # job names it.
    records = [json.loads(line) for line in worker.log().splitlines() if line.strip()]
    [failed] = [r for r in records if r.get("job_id") == poison]
    assert failed["task"] == "parse_total" and failed["attempt"] == 1
    assert failed["logger"] == "conveyor.worker" and failed["level"] == "warning"
    assert any(r["logger"] == "conveyor.pool" for r in records)


def test_a_pool_childs_text_lines_name_the_child_and_the_job(cli: Cli, inspector: Conveyor) -> None:
    poison = cli.enqueue("parse_total", "twelve")
    worker = cli.start_worker("-p", "1", "-c", "1", "--poll", "0.1")
    wait_until(lambda: inspector.jobs.get(poison).state is JobState.DEAD, "the pool to run the job")  # type: ignore[union-attr]
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.log()
    # The pool's children log as a single worker does (the same set-up), plus their pid.
    [failed] = [line for line in worker.log().splitlines() if f"[job={poison} " in line]
    assert re.search(r" WARNING \[child \d+\] conveyor\.worker: .*ValueError", failed), failed
    assert failed.endswith(
        f"[job={poison} task=parse_total queue=default attempt=1 correlation={poison}]"
    ), failed
