"""Core maintenance services that run inside workers: the periodic scheduler.

>>> from conveyor.maintenance import scheduled_run   # in a scheduled job's handler
"""

from .schedules import Schedule, ScheduledRun, scheduled_run
from .scheduler import Scheduler

__all__ = ["Schedule", "ScheduledRun", "Scheduler", "scheduled_run"]
