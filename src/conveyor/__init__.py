"""Conveyor: background jobs for Python that are hard to lose.

>>> from conveyor import Conveyor
>>> app = Conveyor("sqlite:///jobs.db")
>>> @app.task
... def add(a: int, b: int) -> int:
...     return a + b
>>> add.enqueue(1, 2).result(timeout=10)   # with `conveyor worker myapp:app` running
3
"""

from .adaptive import Adaptive
from .app import Conveyor
from .breakers import BreakerError
from .errors import ConveyorError
from .job import Job, JobState
from .outcomes import Cancel, Retry, Snooze
from .retry_budget import RetryBudget
from .task import Task
from .version import __version__
from .job_context import JobContext, current_job
from .workflow_inputs import Failure
from .workflows import chain, chord, group

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
    "Retry",
    "RetryBudget",
    "Snooze",
    "Task",
    "__version__",
    "chain",
    "chord",
    "current_job",
    "group",
]
