"""The `workers` record namespace: one shared record per live worker, written by
the worker itself (conveyor.worker.presence), read by operators (`conveyor
workers`, the dashboard, `app.admin.workers()`) and by rescuers
(conveyor.worker.liveness). Here, below all three, so none imports another."""

WORKERS_NAMESPACE = "workers"  # a record per live worker (conveyor workers, dashboard)
