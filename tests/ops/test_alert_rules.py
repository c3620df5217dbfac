"""The shipped alert rules, Grafana dashboard and autoscaling example name only
metrics Conveyor exports, and the rules pass promtool (Debian's `prometheus`
package; .ci/run installs it): `check rules`, and `test rules`, which shows each
alert firing when it should and not before."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from backends_under_test import service_missing
from prometheus_client import CollectorRegistry

from conveyor.admin.api import WorkerInfo
from conveyor.backends.params import QueueStats
from conveyor.model.job import Job, JobState
from conveyor.observe.metrics import JobMetrics
from conveyor.ops.queue_state import _Snapshot
from conveyor.rules.breakers import BreakerState

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "conveyor-alerts.yml"
RULE_TESTS = DEPLOY / "prometheus" / "conveyor-alerts.test.yml"
DASHBOARD = DEPLOY / "grafana" / "conveyor-dashboard.json"
KEDA = DEPLOY / "keda" / "worker-scaledobject.yaml"
METRIC = re.compile(r"\bconveyor_[a-z_]+\b")


def exported_names() -> set[str]:
    """Every sample name a worker, a producer and the dashboard's /metrics export."""
    registry = CollectorRegistry()
    metrics = JobMetrics(registry)
    job = Job(
        id="j",
        task="t",
        queue="q",
        payload="{}",
        state=JobState.RUNNING,
        started_at=1.0,
        run_at=0.5,
    )
    metrics.observe_outcome(job, ("failed", "retried", "dead", "completed"), "KeyError", 0.1)
    metrics.enqueued.labels("q", "t").inc()
    metrics.in_flight.labels("q", "t").set(0)
    metrics.scheduler_lag.set(0)
    registry.register(
        _Snapshot(
            [QueueStats("q", {JobState.AVAILABLE: 1}, oldest_available_age=3.0)],
            [WorkerInfo("w", "h", 1, ("q",), 4, 0, 0.0, 0.0, "v", False)],
            {"b": BreakerState()},
        )
    )
    return {s.name for family in registry.collect() for s in family.samples}


def names_in_yaml(path: Path) -> set[str]:
    """Metric names in a YAML file's text, comments left out (a commented rule names
    a metric that does not exist yet)."""
    text = "\n".join(
        line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")
    )
    return set(METRIC.findall(text))


def names_in_dashboard() -> set[str]:
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("expr", "definition") and isinstance(value, str):
                    found.update(METRIC.findall(value))
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(json.loads(DASHBOARD.read_text()))
    return found


def test_every_metric_the_rules_dashboard_and_autoscaler_name_is_exported() -> None:
    exported = exported_names()
    in_rules, in_dashboard, in_keda = (
        names_in_yaml(RULES),
        names_in_dashboard(),
        names_in_yaml(KEDA),
    )
    assert {
        "conveyor_queue_dead_letter_jobs",
        "conveyor_queue_oldest_waiting_seconds",
        "conveyor_jobs_failed_total",
        "conveyor_workers_up",
    } <= in_rules
    assert len(in_dashboard) >= 12
    assert in_keda == {"conveyor_queue_oldest_waiting_seconds"}
    assert in_rules - exported == set()
    assert in_dashboard - exported == set()
    assert in_keda - exported == set()


def test_the_dashboard_panels_are_well_formed() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for p in dashboard["panels"]:
        assert p["targets"] and all(t["expr"] for t in p["targets"]), p["title"]
        assert p["datasource"]["uid"] == "${datasource}"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        service_missing("promtool not installed: apt-get install prometheus")
    assert found is not None
    return found


def test_the_alert_rules_pass_promtool() -> None:
    tool = promtool()
    check = subprocess.run(
        [tool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 6 rules found" in check.stdout
    tested = subprocess.run(
        [tool, "test", "rules", RULE_TESTS.name],
        cwd=RULE_TESTS.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
