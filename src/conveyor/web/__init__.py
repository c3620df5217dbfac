"""The web dashboard (needs `conveyor[web]`): `create_dashboard(app)` is an ASGI app."""

from conveyor.web.app import DashboardSettings, create_dashboard
from conveyor.web.security import AuthHook, InsecureBind, check_bind

__all__ = ["AuthHook", "DashboardSettings", "InsecureBind", "check_bind", "create_dashboard"]
