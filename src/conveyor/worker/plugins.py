"""The features a worker runs, as plug-ins (conveyor.plugins). The one list of them:
a new rule that needs the worker (a downstream guard, say) is a `WorkerPlugin` beside
its state, added here; the executor, the producer and `Worker.run` only loop over
the plugins."""

from __future__ import annotations

from typing import TYPE_CHECKING

from conveyor.downstreams.plugins import AdaptivePlugin, BreakerPlugin, RetryBudgetPlugin
from conveyor.payloads.result_expiry import ResultExpiry
from conveyor.plugins import WorkerPlugin
from conveyor.rules.adaptive import Adaptive
from conveyor.rules.retry_budget import RetryBudget
from conveyor.workflows.plugin import WorkflowInputs

if TYPE_CHECKING:
    from conveyor.worker.app_protocol import WorkerApp
    from conveyor.worker.config import WorkerConfig


def feature_plugins(app: WorkerApp, config: WorkerConfig) -> list[WorkerPlugin]:
    """The built-in features, in the order their hooks run."""

    def budget_of(task_name: str) -> RetryBudget | None:
        task = app.tasks.get(task_name)
        return None if task is None else task.defaults.retry.budget

    def adaptive_of(task_name: str) -> Adaptive | None:
        task = app.tasks.get(task_name)
        rule = None if task is None else task.defaults.concurrency
        return None if rule is None else rule.adaptive

    def adaptive_rules() -> list[Adaptive]:
        return [rule for name in app.tasks if (rule := adaptive_of(name)) is not None]

    def clock() -> float:  # the app's clock of the moment (rebind may replace it)
        return app.clock()

    return [
        WorkflowInputs(app.backend, app.claim_check),
        RetryBudgetPlugin(
            budget_of, lambda: any(budget_of(name) is not None for name in app.tasks)
        ),
        BreakerPlugin(app.breakers, app.backend, clock),
        AdaptivePlugin(adaptive_of, adaptive_rules, clock),
        ResultExpiry(app.claim_check, config.prune_interval),
    ]
