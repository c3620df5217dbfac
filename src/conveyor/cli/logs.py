"""Logging for long-running commands (worker, demo): one line per record on stderr."""

from __future__ import annotations

import logging
import sys
import time

LEVELS = ("debug", "info", "warning", "error")


class _UtcFormatter(logging.Formatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        return f"{stamp}.{int(record.msecs):03d}Z"


def configure_logging(level: str = "info") -> None:
    """Send every logger (Conveyor's and the tasks' own) to stderr, timestamped in UTC."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_UtcFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def flush_all() -> None:
    """Flush log handlers and stdio; call before `os._exit`, which skips both."""
    for handler in logging.getLogger().handlers:
        handler.flush()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or broken pipe: nothing more to save
            pass
