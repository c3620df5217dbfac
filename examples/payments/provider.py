"""Stand-ins for two providers' APIs, served on a local port:

* POST /v1/charges creates a charge once per `Idempotency-Key`: a repeated key gets
  the first charge back, as Stripe's API does.
* POST /v1/mail sends a receipt; its first answer is a 503 with `Retry-After: 1`
  (the mailer is overloaded), so the job has to retry.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = tuple[int, dict[str, str], dict[str, Any]]


class Providers:
    def __init__(self) -> None:
        self.charge_requests: list[str] = []  # the Idempotency-Key of each request
        self.charges: dict[str, dict[str, Any]] = {}  # by key
        self.mail_requests = 0
        self.receipts: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        providers = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with providers._lock:
                    if self.path == "/v1/charges":
                        status, headers, answer = providers.charge(
                            self.headers.get("Idempotency-Key"), body
                        )
                    else:
                        status, headers, answer = providers.mail(body)
                payload = json.dumps(answer).encode()
                self.send_response(status)
                for name, value in {**headers, "Content-Length": str(len(payload))}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()

    def charge(self, key: str | None, body: dict[str, Any]) -> Answer:
        self.charge_requests.append(key or "")
        if key is None:
            return 400, {}, {"error": "an Idempotency-Key header is required"}
        if key not in self.charges:
            self.charges[key] = {"id": f"ch_{len(self.charges) + 1}", **body}
        return 200, {}, self.charges[key]

    def mail(self, body: dict[str, Any]) -> Answer:
        self.mail_requests += 1
        if self.mail_requests == 1:
            return 503, {"Retry-After": "1"}, {"error": "overloaded, try again"}
        self.receipts.append(body)
        return 200, {}, {"id": f"msg_{len(self.receipts)}"}

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
