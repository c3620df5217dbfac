"""Who may use the dashboard.

HTTP basic auth, a bearer token, or an `auth` hook (when the dashboard is mounted in
an app that has its own login). Without any of them only loopback clients are served,
and only when they ask for it by a loopback name (`Host: 127.0.0.1:8080`, not a DNS
name that an attacker's page had rebound to 127.0.0.1); `conveyor dashboard` refuses
to listen off localhost. Proof that an action came from the dashboard's own pages is
in `csrf.py`.
"""

from __future__ import annotations

import base64
import hmac
import inspect
import ipaddress
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.requests import Request

# Given the request, return who is there (a name for the audit log), or None to refuse.
AuthHook = Callable[[Request], "Awaitable[str | None] | str | None"]


class InsecureBind(Exception):
    """Listening off localhost without authentication."""


def is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class AuthSettings:
    basic: tuple[str, str] | None = None  # (user, password)
    token: str | None = None
    hook: AuthHook | None = None

    @property
    def configured(self) -> bool:
        return self.basic is not None or self.token is not None or self.hook is not None

    @classmethod
    def from_strings(
        cls, basic: str | None = None, token: str | None = None, hook: AuthHook | None = None
    ) -> AuthSettings:
        pair = None
        if basic:
            user, sep, password = basic.partition(":")
            if not sep or not user or not password:
                raise ValueError("basic auth must be USER:PASSWORD, both non-empty")
            pair = (user, password)
        if token is not None and len(token) < 16:
            raise ValueError("the bearer token must be at least 16 characters")
        return cls(basic=pair, token=token or None, hook=hook)


def check_bind(host: str, auth: AuthSettings) -> None:
    """Refuse to serve off localhost without authentication."""
    if not is_loopback(host) and not auth.configured:
        raise InsecureBind(
            f"refusing to listen on {host} without authentication: anyone who can reach it "
            "could retry, cancel and delete jobs. Pass --basic-auth USER:PASSWORD or --token "
            "TOKEN (or $CONVEYOR_DASHBOARD_BASIC_AUTH / $CONVEYOR_DASHBOARD_TOKEN), or listen "
            "on 127.0.0.1 behind your own authenticating proxy."
        )


async def authenticate(request: Request, auth: AuthSettings) -> str | None:
    """The user's name for the audit log, or None if not allowed."""
    header = request.headers.get("authorization", "")
    scheme, _, credentials = header.partition(" ")
    if auth.token is not None and scheme.lower() == "bearer":
        if hmac.compare_digest(credentials.strip().encode(), auth.token.encode()):
            return "token"
    if auth.basic is not None and scheme.lower() == "basic":
        try:
            user, _, password = base64.b64decode(credentials.strip()).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        want_user, want_password = auth.basic
        # Both compared, always, so timing does not tell which one was wrong.
        ok_user = hmac.compare_digest(user.encode(), want_user.encode())
        ok_password = hmac.compare_digest(password.encode(), want_password.encode())
        if ok_user and ok_password:
            return user
    if auth.hook is not None:
        result = auth.hook(request)
        if inspect.isawaitable(result):
            result = await result
        return result if isinstance(result, str) and result else None
    if not auth.configured:
        host = request.client.host if request.client else None
        if is_loopback(host) and is_loopback(request.url.hostname):
            return f"local:{host}"
    return None
