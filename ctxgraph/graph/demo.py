"""``demo_reply``: one offline responder that plays every role (chat, summary, memory)."""

from __future__ import annotations

from langchain_core.messages import AIMessage, BaseMessage

from ctxgraph.nodes.compaction.summarizer import SUMMARY_SYSTEM
from ctxgraph.nodes.memory.extract import EXTRACTION_SYSTEM
from ctxgraph.state.demo_replies import demo_chat_reply, demo_memory, demo_summary
from ctxgraph.state.messages import content_text

__all__ = ["demo_reply"]


def demo_reply(messages: list[BaseMessage]) -> AIMessage:
    """Answer any request: summary and extraction calls by their prompt, the rest as chat.

    For a single scripted model that serves all three roles; ``demo_models`` gives each
    role its own model instead.
    """
    if messages and content_text(messages[0]) == SUMMARY_SYSTEM:
        return demo_summary(content_text(messages[-1]))
    if messages and content_text(messages[0]) == EXTRACTION_SYSTEM:
        return demo_memory(content_text(messages[-1]))
    return demo_chat_reply(messages)
