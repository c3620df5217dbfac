"""Core maintenance services that run inside workers: the periodic scheduler.

>>> from conveyor.scheduling import scheduled_run   # in a scheduled job's handler
"""

from conveyor.scheduling.scheduler import Scheduler
from conveyor.scheduling.schedules import Schedule, ScheduledRun, scheduled_run

__all__ = ["Schedule", "ScheduledRun", "Scheduler", "scheduled_run"]
