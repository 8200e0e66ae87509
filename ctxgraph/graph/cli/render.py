"""Text rendering of messages and tool activity for the terminal."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from ctxgraph.graph.cli.text import escape_control, plural
from ctxgraph.nodes.offload.refs import OFFLOAD_ARGS_KEY, OFFLOAD_KEY
from ctxgraph.state.messages import content_text
from ctxgraph.store.persistence.archive import TAMPERED

__all__ = [
    "LINE_CHARS",
    "PREVIEW_CHARS",
    "archive_marker_line",
    "escape_control",
    "offloaded_args_lines",
    "plural",
    "tampered_marker_line",
    "tool_call_line",
    "tool_result_line",
    "transcript_lines",
]

PREVIEW_CHARS = 300
LINE_CHARS = 100
"""Longest message text in a one-line-per-message preview (resume and demo listings)."""


def archive_marker_line(version: int, folded: int, cursor: object) -> str:
    """The line after an archived compaction's messages in a thread's transcript."""
    were = "was" if folded == 1 else "were"
    return (
        f"──── compaction v{version}: the {plural(folded, 'message')} above {were} folded "
        f"into the summary (cursor {cursor}) ────"
    )


def tampered_marker_line(version: int, reason: str) -> str:
    """The line before the messages of an archived record that fails its stored hashes."""
    return (
        f"!!!! compaction v{version}: {TAMPERED} ({reason}); the messages below may not be "
        "what was said !!!!"
    )


def _clip(text: str, limit: int = PREVIEW_CHARS) -> str:
    flat = " ".join(escape_control(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def tool_call_line(name: str, args: object, call_id: str | None) -> str:
    """One line announcing a tool call."""
    shown = json.dumps(args, ensure_ascii=False, sort_keys=True)
    return f"  → {escape_control(name)}({_clip(shown, 200)}) [{escape_control(str(call_id))}]"


def tool_result_line(message: ToolMessage) -> str:
    """One line showing a tool's result (or its error); an offloaded one names its ref."""
    status = " ERROR" if message.status == "error" else ""
    name = escape_control(message.name or "tool")
    call_id = escape_control(message.tool_call_id)
    line = f"  ←{status} {name} [{call_id}]: {_clip(content_text(message), 200)}"
    offload = message.additional_kwargs.get(OFFLOAD_KEY)
    if isinstance(offload, Mapping) and isinstance(offload.get("ref"), str):
        line += f" [offloaded: artifact {escape_control(offload['ref'])}{_tokens(offload)}]"
    return line


def _tokens(entry: Mapping[str, object]) -> str:
    tokens = entry.get("tokens")
    return f", {tokens:,} tokens" if isinstance(tokens, int) and tokens else ""


def offloaded_args_lines(message: BaseMessage) -> list[str]:
    """One line per tool-call argument of ``message`` offloaded to an artifact."""
    lines: list[str] = []
    for entry in message.additional_kwargs.get(OFFLOAD_ARGS_KEY) or ():
        if isinstance(entry, Mapping) and isinstance(entry.get("ref"), str):
            arg = escape_control(str(entry.get("arg")))
            call_id = escape_control(str(entry.get("call_id")))
            lines.append(
                f"    argument {arg} of [{call_id}] offloaded: artifact "
                f"{escape_control(entry['ref'])}{_tokens(entry)}"
            )
    return lines


def transcript_lines(
    messages: Sequence[BaseMessage],
    *,
    start: int = 1,
    clip: int | None = None,
    notes: Mapping[str, str] | None = None,
) -> list[str]:
    """A numbered transcript, one entry per message (tool calls on their own lines).

    With ``clip``, each message's text is flattened to one line of at most ``clip``
    characters; without, it is printed in full. ``notes`` adds a line after the message
    with that id. Offloaded content is named by its artifact ref.
    """
    lines: list[str] = []

    def text_of(message: BaseMessage) -> str:
        text = content_text(message)
        return escape_control(text) if clip is None else _clip(text, clip)

    for number, message in enumerate(messages, start=start):
        if isinstance(message, HumanMessage):
            lines.append(f"[{number}] user: {text_of(message)}")
        elif isinstance(message, AIMessage):
            text = text_of(message)
            if text or not message.tool_calls:
                lines.append(f"[{number}] assistant: {text}")
            else:
                lines.append(f"[{number}] assistant (tool calls)")
            lines.extend(
                tool_call_line(call["name"], call["args"], call.get("id"))
                for call in message.tool_calls
            )
            lines.extend(offloaded_args_lines(message))
        elif isinstance(message, ToolMessage):
            lines.append(f"[{number}] tool{tool_result_line(message)[3:]}")
        elif isinstance(message, SystemMessage):
            lines.append(f"[{number}] system: {text_of(message)}")
        else:
            lines.append(f"[{number}] {message.type}: {text_of(message)}")
        note = (notes or {}).get(str(message.id))
        if note:
            lines.append(f"    ({escape_control(note)})")
    return lines
