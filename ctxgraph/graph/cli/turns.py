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
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig

from ctxgraph.graph.builder import Graph
from ctxgraph.graph.cli.notices import OPEN_LINE
from ctxgraph.graph.cli.render import escape_control, tool_call_line, tool_result_line
from ctxgraph.nodes.subagents.stop import stop_all
from ctxgraph.nodes.subagents.tool import TASK_TOOL
from ctxgraph.state.context import Context
from ctxgraph.state.messages import content_text

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
            stream_mode=["values", "messages", "updates"],
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


CALL_TEXT_STARTS = ("{", "[{", "<tool", "<function", "```json", "```JSON")
"""How an answer that is a tool call written as text starts (``nodes.text_tool_calls``)."""


def _print_events(events: Iterator[tuple[str, Any]], out: TextIO) -> AIMessage | None:
    """Print streamed tokens, tool lines and subagent progress; return the last answer written.

    Each message the turn adds is printed once (see ``_TurnPrinter``). A ``task`` call
    with a ``delegations`` entry in the same update is shown by that entry's progress line
    (``delegation_line``) instead of the generic tool-call line; a finished subagent is
    shown by its final entry's line, not by a tool-result line.
    """
    printer = _TurnPrinter(out)
    for mode, payload in events:
        printer.event(mode, payload)
    return printer.close()


class _TurnPrinter:
    """Prints one turn's events, each message the turn adds exactly once.

    Nodes may write messages that are already in the thread: a compaction writes the
    whole kept window again after removing every message. A message is therefore printed
    only when its id is new: not in the state the ``values`` events showed so far (the
    thread before the turn, then after each step) and not printed already. An answer's
    text is printed as its tokens stream from the ``model`` node; an answer that did not
    stream (a reply the graph writes itself, such as the one to an unknown ``/skill``) is
    printed whole from its update.
    """

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._known: set[str] = set()
        """Ids of messages in the thread or already printed: never printed (again)."""
        self._streamed: set[str] = set()
        """Ids of the answers whose text was printed as it streamed."""
        self._model_streamed = False
        """Whether the ``model`` node streamed text since its last update."""
        self._held: set[str] = set()
        """Ids of answers whose streamed text began like a tool call written as text:
        not printed as it streams, but whole from the ``model`` update, where the model
        node has turned it into real tool calls or kept it as the answer with a warning."""
        self.final: AIMessage | None = None
        # A turn cut short (Ctrl-C) ended its line with its own note.
        OPEN_LINE.forget()

    def event(self, mode: str, payload: Any) -> None:
        """Handle one event: a ``(mode, payload)`` of ``values``, ``messages`` or ``updates``."""
        if mode == "values":
            if isinstance(payload, Mapping):
                self._known.update(_ids(payload.get("messages")))
        elif mode == "messages":
            self._token(*payload)
        elif mode == "updates":
            self._write_lines(self._update_lines(payload))

    def close(self) -> AIMessage | None:
        """End the last line; the last answer the turn added."""
        if self._mid_line:
            OPEN_LINE.end()
        self._out.flush()
        return self.final

    @property
    def _mid_line(self) -> bool:
        """Whether the output ends in the middle of a streamed answer's line.

        A warning logged meanwhile ends that line (``OPEN_LINE``), so it never shares it.
        """
        return OPEN_LINE.is_open(self._out)

    def _token(self, chunk: Any, metadata: Mapping[str, Any]) -> None:
        if (
            isinstance(chunk, AIMessageChunk)
            and metadata.get("langgraph_node") == "model"
            and isinstance(chunk.content, str)
            and chunk.content
        ):
            key = chunk.id or ""
            if key in self._held or (
                not self._mid_line and chunk.content.lstrip().startswith(CALL_TEXT_STARTS)
            ):
                self._held.add(key)
                return
            shown = escape_control(chunk.content)
            self._out.write(shown if self._mid_line else "assistant: " + shown)
            OPEN_LINE.opened(self._out)
            self._model_streamed = True
            if chunk.id is not None:
                self._streamed.add(chunk.id)
            self._out.flush()

    def _write_lines(self, lines: list[str]) -> None:
        if lines:
            if self._mid_line:
                OPEN_LINE.end()
            self._out.write("\n".join(lines) + "\n")
            self._out.flush()

    def _new(self, message: object) -> bool:
        """Whether ``message`` is one the turn adds and has not printed; it is then recorded."""
        if not isinstance(message, BaseMessage) or isinstance(message, RemoveMessage):
            return False
        if message.id is None:
            return True
        if message.id in self._known:
            return False
        self._known.add(message.id)
        return True

    def _update_lines(self, payload: Any) -> list[str]:
        """The lines of one ``updates`` event, node by node."""
        lines: list[str] = []
        for node, messages, entries in _updates(payload):
            lines.extend(self._node_lines(node, messages, entries))
        return lines

    def _node_lines(
        self, node: str, messages: list[Any], entries: list[Mapping[str, Any]]
    ) -> list[str]:
        """The lines of what ``node`` wrote: its new messages, then the other delegations."""
        by_call = {str(entry.get("id")): entry for entry in entries}
        covered: set[str] = set()
        streamed = self._streamed_by(node)
        lines: list[str] = []
        for message in messages:
            if not self._new(message):
                continue
            if isinstance(message, AIMessage):
                lines.extend(self._answer_lines(message, by_call, covered, streamed=streamed))
            elif isinstance(message, ToolMessage) and node == "tools":
                lines.append(tool_result_line(message))
        lines.extend(delegation_line(entry) for key, entry in by_call.items() if key not in covered)
        return lines

    def _streamed_by(self, node: str) -> bool:
        """Whether ``node`` is the model and streamed its answer; its stream is then reset."""
        streamed = self._model_streamed and node == "model"
        if node == "model":
            self._model_streamed = False
            self._held.clear()
        return streamed

    def _answer_lines(
        self,
        message: AIMessage,
        by_call: Mapping[str, Mapping[str, Any]],
        covered: set[str],
        *,
        streamed: bool,
    ) -> list[str]:
        """A new answer's text (unless streamed), then a line per tool call; it is ``final``."""
        self.final = message
        lines: list[str] = []
        text = content_text(message)
        if text and not (streamed or message.id in self._streamed):
            lines.append(f"assistant: {escape_control(text)}")
        for call in message.tool_calls:
            entry = by_call.get(str(call.get("id")))
            if call["name"] == TASK_TOOL and entry is not None:
                # The progress line stands for the task call's line.
                lines.append(delegation_line(entry))
                covered.add(str(call.get("id")))
            else:
                lines.append(tool_call_line(call["name"], call["args"], call.get("id")))
        return lines


def _ids(messages: object) -> set[str]:
    """The ids of the messages of a ``values`` event's ``messages`` channel."""
    if not isinstance(messages, list):
        return set()
    return {m.id for m in messages if isinstance(m, BaseMessage) and m.id is not None}


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
