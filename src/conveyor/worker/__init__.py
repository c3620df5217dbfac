from .config import WorkerConfig
from .worker import ExitStatus, Worker

__all__ = ["ExitStatus", "Worker", "WorkerConfig"]
