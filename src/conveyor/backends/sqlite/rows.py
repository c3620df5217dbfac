"""A job read back by id, as every role that writes a job and answers with it does."""

from __future__ import annotations

import sqlite3

from conveyor.backends.codec import job_from_row
from conveyor.backends.sqlite.connection import Q
from conveyor.model.job import Job


def read_job(db: sqlite3.Connection, job_id: str) -> Job | None:
    row = db.execute(Q["get_job"], {"id": job_id}).fetchone()
    return None if row is None else job_from_row(row)
