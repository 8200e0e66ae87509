"""``ctxgraph threads show|verify|artifact``: a thread's transcript, integrity and artifacts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from langchain_core.messages import BaseMessage

from ctxgraph.graph.cli.render import (
    archive_marker_line,
    escape_control,
    plural,
    tampered_marker_line,
    transcript_lines,
)
from ctxgraph.nodes.compaction.ledger import Ledger, render_ledger
from ctxgraph.nodes.compaction.render import render_sections
from ctxgraph.nodes.offload.refs import OFFLOAD_KEY
from ctxgraph.state.context import validate_label, validate_thread_id
from ctxgraph.store.artifacts import ArtifactError, ArtifactStore, UnknownArtifactError
from ctxgraph.store.ownership import check_thread_owner, thread_owner
from ctxgraph.store.persistence.archive import (
    ArchiveRecord,
    ThreadArchive,
    committed_version,
    record_messages,
    tampered_versions,
    verify_versioned,
)
from ctxgraph.store.persistence.connection import Persistence


class UnknownThreadError(LookupError):
    """No checkpoint exists for the requested thread."""


class UnknownArtifactRefError(LookupError):
    """The thread has no artifact with the requested ref."""


@dataclass(frozen=True)
class SavedThread:
    """A thread as persisted: the checkpointed window, summary and mark, and its archive.

    ``archive`` holds the committed versions only, those at or below the mark; the
    versions above it are ``prepared``: leftovers of an interrupted compaction, which are
    not part of the history.
    """

    window: list[BaseMessage]
    summary: dict[str, Any] | None
    mark: dict[str, Any] | None
    archive: list[ArchiveRecord]
    versions: list[int] = field(default_factory=list)
    """The Store version of each record of ``archive``."""
    prepared: list[tuple[int, ArchiveRecord]] = field(default_factory=list)
    skills: list[str] = field(default_factory=list)
    """The names of the thread's active skills (``skill_context``), most recent last."""


def check_owner(persistence: Persistence, thread_id: str, user_id: str | None) -> str:
    """Check ``thread_id`` and that ``user_id`` may read it, before the thread is read.

    Returns the thread id. Raises ``ContextError`` for a thread id or user id that breaks
    the id rules, and ``ThreadOwnerError`` (a ``ContextError``) when the thread belongs to
    another user. Without a ``user_id`` (no ``--user``) only the thread id is checked: the
    command line reads the database directly, so an operator who can open it may read
    any thread. A thread with no recorded owner (saved before owners were recorded) can
    be read by anyone.
    """
    validate_thread_id(thread_id)
    if user_id is not None:
        validate_label("--user", user_id)
        check_thread_owner(thread_owner(persistence.store, thread_id), thread_id, user_id)
    return thread_id


def load_thread(persistence: Persistence, thread_id: str) -> SavedThread:
    """Read the latest checkpoint of ``thread_id`` and every archived compaction."""
    saved = persistence.checkpointer.get_tuple({"configurable": {"thread_id": thread_id}})
    if saved is None:
        raise UnknownThreadError(f"no thread {thread_id!r} has been saved in this database")
    values = saved.checkpoint["channel_values"]
    window = [m for m in values.get("messages", []) if isinstance(m, BaseMessage)]
    mark = values.get("compaction")
    upto = committed_version(mark)
    stored = ThreadArchive(persistence.store, thread_id).versioned()
    committed = [(v, r) for v, r in stored if upto is None or v <= upto]
    return SavedThread(
        window=window,
        summary=values.get("summary"),
        mark=mark,
        archive=[record for _, record in committed],
        versions=[version for version, _ in committed],
        prepared=[(v, r) for v, r in stored if upto is not None and v > upto],
        skills=active_skill_names(values.get("skill_context")),
    )


def active_skill_names(skill_context: object) -> list[str]:
    """The names in a checkpointed ``skill_context`` (a list of entries), in its order."""
    if not isinstance(skill_context, list):
        return []
    return [
        str(entry["name"])
        for entry in skill_context
        if isinstance(entry, Mapping) and entry.get("name")
    ]


def show_thread(
    persistence: Persistence,
    thread_id: str,
    out: TextIO,
    *,
    with_summary: bool = False,
    clip: int | None = None,
) -> None:
    """Print every message of the thread: archived compactions first, then the window.

    Only committed compactions are shown. A record whose content no longer matches its
    stored hashes is preceded by a marker line saying it was modified after it was
    archived. A line then names the thread's active skills, if any. ``with_summary`` adds
    the current summary and its ledger; ``clip`` shortens each message to one line of at
    most that many characters.
    """
    thread = load_thread(persistence, thread_id)
    versioned = list(zip(thread.versions, thread.archive, strict=True))
    modified = tampered_versions(versioned, thread.mark)
    folded = {version: _readable(record) for version, record in versioned}
    archived = sum(len(messages or []) for messages in folded.values())
    total = archived + len(thread.window)
    # Offloaded user inputs are shown in full, read back from their artifacts (not when
    # each message is clipped to a line anyway).
    artifacts = ArtifactStore(persistence.store, thread_id) if clip is None else None
    thread_id = escape_control(thread_id)
    if thread.archive:
        out.write(
            f"thread {thread_id}: {plural(total, 'message')} ({archived} archived in "
            f"{plural(len(thread.archive), 'compaction')}, {len(thread.window)} in the window)\n"
        )
    else:
        out.write(f"thread {thread_id}: {plural(total, 'message')}\n")
    number = 1
    for version, record in versioned:
        messages = folded[version]
        if version in modified:
            out.write(tampered_marker_line(version, modified[version]) + "\n")
        if messages is None:
            out.write(f"(the messages of compaction v{version} cannot be read)\n")
            continue
        if messages:
            shown, notes = full_inputs(messages, artifacts)
            lines = transcript_lines(shown, start=number, clip=clip, notes=notes)
            out.write("\n".join(lines) + "\n")
        number += len(messages)
        out.write(archive_marker_line(version, len(messages), record.get("cursor")) + "\n")
    if thread.window:
        shown, notes = full_inputs(thread.window, artifacts)
        lines = transcript_lines(shown, start=number, clip=clip, notes=notes)
        out.write("\n".join(lines) + "\n")
    if thread.skills:
        out.write(f"active skills: {escape_control(', '.join(thread.skills))}\n")
    if with_summary:
        out.write("\n" + escape_control(summary_text(thread)) + "\n")


