"""The job context's first home, still importable from here: it lives in
`conveyor.job_context`, below the worker, so that code a handler calls (the
scheduler's `scheduled_run()`, say) can reach it without importing the worker."""

from ..job_context import _CURRENT as _CURRENT
from ..job_context import JobContext, current_job

__all__ = ["JobContext", "current_job"]
