"""A loopback HTTP proxy that records every request body on its way to a real server.

The real-server tests put it between the product and ``llama_cpp.server`` to see what actually
left the process: which fields carried the output cap, which ``response_format``, whether tools
were offered, and that no planted secret was in any body. It forwards bytes as they are (no
streaming rewrite), binds 127.0.0.1 on a free port, and never opens a connection elsewhere.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ["RecordingProxy"]


class RecordingProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        """The real server's base, e.g. ``http://127.0.0.1:PORT`` (no ``/v1``)."""
        self.bodies: list[bytes] = []
        self.upstream_s = 0.0
        """Seconds spent waiting on the real server for POSTs: its own time, seen from outside."""
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def requests(self) -> list[dict[str, Any]]:
        """Every recorded JSON body, parsed (a body that is not JSON is skipped)."""
        parsed = []
        with self._lock:
            bodies = list(self.bodies)
        for body in bodies:
            try:
                parsed.append(json.loads(body))
            except ValueError:
                continue
        return parsed

    def saw(self, text: str) -> bool:
        with self._lock:
            return any(text.encode() in body for body in self.bodies)

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(proxy: RecordingProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            self._forward(None)

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with proxy._lock:
                proxy.bodies.append(body)
            self._forward(body)

        def _forward(self, body: bytes | None) -> None:
            request = urllib.request.Request(
                proxy.upstream + self.path,
                data=body,
                method=self.command,
                headers={"Content-Type": self.headers.get("Content-Type", "application/json")},
            )
            started = time.perf_counter()
            try:
                with urllib.request.urlopen(request, timeout=300) as answer:
                    status, payload, kind = answer.status, answer.read(), answer.headers
            except urllib.error.HTTPError as error:
                status, payload, kind = error.code, error.read(), error.headers
            except OSError:
                self.send_error(502, "upstream unreachable")
                return
            finally:
                if body is not None:
                    with proxy._lock:
                        proxy.upstream_s += time.perf_counter() - started
            self.send_response(status)
            self.send_header("Content-Type", kind.get("Content-Type", "application/json"))
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return Handler
