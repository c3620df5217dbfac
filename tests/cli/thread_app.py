"""An app whose handler leaves a non-daemon thread running forever, as a library
might (a client's background flusher that is never closed). For the worker-exit
tests: `conveyor worker thread_app:app` from this folder."""

from __future__ import annotations

import threading

from conveyor import Conveyor

app = Conveyor()  # the URL comes from $CONVEYOR_URL


@app.task(name="leave_thread")
def leave_thread() -> str:
    threading.Thread(target=threading.Event().wait, name="stray-forever", daemon=False).start()
    return "started"
