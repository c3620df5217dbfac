"""Conveyor: background jobs for Python that are hard to lose.

>>> from conveyor import Conveyor
>>> app = Conveyor("sqlite:///jobs.db")
>>> @app.task
... def add(a: int, b: int) -> int:
...     return a + b
>>> add.enqueue(1, 2).result(timeout=10)   # with `conveyor worker myapp:app` running
3
"""

from conveyor.app import Conveyor
from conveyor.context import JobContext, current_job
from conveyor.model.errors import ConveyorError
from conveyor.model.job import Job, JobState
from conveyor.model.outcomes import Cancel, Retry, Snooze
from conveyor.model.version import __version__
from conveyor.rules.adaptive import Adaptive
from conveyor.rules.breakers import BreakerError
from conveyor.rules.retry_budget import RetryBudget
from conveyor.rules.task_options import Limits, PayloadOptions, RetryOptions
from conveyor.task import Task
from conveyor.workflows.canvas import chain, chord, group
from conveyor.workflows.inputs import Failure

__all__ = [
    "Adaptive",
    "BreakerError",
    "Cancel",
    "Conveyor",
    "ConveyorError",
    "Failure",
    "Job",
    "JobContext",
    "JobState",
    "Limits",
    "PayloadOptions",
    "Retry",
    "RetryBudget",
    "RetryOptions",
    "Snooze",
    "Task",
    "__version__",
    "chain",
    "chord",
    "current_job",
    "group",
]
