"""A slow streaming OpenAI-compatible Chat Completions server for interrupt tests.

Each request takes the next ``SlowReply`` (the last one repeats); a streamed reply sends
one word per ``delay`` seconds, so a test can interrupt a client in the middle of it. Every
request body is recorded in ``requests``. Standard library only.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHAT_PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class SlowReply:
    """An answer of ``words`` words, streamed one every ``delay`` seconds after ``pause``."""

    words: tuple[str, ...]
    delay: float = 0.0
    pause: float = 0.0
    """Seconds of silence before the first word (a model that is thinking)."""

    @property
    def text(self) -> str:
        """The whole answer."""
        return " ".join(self.words)


class SlowServer:
    """Serves ``replies`` in order on 127.0.0.1; use as a context manager."""

    def __init__(self, *replies: SlowReply) -> None:
        self.replies = list(replies) or [SlowReply(("ok",))]
        self.requests: list[dict[str, Any]] = []
        self.finished = 0
        """Streams sent to the end (an abandoned stream is not counted)."""
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """The ``OPENAI_BASE_URL`` of this server."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> SlowServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _next(self, body: dict[str, Any]) -> SlowReply:
        with self._lock:
            index = len(self.requests)
            self.requests.append(body)
            return self.replies[min(index, len(self.replies) - 1)]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                """Keep the test output quiet."""

            def do_POST(self) -> None:
                """Answer one chat completion, streamed when the request asks for it."""
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path != CHAT_PATH:
                    self.send_error(404)
                    return
                reply = server._next(body)
                if body.get("stream"):
                    self._stream(reply, str(body.get("model", "m")))
                else:
                    self._complete(reply, str(body.get("model", "m")))

            def _complete(self, reply: SlowReply, model: str) -> None:
                time.sleep(reply.delay * len(reply.words))
                payload = {
                    "id": "chatcmpl-slow",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": reply.text},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                }
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, reply: SlowReply, model: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
                deltas += [
                    {"content": word if i == 0 else " " + word}
                    for i, word in enumerate(reply.words)
                ]
                try:
                    self._event(model, deltas[0], None)
                    time.sleep(reply.pause)
                    for index, delta in enumerate(deltas[1:], start=1):
                        if index > 1:
                            time.sleep(reply.delay)
                        self._event(model, delta, None)
                    self._event(model, {}, "stop")
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    return
                with server._lock:
                    server.finished += 1

            def _event(self, model: str, delta: dict[str, Any], finish: str | None) -> None:
                chunk = {
                    "id": "chatcmpl-slow",
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                }
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()

        return Handler
