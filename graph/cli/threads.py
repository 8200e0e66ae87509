"""``ctxgraph threads show``: print a thread's persisted transcript."""

from __future__ import annotations

from typing import TextIO

from langchain_core.messages import BaseMessage

from graph.cli.render import transcript_lines
from store.persistence import Persistence


class UnknownThreadError(LookupError):
    """No checkpoint exists for the requested thread."""


def thread_messages(persistence: Persistence, thread_id: str) -> list[BaseMessage]:
    """The committed working window of ``thread_id`` as stored by the checkpointer."""
    saved = persistence.checkpointer.get_tuple({"configurable": {"thread_id": thread_id}})
    if saved is None:
        raise UnknownThreadError(f"no thread {thread_id!r} has been saved in this database")
    messages = saved.checkpoint["channel_values"].get("messages", [])
    return [m for m in messages if isinstance(m, BaseMessage)]


def show_thread(persistence: Persistence, thread_id: str, out: TextIO) -> None:
    """Print the transcript of ``thread_id``."""
    messages = thread_messages(persistence, thread_id)
    out.write(f"thread {thread_id}: {len(messages)} messages\n")
    out.write("\n".join(transcript_lines(messages)) + "\n")
