"""A task's idempotency key: a template over its arguments, rendered at enqueue.

`@app.task(idempotency_key="charge:{order_id}")` declares it; the key is rendered
once, when the job is enqueued, and stored in the job's meta under
`IDEMPOTENCY_META_KEY`. Stored, not re-rendered by the worker: the key a provider
saw on the first attempt is the one it sees on every retry and after a redrive,
even after a deploy changes the template or the task's defaults. The meta (rather
than a column of its own) because every backend already stores and keeps it as
given, through retries, rescues and redrives, so no backend needs a migration.

A job of a task without a template uses its job id, which is just as stable.
"""

from __future__ import annotations

import inspect
import string
from collections.abc import Mapping
from typing import Any

from conveyor.model import validation as valid
from conveyor.model.errors import InvalidJob

IDEMPOTENCY_META_KEY = "idempotency_key"


def key_of(job_id: str, meta: Mapping[str, Any]) -> str:
    """The job's idempotency key: the rendered template stored at enqueue, else its id."""
    stored = meta.get(IDEMPOTENCY_META_KEY)
    return stored if isinstance(stored, str) and stored else job_id


class KeyTemplate:
    """A `str.format` template whose fields name the task's parameters.

    >>> KeyTemplate("charge:{order_id}", inspect.signature(lambda order_id: None)).render((42,), {})
    'charge:42'

    Fields are parameter names, optionally indexed into a dict or list argument
    (`{order[id]}`, `{items[0]}`) and formatted (`{amount:.2f}`). Checked when the
    task is registered: a field that names no parameter is a ValueError then, not
    a failed enqueue later.
    """

    def __init__(
        self, template: str, signature: inspect.Signature, field: str = "idempotency_key"
    ) -> None:
        # `field`: the option the template is given as (a fairness_key is one too).
        self.field = field
        if not isinstance(template, str) or not template:
            raise ValueError(f"{field} must be a non-empty template, got {template!r}")
        self.template = template
        self.signature = signature
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
        except ValueError as exc:
            raise ValueError(
                f"{self.field} {template!r} is not a format template ({exc})"
            ) from None
        if not fields:
            raise ValueError(
                f"{self.field} {template!r} names no argument: every job of "
                'the task would share one key; use e.g. "charge:{order_id}"'
            )
        parameters = signature.parameters
        for field in fields:
            root = field.split("[", 1)[0]
            if "." in root:
                raise ValueError(
                    f"{self.field} {template!r}: {{{field}}} reads an attribute; "
                    "arguments are JSON data, index them instead ({order[id]})"
                )
            if root not in parameters:
                known = ", ".join(parameters) or "(none)"
                raise ValueError(
                    f"{self.field} {template!r}: {{{field}}} names no parameter "
                    f"of the task; its parameters: {known}"
                )

    def __repr__(self) -> str:
        return f"KeyTemplate({self.template!r})"

    def render(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
        """The key for one call: the template over the bound arguments (defaults
        applied), held to the rules of a stored name (`conveyor.model.validation`)."""
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        try:
            key = self.template.format_map(bound.arguments)
        except (LookupError, TypeError, ValueError) as exc:
            raise InvalidJob(
                self.field,
                self.template,
                f"a template these arguments fill ({type(exc).__name__}: {exc})",
            ) from None
        return valid.name(self.field, key)
