from conveyor.worker.config import WorkerConfig
from conveyor.worker.worker import ExitStatus, Worker

__all__ = ["ExitStatus", "Worker", "WorkerConfig"]
