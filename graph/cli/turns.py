"""Runs one conversational turn, streaming tokens and tool activity to a text stream."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TextIO, cast

from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig

from ctxgraph.graph.builder import Graph
from ctxgraph.graph.cli.render import tool_call_line, tool_result_line
from ctxgraph.state.context import Context


def stream_turn(
    graph: Graph, text: str, *, config: RunnableConfig, context: Context, out: TextIO
) -> AIMessage | None:
    """Send ``text`` as the user's message and print the answer as it streams."""
    final: AIMessage | None = None
    mid_line = False
    # A list of stream modes makes every event a (mode, payload) pair.
    events = cast(
        "Iterator[tuple[str, Any]]",
        graph.stream(
            {"messages": [HumanMessage(content=text)]},
            config,
            context=context,
            stream_mode=["messages", "updates"],
        ),
    )
    for mode, payload in events:
        if mode == "messages":
            chunk, metadata = payload
            if (
                isinstance(chunk, AIMessageChunk)
                and metadata.get("langgraph_node") == "model"
                and isinstance(chunk.content, str)
                and chunk.content
            ):
                out.write(chunk.content if mid_line else "assistant: " + chunk.content)
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
