"""Observers and wrappers of enqueue and execution: middleware, logs, tracing, metrics,
the audit trail and per-minute statistics."""
