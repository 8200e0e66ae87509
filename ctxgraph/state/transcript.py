"""Messages rendered as a plain transcript: what a summary prompt and ``read_history`` show."""

from __future__ import annotations

import json
from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from ctxgraph.state.messages import content_text, message_origin

_TRUNCATION = "\n[... {omitted} more characters are kept in the thread archive ...]"


def transcript(messages: Sequence[BaseMessage], *, max_chars: int) -> str:
    """Render folded messages as a plain transcript, cutting any single huge message."""
    lines: list[str] = []
    for message in messages:
        text = content_text(message)
        if len(text) > max_chars:
            text = text[:max_chars] + _TRUNCATION.format(omitted=len(text) - max_chars)
        if isinstance(message, ToolMessage):
            status = message.status or "success"
            lines.append(f"tool result [{message.tool_call_id}] ({status}): {text}")
        elif isinstance(message, AIMessage):
            if text:
                lines.append(f"assistant: {text}")
            for call in message.tool_calls:
                arguments = json.dumps(call["args"], ensure_ascii=False, sort_keys=True)
                lines.append(f"assistant called {call['name']}({arguments}) [{call['id']}]")
        else:
            origin = message_origin(message)
            role = f"{message.type} ({origin})" if origin else message.type
            lines.append(f"{role}: {text}")
    return "\n".join(lines)
