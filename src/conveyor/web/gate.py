"""What every request passes before any page or action, in this order:

1. authentication (`security.authenticate`); without any configured, loopback clients
   asking by a loopback name only;
2. for a state-changing method, a request from another origin is refused (`csrf.py`);
3. a path and query string that are UTF-8 without NUL bytes (`params.check_target`);

and every answer carries the security headers.
"""

from __future__ import annotations

from typing import Any

from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from conveyor.web.audit import warn
from conveyor.web.csrf import SAFE_METHODS, CsrfGuard
from conveyor.web.params import BadRequest, check_target
from conveyor.web.security import AuthSettings, authenticate, is_loopback

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; "
    "script-src 'self'; "
    "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


class Gate(BaseHTTPMiddleware):
    def __init__(self, app: Any, auth: AuthSettings, csrf: CsrfGuard) -> None:
        super().__init__(app)
        self.auth = auth
        self.csrf = csrf

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        response = await self.refusal(request)
        if response is None:
            response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    async def refusal(self, request: Request) -> Response | None:
        user = await authenticate(request, self.auth)
        if user is None:
            return self.unauthenticated(request)
        request.state.user = user
        if request.method not in SAFE_METHODS:
            reason = self.csrf.cross_origin(request)
            if reason is not None:
                warn("refused %s %s from %s: %s", request.method, request.url.path, user, reason)
                return PlainTextResponse(
                    f"cross-origin request refused: {reason}. Actions are taken only from "
                    "the dashboard's own pages.",
                    status_code=403,
                )
        try:
            check_target(request.scope)
        except BadRequest as exc:
            return PlainTextResponse(str(exc), status_code=400)
        return None

    def unauthenticated(self, request: Request) -> Response:
        if not self.auth.configured:
            client = request.client.host if request.client else None
            if is_loopback(client):
                return PlainTextResponse(
                    f"this dashboard has no authentication configured, so it only serves "
                    f"loopback clients asking for a loopback name, and "
                    f"{request.url.hostname!r} is not one: open it as http://127.0.0.1:"
                    f"{request.url.port or 80}/ or configure basic auth, a token or an "
                    f"auth hook",
                    status_code=403,
                )
            return PlainTextResponse(
                "this dashboard has no authentication configured, so it only serves "
                "localhost; configure basic auth, a token or an auth hook",
                status_code=403,
            )
        headers = (
            {"WWW-Authenticate": 'Basic realm="Conveyor", charset="UTF-8"'}
            if self.auth.basic is not None
            else {}
        )
        return PlainTextResponse("authentication required", status_code=401, headers=headers)
