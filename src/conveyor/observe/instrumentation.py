"""`instrument(app)`: the observing middleware wired onto an app. It sits above
middleware.py and the observers built on it (logs, tracing, metrics), which
import middleware.py for its types and so cannot be imported by it."""

from __future__ import annotations

from typing import Protocol

from conveyor.observe.logs import CorrelationIds
from conveyor.observe.middleware import Middleware


class HasMiddleware(Protocol):
    """What `instrument` needs of an app: its middleware list, to add to."""

    @property
    def middleware(self) -> list[Middleware]: ...


def instrument(
    app: HasMiddleware, *, metrics: bool | None = None, tracing: bool | None = None
) -> None:
    """Add the observing middleware to `app`: correlation ids always; Prometheus
    metrics and OpenTelemetry tracing when their package is installed (None) or
    when asked (True: an ImportError if it is missing). Calling it twice adds
    nothing twice.

    >>> instrument(app)   # in the module that creates the app
    """
    present = {type(m) for m in app.middleware}
    wanted: list[Middleware] = [] if CorrelationIds in present else [CorrelationIds()]
    if tracing is not False:
        try:
            from conveyor.observe.tracing import Tracing
        except ImportError:
            if tracing:
                raise
        else:
            if Tracing not in present:
                wanted.append(Tracing())
    if metrics is not False:
        try:
            from conveyor.observe.metrics import Metrics
        except ImportError:
            if metrics:
                raise
        else:
            if Metrics not in present:
                wanted.append(Metrics())
    app.middleware.extend(wanted)
