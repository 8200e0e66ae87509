"""A scripted OpenAI-compatible Chat Completions server for tests (standard library only).

Tests queue replies with ``script`` and read back every request body from ``requests``::

    with OpenAIServer() as server:
        server.script("Hello!", Reply(tool_calls=(ToolCall("lookup", {"id": "1"}, "call_1"),)))
        model = ChatOpenAI(model="m", base_url=server.base_url, api_key="k")

Only ``POST /v1/chat/completions`` is served, as JSON or, when the request says
``"stream": true``, as server-sent events ending in ``data: [DONE]``.

``fail(status)`` answers with an OpenAI-style error body instead, and ``hang()`` accepts
the request and never answers; both apply to every model, or to the one named by
``model=``::

    server.fail(401)                   # every request: HTTP 401 invalid_api_key
    server.hang(model="slow-summary")  # only requests for that model hang
"""

from __future__ import annotations

import json
import re
import threading
from collections import deque
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHAT_PATH = "/v1/chat/completions"
EXHAUSTED = "openai test server: the reply script is exhausted"


@dataclass(frozen=True)
class ToolCall:
    """One tool call the scripted model makes."""

    name: str
    arguments: dict[str, Any]
    id: str


@dataclass(frozen=True)
class Reply:
    """One scripted assistant turn: text, tool calls, or both."""

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = field(default=())

    def message(self) -> dict[str, Any]:
        """The assistant message of a non-streaming completion."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": _function(c)} for c in self.tool_calls
            ]
        return message

    def deltas(self) -> list[dict[str, Any]]:
        """The streamed deltas: role, text word by word, then each tool call in pieces."""
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        deltas += [{"content": piece} for piece in re.findall(r"\s*\S+|\s+$", self.content)]
        for index, call in enumerate(self.tool_calls):
            arguments = _function(call)["arguments"]
            half = len(arguments) // 2
            function = {"name": call.name, "arguments": arguments[:half]}
            head = {"index": index, "id": call.id, "type": "function", "function": function}
            deltas.append({"tool_calls": [head]})
            tail = {"index": index, "function": {"arguments": arguments[half:]}}
            deltas.append({"tool_calls": [tail]})
        return deltas

    @property
    def finish_reason(self) -> str:
        """``tool_calls`` when the turn calls tools, else ``stop``."""
        return "tool_calls" if self.tool_calls else "stop"


def _function(call: ToolCall) -> dict[str, str]:
    return {"name": call.name, "arguments": json.dumps(call.arguments)}


USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}

ERRORS: dict[int, tuple[str, str, str]] = {
    401: ("Incorrect API key provided: x.", "invalid_request_error", "invalid_api_key"),
    403: ("You are not allowed to use this model.", "invalid_request_error", "forbidden"),
    404: (
        "The model does not exist or you do not have access to it.",
        "invalid_request_error",
        "model_not_found",
    ),
    429: ("Rate limit reached for requests.", "requests", "rate_limit_exceeded"),
    500: ("The server had an error while processing your request.", "server_error", "server_error"),
}
"""Message, type and code of the OpenAI-style error body ``fail(status)`` sends."""

HANG = 0
"""The behaviour of ``hang()``: read the request, then never answer."""


def error_body(status: int, message: str | None = None) -> dict[str, Any]:
    """An OpenAI-style error body for ``status`` (``{"error": {message, type, code}}``)."""
    phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
    known, kind, code = ERRORS.get(status, (phrase or f"HTTP {status}", "server_error", None))
    return {"error": {"message": message or known, "type": kind, "param": None, "code": code}}


class OpenAIServer:
    """Serves scripted replies on 127.0.0.1 and records each request's parsed JSON body."""

    def __init__(self, *replies: Reply | str) -> None:
        self.requests: list[dict[str, Any]] = []
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._behaviours: dict[str | None, list[Any]] = {}
        self._stopping = threading.Event()
        self.script(*replies)

    def fail(
        self,
        status: int,
        *,
        model: str | None = None,
        message: str | None = None,
        times: int | None = None,
    ) -> None:
        """Answer requests (for ``model``, else all) with HTTP ``status`` and an error body.

        With ``times``, only that many requests fail; later ones are served as usual.
        """
        with self._lock:
            self._behaviours[model] = [status, message, times]

    def hang(self, *, model: str | None = None) -> None:
        """Accept requests (for ``model``, else all) and never answer them."""
        with self._lock:
            self._behaviours[model] = [HANG, None, None]

    def serve_normally(self) -> None:
        """Forget every ``fail`` and ``hang``."""
        with self._lock:
            self._behaviours.clear()

    def _behaviour(self, body: dict[str, Any]) -> tuple[int, str | None] | None:
        """Record a request that fails or hangs; return its status (HANG) and message."""
        with self._lock:
            model = str(body.get("model", ""))
            key = model if model in self._behaviours else None
            behaviour = self._behaviours.get(key)
            if behaviour is None:
                return None
            status, message, times = behaviour
            if times is not None:
                if times <= 0:
                    return None
                behaviour[2] = times - 1
            self.requests.append(body)
            return status, message

    def script(self, *replies: Reply | str) -> None:
        """Queue replies in order; a plain string is a text answer."""
        with self._lock:
            self._replies.extend(Reply(content=r) if isinstance(r, str) else r for r in replies)

    @property
    def pending(self) -> int:
        """How many scripted replies have not been served yet."""
        with self._lock:
            return len(self._replies)

    @property
    def base_url(self) -> str:
        """The OpenAI ``base_url``, e.g. ``http://127.0.0.1:PORT/v1``."""
        if self._httpd is None:
            raise RuntimeError("the server is not running; call start() first")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> OpenAIServer:
        """Bind a free port and serve in a daemon thread."""
        server = self

        class Handler(_Handler):
            owner = server

        self._stopping.clear()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port (hanging requests end unanswered)."""
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> OpenAIServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _next(self, body: dict[str, Any]) -> tuple[int, Reply | None]:
        """Record a request body; return its number and the next reply, if any is left."""
        with self._lock:
            self.requests.append(body)
            return len(self.requests), self._replies.popleft() if self._replies else None


class _Handler(BaseHTTPRequestHandler):
    owner: OpenAIServer
    protocol_version = "HTTP/1.1"
    timeout = 30  # idle keep-alive connections end on their own

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != CHAT_PATH:
            self._json(404, {"error": {"message": f"no route for POST {self.path}"}})
            return
        try:
            request = json.loads(body or b"{}")
        except ValueError as error:
            self._json(400, {"error": {"message": f"request body is not JSON: {error}"}})
            return
        behaviour = self.owner._behaviour(request)
        if behaviour is not None:
            status, message = behaviour
            if status == HANG:
                self.owner._stopping.wait()
                self.close_connection = True
            else:
                self._json(status, error_body(status, message))
            return
        number, reply = self.owner._next(request)
        if reply is None:
            self._json(500, {"error": {"message": EXHAUSTED, "type": "server_error"}})
            return
        base = {"id": f"chatcmpl-{number}", "created": 0, "model": request.get("model", "")}
        if not request.get("stream"):
            choice = {"index": 0, "message": reply.message(), "finish_reason": reply.finish_reason}
            completion = {**base, "object": "chat.completion", "choices": [choice], "usage": USAGE}
            self._json(200, completion)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunk = {**base, "object": "chat.completion.chunk"}
        events: list[dict[str, Any]] = [
            {"index": 0, "delta": d, "finish_reason": None} for d in reply.deltas()
        ]
        events.append({"index": 0, "delta": {}, "finish_reason": reply.finish_reason})
        for choice in events:
            self._event(json.dumps({**chunk, "choices": [choice]}))
        if (request.get("stream_options") or {}).get("include_usage"):
            self._event(json.dumps({**chunk, "choices": [], "usage": USAGE}))
        self._event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")

    def do_GET(self) -> None:
        self._json(404, {"error": {"message": f"no route for GET {self.path}"}})

    def _event(self, data: str) -> None:
        payload = f"data: {data}\n\n".encode()
        self.wfile.write(f"{len(payload):X}\r\n".encode() + payload + b"\r\n")
        self.wfile.flush()

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""
