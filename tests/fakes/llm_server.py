"""A loopback fake of an OpenAI-compatible ``/v1/chat/completions`` server, for real-client tests.

Binds ``127.0.0.1`` on a random port, lists one model (``GET …/models``: ``fake-model``), serves each request on a daemon thread and records every
request (method, path with its query, headers and JSON body). Any path ending in
``/chat/completions`` is served, so Azure's ``/openai/deployments/<name>/chat/completions`` is too;
anything else (``/v1/responses``, say) is a 404. What it answers is chosen by ``mode``, settable at any time:

| mode | answer |
|---|---|
| normal | 200, a chat completion with a usage block (SSE chunks when the request streams) |
| slow | sleeps ``slow_s`` seconds, then answers as ``normal`` |
| rate_limited | 429 with ``Retry-After: 7`` |
| server_error | 500 |
| malformed | 200, ``application/json``, with a body that is not JSON |
| empty | 200, a chat completion whose content is the empty string |
| unauthorized | 401 |
| refuses_json_schema | 500 with llama-cpp-python's words when ``response_format`` is ``json_schema``, else ``normal`` |
| ignores_cap | ``normal``, but reporting ``completion_tokens`` far past any ``max_tokens`` asked |

It never opens a connection of its own and knows no credential.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Final, Literal, TypeAlias, get_args

__all__ = ["DEFAULT_ANSWER", "MODES", "FakeLLMServer", "Mode", "RecordedRequest"]

Mode: TypeAlias = Literal[
    "normal",
    "slow",
    "rate_limited",
    "server_error",
    "malformed",
    "empty",
    "unauthorized",
    "refuses_json_schema",
    "ignores_cap",
]
MODES: Final[tuple[Mode, ...]] = get_args(Mode)
DEFAULT_ANSWER: Final = json.dumps(
    {
        "stance": "supports",
        "conclusion": "the saving holds if the licence count is right",
        "assumptions": [],
        "risks": [],
        "falsifiers": [],
        "confidence": "medium",
    }
)
PROMPT_TOKENS: Final = 11
COMPLETION_TOKENS: Final = 7


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    body: Any
    """The parsed JSON body, or the raw text when it was not JSON."""
    headers: dict[str, str]
    """Header names lower-cased."""


class FakeLLMServer:
    """``with FakeLLMServer() as server: ... server.base_url ... server.mode = "slow"``."""

    def __init__(
        self,
        *,
        mode: Mode = "normal",
        content: str = DEFAULT_ANSWER,
        slow_s: float = 2.0,
        retry_after: str = "7",
        fingerprint: str | None = None,
    ) -> None:
        self.mode: Mode = mode
        self.content = content
        self.slow_s = slow_s
        self.retry_after = retry_after
        self.fingerprint = fingerprint
        """The build the server says it runs (``system_fingerprint``); None says nothing."""
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._stopping = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def paths(self) -> list[str]:
        return [r.path for r in self.requests]

    def clear(self) -> None:
        with self._lock:
            self._requests.clear()

    def record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def pause(self, seconds: float) -> None:
        """Sleep, but wake at once when the server stops."""
        self._stopping.wait(seconds)

    def start(self) -> FakeLLMServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"fake-llm-{self.port}",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _completion(
    model: str,
    content: str,
    completion_tokens: int = COMPLETION_TOKENS,
    fingerprint: str | None = None,
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        **({"system_fingerprint": fingerprint} if fingerprint else {}),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": PROMPT_TOKENS,
            "completion_tokens": completion_tokens,
            "total_tokens": PROMPT_TOKENS + completion_tokens,
        },
    }


def _chunks(model: str, content: str, include_usage: bool) -> list[dict[str, Any]]:
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": model}
    created = int(time.time())
    pieces = [content[i : i + 16] for i in range(0, len(content), 16)] or [""]
    chunks: list[dict[str, Any]] = [
        {
            **base,
            "created": created,
            "choices": [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": piece}
                    if i == 0
                    else {"content": piece},
                    "finish_reason": None,
                }
            ],
        }
        for i, piece in enumerate(pieces)
    ]
    chunks.append(
        {
            **base,
            "created": created,
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        }
    )
    if include_usage:
        chunks.append(
            {
                **base,
                "created": created,
                "choices": [],
                "usage": {
                    "prompt_tokens": PROMPT_TOKENS,
                    "completion_tokens": COMPLETION_TOKENS,
                    "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
                },
            }
        )
    return chunks


def _handler_for(server: FakeLLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Silent: the test reads ``server.requests`` instead."""

        def do_GET(self) -> None:
            server.record(
                RecordedRequest(
                    "GET", self.path, None, {k.lower(): v for k, v in self.headers.items()}
                )
            )
            if self.path.split("?", 1)[0].rstrip("/").endswith("/models"):
                self._json(
                    200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}
                )
                return
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length).decode("utf-8", "replace")
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = raw
            server.record(
                RecordedRequest(
                    "POST", self.path, body, {k.lower(): v for k, v in self.headers.items()}
                )
            )
            # A client that gave up (its deadline passed) has closed the socket: nothing left to say.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._answer(body if isinstance(body, dict) else {})

        def _answer(self, body: dict[str, Any]) -> None:
            if not self.path.split("?", 1)[0].rstrip("/").endswith("/chat/completions"):
                self._json(
                    404, {"error": {"message": f"no route {self.path}", "type": "not_found"}}
                )
                return
            mode = server.mode
            model = str(body.get("model") or "fake-model")
            if mode == "slow":
                server.pause(server.slow_s)
            if mode == "rate_limited":
                self._json(
                    429,
                    {"error": {"message": "slow down", "type": "rate_limit_exceeded"}},
                    headers={"Retry-After": server.retry_after},
                )
            elif mode == "server_error":
                self._json(
                    500, {"error": {"message": "the fake fell over", "type": "server_error"}}
                )
            elif mode == "unauthorized":
                self._json(401, {"error": {"message": "bad key", "type": "invalid_api_key"}})
            elif mode == "malformed":
                self._send(200, b"{this is not json", "application/json")
            elif (
                mode == "refuses_json_schema"
                and (body.get("response_format") or {}).get("type") == "json_schema"
            ):
                message = (
                    "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', "
                    "'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\"}"
                )
                self._json(500, {"error": {"message": message, "type": "internal_server_error"}})
            elif mode == "ignores_cap" and not body.get("stream"):
                self._json(200, _completion(model, server.content, completion_tokens=10_000))
            else:
                content = "" if mode == "empty" else server.content
                if body.get("stream"):
                    options = body.get("stream_options") or {}
                    self._sse(_chunks(model, content, bool(options.get("include_usage"))))
                else:
                    self._json(200, _completion(model, content, fingerprint=server.fingerprint))

        def _json(
            self, status: int, payload: Any, *, headers: dict[str, str] | None = None
        ) -> None:
            self._send(status, json.dumps(payload).encode(), "application/json", headers)

        def _send(
            self,
            status: int,
            data: bytes,
            content_type: str,
            headers: dict[str, str] | None = None,
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

        def _sse(self, chunks: list[dict[str, Any]]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for chunk in chunks:
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

    return Handler
