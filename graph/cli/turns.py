"""Runs one conversational turn, streaming tokens and tool activity to a text stream.

The graph runs in a worker thread and the calling thread waits on a queue, so Ctrl-C (or
SIGTERM turned into ``KeyboardInterrupt``) is handled at once, not when the model is done.
An interrupted turn keeps the user's message (LangGraph saved it with the turn's input
checkpoint) and drops the partial answer: a callback makes every later model token, model
end, node or tool event of the abandoned run raise ``TurnCancelledError``, so the node fails
and its answer is never written.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from typing import Any, TextIO, cast

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig

from ctxgraph.graph.builder import Graph
from ctxgraph.graph.cli.render import escape_control, tool_call_line, tool_result_line
from ctxgraph.state.context import Context

POLL_SECONDS = 0.1
"""How often the waiting thread wakes while the graph runs (signals arrive at once anyway)."""


class TurnCancelledError(RuntimeError):
    """Raised inside an abandoned run, so its model or tool node fails and writes nothing."""


class TurnInterruptedError(Exception):
    """A turn was interrupted; the user's message is saved, the partial answer is not.

    ``worker`` is the thread still finishing the abandoned run (it stops at its next model
    token or node event); join it before the next turn on the thread. ``cause`` is the
    ``KeyboardInterrupt`` (or subclass) that interrupted the turn.
    """

    def __init__(self, worker: threading.Thread, cause: KeyboardInterrupt) -> None:
        super().__init__("the turn was interrupted")
        self.worker = worker
        self.cause = cause


class _CancelOnStop(BaseCallbackHandler):
    """Raises ``TurnCancelledError`` from every callback once the turn has been abandoned."""

    raise_error = True
    run_inline = True

    def __init__(self, stop: threading.Event) -> None:
        self._stop = stop

    def _check(self, *args: Any, **kwargs: Any) -> None:
        if self._stop.is_set():
            raise TurnCancelledError("the turn was interrupted")

    on_llm_start = _check
    on_chat_model_start = _check
    on_llm_new_token = _check
    on_llm_end = _check
    on_chain_start = _check
    on_chain_end = _check
    on_tool_start = _check
    on_tool_end = _check


def _not_a_cancellation(record: logging.LogRecord) -> bool:
    """Logging filter: LangChain logs every raising callback; a cancellation is expected."""
    return _CancelOnStop.__name__ not in record.getMessage()


logging.getLogger("langchain_core.callbacks.manager").addFilter(_not_a_cancellation)


def _produce(
    events: Iterator[tuple[str, Any]],
    found: queue.Queue[tuple[str, Any]],
    stop: threading.Event,
) -> None:
    """Worker thread: put each graph event on ``found``, then ``done`` or the error."""
    try:
        for event in events:
            if stop.is_set():
                return
            found.put(("event", event))
    except BaseException as error:  # handed to the waiting thread
        if not stop.is_set():
            found.put(("error", error))
        return
    found.put(("done", None))


def _events(found: queue.Queue[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    """The worker's events as they arrive; its error is raised here."""
    while True:
        try:
            kind, item = found.get(timeout=POLL_SECONDS)
        except queue.Empty:
            continue
        if kind == "done":
            return
        if kind == "error":
            raise item
        yield item


def stream_turn(
    graph: Graph, text: str, *, config: RunnableConfig, context: Context, out: TextIO
) -> AIMessage | None:
    """Send ``text`` as the user's message and print the answer as it streams.

    Raises ``TurnInterruptedError`` when a ``KeyboardInterrupt`` arrives while the turn
    runs; the partial answer printed so far is not saved.
    """
    stop = threading.Event()
    found: queue.Queue[tuple[str, Any]] = queue.Queue()
    callbacks = [*cast("list[Any]", config.get("callbacks") or []), _CancelOnStop(stop)]
    # A list of stream modes makes every event a (mode, payload) pair.
    events = cast(
        "Iterator[tuple[str, Any]]",
        graph.stream(
            {"messages": [HumanMessage(content=text)]},
            {**config, "callbacks": callbacks},
            context=context,
            stream_mode=["messages", "updates"],
        ),
    )
    worker = threading.Thread(
        target=_produce, args=(events, found, stop), name="ctxgraph-turn", daemon=True
    )
    worker.start()
    try:
        return _print_events(_events(found), out)
    except KeyboardInterrupt as cause:
        stop.set()
        raise TurnInterruptedError(worker, cause) from None


def _print_events(events: Iterator[tuple[str, Any]], out: TextIO) -> AIMessage | None:
    """Print streamed tokens and tool lines; return the last assistant message written."""
    final: AIMessage | None = None
    mid_line = False
    for mode, payload in events:
        if mode == "messages":
            chunk, metadata = payload
            if (
                isinstance(chunk, AIMessageChunk)
                and metadata.get("langgraph_node") == "model"
                and isinstance(chunk.content, str)
                and chunk.content
            ):
                shown = escape_control(chunk.content)
                out.write(shown if mid_line else "assistant: " + shown)
                mid_line = True
                out.flush()
            continue
        lines: list[str] = []
        for node, messages in _updates(payload):
            for message in messages:
                if isinstance(message, AIMessage):
                    final = message
                    lines.extend(
                        tool_call_line(call["name"], call["args"], call.get("id"))
                        for call in message.tool_calls
                    )
                elif isinstance(message, ToolMessage) and node == "tools":
                    lines.append(tool_result_line(message))
        if lines:
            out.write(("\n" if mid_line else "") + "\n".join(lines) + "\n")
            mid_line = False
            out.flush()
    if mid_line:
        out.write("\n")
    out.flush()
    return final


def _updates(payload: Any) -> list[tuple[str, list[Any]]]:
    """Messages written by each node in one ``updates`` stream event."""
    found: list[tuple[str, list[Any]]] = []
    if isinstance(payload, dict):
        for node, update in payload.items():
            if isinstance(update, dict):
                messages = update.get("messages") or []
                found.append((node, list(messages) if isinstance(messages, list) else [messages]))
    return found
