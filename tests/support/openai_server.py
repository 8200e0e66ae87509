"""A scripted OpenAI-compatible Chat Completions server for tests (standard library only).

Tests queue replies with ``script`` and read back every request body from ``requests``::

    with OpenAIServer() as server:
        server.script("Hello!", Reply(tool_calls=(ToolCall("lookup", {"id": "1"}, "call_1"),)))
        model = ChatOpenAI(model="m", base_url=server.base_url, api_key="k")

Only ``POST /v1/chat/completions`` is served, as JSON or, when the request says
``"stream": true``, as server-sent events ending in ``data: [DONE]``.
"""

from __future__ import annotations

import json
import re
import threading
from collections import deque
from dataclasses import dataclass, field
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


class OpenAIServer:
    """Serves scripted replies on 127.0.0.1 and records each request's parsed JSON body."""

    def __init__(self, *replies: Reply | str) -> None:
        self.requests: list[dict[str, Any]] = []
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.script(*replies)

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

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port."""
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
