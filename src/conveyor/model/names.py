"""Short task names: `parse_amount` for `myapp.tasks.parse_amount`.

Tasks are named module.function by default, which is tedious to type. Everywhere an
operator names a task (`conveyor enqueue`, the `--task` filters, the dashboard's task
field) the same rule applies: the exact name wins; otherwise the one known name that
ends with `.` + the short name; two such names are an error, never a guess (a purge
by an ambiguous name must not pick one).
"""

from __future__ import annotations

from collections.abc import Iterable

from conveyor.model.errors import ConfigurationError


class AmbiguousTaskName(ConfigurationError):
    def __init__(self, name: str, matches: Iterable[str]) -> None:
        self.name, self.matches = name, sorted(matches)
        super().__init__(
            f"task name {name!r} is ambiguous: {', '.join(self.matches)}; give the full name"
        )


def match_task_name(name: str, known: Iterable[str]) -> str | None:
    """The known task `name` stands for, or None if it stands for none.

    >>> match_task_name("parse_amount", ["myapp.tasks.parse_amount", "myapp.add"])
    'myapp.tasks.parse_amount'
    """
    names = set(known)
    if name in names:
        return name
    matches = [n for n in names if n.endswith("." + name)]
    if len(matches) > 1:
        raise AmbiguousTaskName(name, matches)
    return matches[0] if matches else None
