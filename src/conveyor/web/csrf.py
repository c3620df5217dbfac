"""Proof that an action came from the dashboard's own pages: two independent checks.

1. Where from. Browsers say where a request comes from (`Origin`, `Sec-Fetch-Site`) and
   a page cannot change that. A state-changing request whose `Origin` is not the
   dashboard's own origin (or one of `trusted_origins`), or whose `Sec-Fetch-Site` is
   not `same-origin`, is refused. A page on another port of the same host is another
   origin, though browsers call it same-site and send it SameSite=Strict cookies.
2. A token the server signed. Every page gets a random session id cookie
   (`conveyor_session`, HttpOnly, SameSite=Strict), and its forms carry
   HMAC-SHA256(secret, session id, user). Cookies ignore ports, so a page on another
   port can plant any cookie it likes, but without the secret it cannot make the
   token that goes with it. Requests without either header (curl, scripts) are held
   to this check alone.

The same secret seals the notice shown after an action (the flash cookie), so a
planted cookie cannot put words on a dashboard page either. The secret is random per
process unless given (`create_dashboard(secret=...)` or
`$CONVEYOR_DASHBOARD_SECRET`), so that several replicas accept each other's tokens.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

from starlette.datastructures import FormData
from starlette.requests import Request

SESSION_COOKIE = "conveyor_session"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
SECRET_ENV = "CONVEYOR_DASHBOARD_SECRET"
ORIGINS_ENV = "CONVEYOR_DASHBOARD_ORIGINS"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_SESSION = re.compile(r"[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(32)
_DEFAULT_PORTS = {"http": 80, "https": 443}


def normal_origin(origin: str) -> str | None:
    """`scheme://host:port`, lower-cased with the port spelled out; None if malformed."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    if (
        parts.scheme not in _DEFAULT_PORTS
        or not parts.hostname
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or parts.username is not None
    ):
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host.lower()}:{port or _DEFAULT_PORTS[parts.scheme]}"


def load_secret(secret: str | bytes | None) -> bytes:
    if secret is None:
        secret = os.environ.get(SECRET_ENV) or None
    if secret is None:
        return secrets.token_bytes(32)
    key = secret.encode() if isinstance(secret, str) else secret
    if len(key) < 16:
        raise ValueError(f"the dashboard secret must be at least 16 characters (${SECRET_ENV})")
    return key


def load_origins(origins: Iterable[str] | None) -> frozenset[str]:
    if origins is None:
        origins = os.environ.get(ORIGINS_ENV, "").replace(",", " ").split()
    normal = set()
    for origin in origins:
        value = normal_origin(origin)
        if value is None:
            raise ValueError(
                f"trusted origin {origin!r} is not an origin: write it as "
                "scheme://host[:port], e.g. https://ops.example.org"
            )
        normal.add(value)
    return frozenset(normal)


@dataclass(frozen=True, slots=True)
class CsrfGuard:
    secret: bytes
    trusted_origins: frozenset[str] = frozenset()

    # --- the session and its token --------------------------------------------------------
    @staticmethod
    def session_of(request: Request) -> str | None:
        value = request.cookies.get(SESSION_COOKIE, "")
        return value if _SESSION.fullmatch(value) else None

    @staticmethod
    def new_session() -> str:
        return secrets.token_urlsafe(32)

    def token_for(self, session: str, user: str) -> str:
        return self._mac(b"conveyor-csrf", session, user)

    def token_ok(self, request: Request, form: FormData, user: str) -> bool:
        session = self.session_of(request)
        sent = request.headers.get(CSRF_HEADER)
        if sent is None:
            value = form.get(CSRF_FIELD)
            sent = value if isinstance(value, str) else None
        if session is None or not sent:
            return False
        return hmac.compare_digest(sent.encode(), self.token_for(session, user).encode())

    # --- notices carried in a cookie (the flash after a redirect) ------------------------
    def seal(self, text: str) -> str:
        """`text` for a cookie, with a MAC: a planted cookie cannot put words on a page."""
        quoted = quote(text, safe=" ")
        return f"{quoted}.{self._mac(b'conveyor-flash', quoted)}"

    def unseal(self, value: str | None) -> str | None:
        quoted, _, mac = (value or "").rpartition(".")
        if not quoted or not hmac.compare_digest(
            mac.encode(), self._mac(b"conveyor-flash", quoted).encode()
        ):
            return None
        return unquote(quoted)

    def _mac(self, purpose: bytes, *parts: str) -> str:
        message = b"\x00".join([purpose, *(p.encode() for p in parts)])
        digest = hmac.new(self.secret, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    # --- where the request comes from -----------------------------------------------------
    def own_origin(self, request: Request) -> str | None:
        return normal_origin(f"{request.url.scheme}://{request.url.netloc}")

    def cross_origin(self, request: Request) -> str | None:
        """Why this state-changing request comes from another origin, or None if it does
        not (or cannot tell: a client that sends neither header)."""
        site = request.headers.get("sec-fetch-site")
        if site is not None and site != "same-origin":
            return f"Sec-Fetch-Site is {site!r}, not 'same-origin'"
        origin = request.headers.get("origin")
        if origin is None:
            return None
        normal = normal_origin(origin)
        if normal is not None and (
            normal == self.own_origin(request) or normal in self.trusted_origins
        ):
            return None
        return f"Origin {origin!r} is not this dashboard's ({self.own_origin(request)})"
