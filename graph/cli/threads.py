"""``ctxgraph threads show|verify``: a thread's full transcript and its integrity."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TextIO

from langchain_core.messages import BaseMessage

from ctxgraph.graph.cli.render import plural, transcript_lines
from ctxgraph.nodes.compaction.ledger import Ledger, render_ledger
from ctxgraph.nodes.compaction.render import render_sections
from ctxgraph.store.persistence.archive import (
    ArchiveRecord,
    ThreadArchive,
    record_messages,
    verify_records,
)
from ctxgraph.store.persistence.connection import Persistence


class UnknownThreadError(LookupError):
    """No checkpoint exists for the requested thread."""


@dataclass(frozen=True)
class SavedThread:
    """A thread as persisted: the checkpointed window, summary and mark, and its archive."""

    window: list[BaseMessage]
    summary: dict[str, Any] | None
    mark: dict[str, Any] | None
    archive: list[ArchiveRecord]


def load_thread(persistence: Persistence, thread_id: str) -> SavedThread:
    """Read the latest checkpoint of ``thread_id`` and every archived compaction."""
    saved = persistence.checkpointer.get_tuple({"configurable": {"thread_id": thread_id}})
    if saved is None:
        raise UnknownThreadError(f"no thread {thread_id!r} has been saved in this database")
    values = saved.checkpoint["channel_values"]
    window = [m for m in values.get("messages", []) if isinstance(m, BaseMessage)]
    return SavedThread(
        window=window,
        summary=values.get("summary"),
        mark=values.get("compaction"),
        archive=ThreadArchive(persistence.store, thread_id).records(),
    )


def show_thread(
    persistence: Persistence,
    thread_id: str,
    out: TextIO,
    *,
    with_summary: bool = False,
    clip: int | None = None,
) -> None:
    """Print every message of the thread: archived compactions first, then the window.

    ``with_summary`` adds the current summary and its ledger; ``clip`` shortens each
    message to one line of at most that many characters.
    """
    thread = load_thread(persistence, thread_id)
    archived = sum(len(record["messages"]) for record in thread.archive)
    total = archived + len(thread.window)
    if thread.archive:
        out.write(
            f"thread {thread_id}: {plural(total, 'message')} ({archived} archived in "
            f"{plural(len(thread.archive), 'compaction')}, {len(thread.window)} in the window)\n"
        )
    else:
        out.write(f"thread {thread_id}: {plural(total, 'message')}\n")
    number = 1
    for record in thread.archive:
        messages = record_messages(record)
        out.write("\n".join(transcript_lines(messages, start=number, clip=clip)) + "\n")
        number += len(messages)
        were = "was" if len(messages) == 1 else "were"
        out.write(
            f"──── compaction v{record['version']}: the {plural(len(messages), 'message')} "
            f"above {were} folded into the summary (cursor {record['cursor']}) ────\n"
        )
    if thread.window:
        out.write("\n".join(transcript_lines(thread.window, start=number, clip=clip)) + "\n")
    if with_summary:
        out.write("\n" + summary_text(thread) + "\n")


def summary_text(thread: SavedThread) -> str:
    """The current summary's sections, then its ledger (the record code keeps of the thread)."""
    if not thread.summary:
        return "no summary yet: the thread has not been compacted"
    version = (thread.mark or {}).get("version", "?")
    ledger: Ledger | None = thread.summary.get("ledger")
    rendered = render_ledger(ledger) if ledger else ""
    return (
        f"current summary (v{version}):\n{render_sections(thread.summary)}\n\n"
        "ledger (recorded by code from the folded messages: tool-call states, user "
        f"constraints, identifiers):\n{rendered or '(empty)'}"
    )


def verify_thread_command(persistence: Persistence, thread_id: str, out: TextIO) -> int:
    """Recompute checksums and the hash chain; exit status 0 when intact, 1 when broken."""
    thread = load_thread(persistence, thread_id)
    report = verify_records(thread.archive, thread.mark)
    if report.ok:
        checked = plural(report.versions_checked, "compaction version")
        out.write(f"thread {thread_id}: intact ({checked} verified against the thread state)\n")
        return 0
    out.write(
        f"thread {thread_id}: BROKEN at version {report.first_broken_version}: {report.reason}\n"
    )
    return 1
