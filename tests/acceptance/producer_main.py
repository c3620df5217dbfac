"""A producer process for tests/acceptance/test_flow_processes.py: enqueue N jobs one by
one, through the sync facade, into a bounded queue; print what was stored and refused.

    python producer_main.py QUEUE N MAX_WAITING ON_FULL NAME
"""

from __future__ import annotations

import json
import sys

from jobs_app import app, work

from conveyor.model.errors import QueueFull

queue, n, most, on_full, name = (
    sys.argv[1],
    int(sys.argv[2]),
    int(sys.argv[3]),
    sys.argv[4],
    sys.argv[5],
)
app.queue(queue, max_waiting=most, on_full=on_full, block_timeout=60)  # type: ignore[arg-type]
bound = work.options(queue=queue)
stored, refused, depths = [], [], []
for i in range(n):
    try:
        stored.append(bound.options(job_id=f"{name}-{i}").enqueue(0.01).id)
    except QueueFull as full:
        refused.append(f"{name}-{i}")
        depths.append(full.depth)
app.close()
print(json.dumps({"stored": stored, "refused": refused, "depths": depths}))
