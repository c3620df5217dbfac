"""`app.admin` and `app.jobs`, the inspector API (api.py), built on first use.

A worker never inspects jobs; importing api.py, and observe/audit.py with it, made every
worker's start longer (figures: docs/performance.md).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from conveyor.admin.api import Admin, AdminApp, Jobs


class Inspection:
    """The app's inspector: `admin` (async) and `jobs` (its sync face)."""

    @functools.cached_property
    def admin(self) -> Admin:
        from conveyor.admin.api import Admin

        return Admin(cast("AdminApp", self))

    @functools.cached_property
    def jobs(self) -> Jobs:
        from conveyor.admin.api import Jobs

        return Jobs(cast("AdminApp", self))