def full_inputs(
    messages: Sequence[BaseMessage], artifacts: ArtifactStore | None
) -> tuple[list[BaseMessage], dict[str, str]]:
    """The messages with each offloaded user input's full text read back from its artifact.

    Also returns a note per such message id: that the text comes from the artifact (the
    model saw its head and tail), or that the artifact is missing or does not match, in
    which case the message is shown as the model saw it. Without ``artifacts``, the
    messages are returned as they are.
    """
    shown: list[BaseMessage] = []
    notes: dict[str, str] = {}
    if artifacts is None:
        return list(messages), notes
    for message in messages:
        offload = message.additional_kwargs.get(OFFLOAD_KEY)
        if message.type != "human" or not isinstance(offload, Mapping):
            shown.append(message)
            continue
        ref = str(offload.get("ref"))
        text, problem = _artifact_text(artifacts, ref, offload.get("sha256"))
        if text is None:
            notes[str(message.id)] = (
                f"the full text of this input was offloaded to artifact {ref}, which {problem}; "
                "shown as the model saw it"
            )
            shown.append(message)
            continue
        notes[str(message.id)] = (
            f"full text from artifact {ref}; the model saw its beginning and end and the ref"
        )
        shown.append(message.model_copy(update={"content": text}))
    return shown, notes


def _artifact_text(artifacts: ArtifactStore, ref: str, sha256: object) -> tuple[str | None, str]:
    """The artifact's text, or None and what is wrong with it."""
    try:
        artifact = artifacts.get(ref)
        if artifact is None:
            return None, "is missing (evicted, or never stored)"
        if isinstance(sha256, str) and sha256 != artifact.sha256:
            return None, "holds different content than this message recorded"
        return artifacts.read_text(ref), ""
    except ArtifactError as error:
        return None, f"cannot be read ({error})"


def print_artifact(
    persistence: Persistence, thread_id: str, ref: str, out: TextIO, err: TextIO
) -> int:
    """Write the full content of artifact ``ref`` of ``thread_id`` to ``out``, as stored.

    Raises ``UnknownThreadError`` for a thread never saved and ``UnknownArtifactRefError``
    for a ref the thread has no artifact under (malformed, or evicted). A damaged artifact
    is reported on ``err`` with exit status 1. On a terminal, control characters are shown
    escaped; otherwise the output is exactly the stored text, so ``> file`` recovers it.
    """
    if persistence.checkpointer.get_tuple({"configurable": {"thread_id": thread_id}}) is None:
        raise UnknownThreadError(f"no thread {thread_id!r} has been saved in this database")
    artifacts = ArtifactStore(persistence.store, thread_id)
    try:
        text = artifacts.read_text(ref) if artifacts.get(ref) is not None else None
    except UnknownArtifactError:
        text = None
    except ArtifactError as error:
        err.write(f"ctxgraph: artifact {ref!r} of thread {thread_id!r} cannot be read: {error}\n")
        return 1
    if text is None:
        raise UnknownArtifactRefError(
            f"thread {thread_id!r} has no artifact {ref!r} (a ref is 'art-' and 24 hex "
            "digits; it may have been evicted): `ctxgraph threads show "
            f"{thread_id}` shows the refs of its offloaded content"
        )
    isatty = getattr(out, "isatty", None)
    out.write(escape_control(text) if callable(isatty) and isatty() else text)
    return 0


def _readable(record: ArchiveRecord) -> list[BaseMessage] | None:
    """A record's messages, or None when a damaged record's messages cannot be read."""
    try:
        return record_messages(record)
    except (KeyError, TypeError, ValueError):
        return None


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
    """Recompute checksums and the hash chain; exit status 0 when intact, 1 when broken.

    Versions above the thread's mark are prepared leftovers of an interrupted compaction:
    they are named on a line of their own and do not make the thread broken.
    """
    thread = load_thread(persistence, thread_id)
    committed = list(zip(thread.versions, thread.archive, strict=True))
    report = verify_versioned(committed, thread.mark)
    if report.ok:
        checked = plural(report.versions_checked, "compaction version")
        out.write(f"thread {thread_id}: intact ({checked} verified against the thread state)\n")
    else:
        out.write(
            f"thread {thread_id}: BROKEN at version {report.first_broken_version}: "
            f"{report.reason}\n"
        )
    if thread.prepared:
        out.write(_leftover_line(thread_id, [v for v, _ in thread.prepared], thread.mark) + "\n")
    return 0 if report.ok else 1


def _leftover_line(thread_id: str, versions: list[int], mark: dict[str, Any] | None) -> str:
    listed = ", ".join(f"v{version}" for version in versions)
    it_is = "it is a prepared leftover" if len(versions) == 1 else "they are prepared leftovers"
    return (
        f"thread {thread_id}: also found {listed} above the committed mark "
        f"(v{committed_version(mark)}): {it_is} of an interrupted compaction, not part of "
        "the history and harmless; "
        + ("the next compaction replaces it" if len(versions) == 1 else "compactions replace them")
    )
