"""Logging for long-running commands (worker, dashboard, demo): one line per record
on stderr, as `conveyor.observe.logs` sets it up (pool children use the same set-up)."""

from __future__ import annotations

from conveyor.observe.logs import FORMATS, configure_logging, flush_all

__all__ = ["FORMATS", "LEVELS", "configure_logging", "flush_all"]

LEVELS = ("debug", "info", "warning", "error")
