"""The `conveyor` command line: run workers, enqueue jobs, inspect and repair queues.

Every command goes through the public API (`app.admin`, `Worker`), the same one
the dashboard uses. Run `conveyor --help` for the list of commands.
"""
