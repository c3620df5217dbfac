"""The dashboard's log lines, with data escaped so it can never end a line or fake one.

A job id, a queue name, a filter or a user name is data from whoever enqueued the job
or sent the request: every field goes through `conveyor.model.escaping.printable()`, so
`"x\\nalice delete job y: deleted"` cannot add a forged line to the audit log.
"""

from __future__ import annotations

import logging

from conveyor.model.escaping import printable

audit_log = logging.getLogger("conveyor.dashboard.audit")
log = logging.getLogger("conveyor.dashboard")


def record_action(user: str, action: str, target: str, result: str) -> None:
    """One line per operator action, e.g.
    `alice bulk retry every job matching state=dead: Retried 12 of 12 job(s)`."""
    audit_log.info(
        "%s %s %s: %s",
        printable(user),
        printable(action),
        printable(target),
        printable(result),
        extra={"dashboard_user": printable(user), "action": printable(action)},
    )


def warn(message: str, *fields: object) -> None:
    """A warning about a request (refused, malformed), its fields escaped like the audit's."""
    log.warning(message, *(printable(f) for f in fields))
