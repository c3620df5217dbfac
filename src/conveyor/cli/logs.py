"""Logging for long-running commands (worker, demo): one line per record on stderr."""

from __future__ import annotations

import logging
import sys

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")


def configure_logging(level: str = "info", log_format: str = "text") -> None:
    """Send every logger (Conveyor's and the tasks' own) to stderr, timestamped in UTC.
    Lines logged while a job runs carry its id, task, queue, attempt and correlation
    id (conveyor.logs): as a `[job=...]` suffix in text, as fields in JSON."""
    from ..logs import configure_logging as configure_structured

    configure_structured(level, log_format)


def flush_all() -> None:
    """Flush log handlers and stdio; call before `os._exit`, which skips both."""
    for handler in logging.getLogger().handlers:
        handler.flush()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or broken pipe: nothing more to save
            pass
