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
from collections.abc import Iterator, Mapping
from typing import Any, TextIO, cast

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig

from ctxgraph.graph.builder import Graph
from ctxgraph.graph.cli.render import escape_control, tool_call_line, tool_result_line
from ctxgraph.nodes.subagents.stop import stop_all
from ctxgraph.nodes.subagents.tool import TASK_TOOL
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
    runs; the partial answer printed so far is not saved, and every running subagent is
    asked to stop (``stop_all``).
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
        # A running subagent stops at its next model call (its flags are checked there).
        stop_all("cancelled")
        raise TurnInterruptedError(worker, cause) from None


def _print_events(events: Iterator[tuple[str, Any]], out: TextIO) -> AIMessage | None:
    """Print streamed tokens, tool lines and subagent progress; return the last answer written.

    A ``task`` call with a ``delegations`` entry in the same update is shown by that
    entry's progress line (``delegation_line``) instead of the generic tool-call line;
    a finished subagent is shown by its final entry's line, not by a tool-result line.
    """
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
        for node, messages, entries in _updates(payload):
            by_call = {str(entry.get("id")): entry for entry in entries}
            covered: set[str] = set()
            for message in messages:
                if isinstance(message, AIMessage):
                    final = message
                    for call in message.tool_calls:
                        entry = by_call.get(str(call.get("id")))
                        if call["name"] == TASK_TOOL and entry is not None:
                            # The progress line stands for the task call's line.
                            lines.append(delegation_line(entry))
                            covered.add(str(call.get("id")))
                        else:
                            lines.append(tool_call_line(call["name"], call["args"], call.get("id")))
                elif isinstance(message, ToolMessage) and node == "tools":
                    lines.append(tool_result_line(message))
            lines.extend(
                delegation_line(entry) for key, entry in by_call.items() if key not in covered
            )
        if lines:
            out.write(("\n" if mid_line else "") + "\n".join(lines) + "\n")
            mid_line = False
            out.flush()
    if mid_line:
        out.write("\n")
    out.flush()
    return final


def _updates(payload: Any) -> list[tuple[str, list[Any], list[Mapping[str, Any]]]]:
    """Messages and ``delegations`` entries written by each node in one ``updates`` event.

    ToolMessages of the ``subagent`` node are not printed by the caller: the progress line
    of their final ``delegations`` entry stands for them.
    """
    found: list[tuple[str, list[Any], list[Mapping[str, Any]]]] = []
    if isinstance(payload, dict):
        for node, update in payload.items():
            if isinstance(update, dict):
                messages = update.get("messages") or []
                entries = update.get("delegations") or []
                if isinstance(entries, Mapping):  # a whole record
                    entries = entries.get("entries") or []
                found.append(
                    (
                        node,
                        list(messages) if isinstance(messages, list) else [messages],
                        [e for e in entries if isinstance(e, Mapping) and e.get("id")]
                        if isinstance(entries, list)
                        else [],
                    )
                )
    return found


def delegation_line(entry: Mapping[str, Any]) -> str:
    """The progress line of a ``delegations`` entry: a started or a finished subagent.

    ``  subagent research: running — find the order`` when it starts;
    ``  subagent research: completed in 2.5s`` when it ends, the stop reason added in
    parentheses unless it is ``final_answer`` (the time is left out when unknown).
    """
    kind = escape_control(str(entry.get("type") or "?"))
    status = escape_control(str(entry.get("status")))
    if entry.get("status") == "running":
        return f"  subagent {kind}: running — {escape_control(str(entry.get('brief') or ''))}"
    line = f"  subagent {kind}: {status}"
    elapsed = entry.get("elapsed_s")
    if isinstance(elapsed, int | float) and not isinstance(elapsed, bool):
        line += f" in {elapsed:.1f}s"
    reason = entry.get("stop_reason")
    if reason and reason != "final_answer":
        line += f" ({escape_control(str(reason))})"
    return line
