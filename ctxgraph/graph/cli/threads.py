"""``ctxgraph threads show|verify|artifact``: a thread's transcript, integrity and artifacts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO, cast

from langchain_core.messages import BaseMessage

from ctxgraph.graph.cli.artifact_text import artifact_text, full_inputs
from ctxgraph.graph.cli.render import (
    archive_marker_line,
    escape_control,
    plural,
    tampered_marker_line,
    transcript_lines,
)
from ctxgraph.graph.cli.usage_table import thread_usage, usage_lines
from ctxgraph.nodes.compaction.jobs import JobResults
from ctxgraph.nodes.compaction.ledger import Ledger, render_ledger
from ctxgraph.nodes.compaction.render import render_sections
from ctxgraph.state.context import validate_label, validate_thread_id
from ctxgraph.state.delegations import STATUSES, DelegationEntry, DelegationRecord
from ctxgraph.state.usage import UsageTotals
from ctxgraph.store.artifacts import ArtifactError, ArtifactStore, UnknownArtifactError
from ctxgraph.store.ownership import check_thread_owner, thread_owner
from ctxgraph.store.persistence.archive import (
    ArchiveRecord,
    RedactionAnchors,
    RedactionNote,
    ThreadArchive,
    committed_version,
    record_messages,
    redaction_anchors,
    tampered_versions,
    verify_versioned,
)
from ctxgraph.store.persistence.compaction_lease import leases_for
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
    delegations: DelegationRecord = field(
        default_factory=lambda: DelegationRecord(entries=[], folded={})
    )
    """The thread's ``task`` calls (``delegations``), oldest first, and folded counts."""
    usage: UsageTotals = field(default_factory=dict)
    """What the thread's model calls cost, per role (``model_usage``)."""
    anchors: dict[str, Any] = field(default_factory=dict)
    """The anchors of the archive's recorded redactions (``redaction_anchors``)."""


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


def saved_values(persistence: Persistence, thread_id: str) -> dict[str, Any]:
    """The channel values of the latest checkpoint of ``thread_id`` (its saved state).

    Raises ``UnknownThreadError`` when the thread has never been saved.
    """
    saved = persistence.checkpointer.get_tuple({"configurable": {"thread_id": thread_id}})
    if saved is None:
        raise UnknownThreadError(f"no thread {thread_id!r} has been saved in this database")
    return dict(saved.checkpoint["channel_values"])


def load_thread(persistence: Persistence, thread_id: str) -> SavedThread:
    """Read the latest checkpoint of ``thread_id`` and every archived compaction."""
    values = saved_values(persistence, thread_id)
    window = [m for m in values.get("messages", []) if isinstance(m, BaseMessage)]
    mark = values.get("compaction")
    committed, prepared = _split_at_mark(
        ThreadArchive(persistence.store, thread_id).versioned(), committed_version(mark)
    )
    return SavedThread(
        window=window,
        summary=values.get("summary"),
        mark=mark,
        archive=[record for _, record in committed],
        versions=[version for version, _ in committed],
        prepared=prepared,
        skills=active_skill_names(values.get("skill_context")),
        delegations=delegation_record(values.get("delegations")),
        usage=thread_usage(values.get("model_usage")),
        anchors=redaction_anchors(persistence.store, thread_id),
    )


def _split_at_mark(
    stored: Sequence[tuple[int, ArchiveRecord]], upto: int | None
) -> tuple[list[tuple[int, ArchiveRecord]], list[tuple[int, ArchiveRecord]]]:
    """``stored`` split into committed (at or below ``upto``; all when None) and prepared."""
    committed = [(v, r) for v, r in stored if upto is None or v <= upto]
    prepared = [(v, r) for v, r in stored if upto is not None and v > upto]
    return committed, prepared


def delegation_record(value: object) -> DelegationRecord:
    """A checkpointed ``delegations`` value as a record (empty when the thread never delegated)."""
    if not isinstance(value, Mapping):
        return DelegationRecord(entries=[], folded={})
    entries = value.get("entries")
    folded = value.get("folded")
    return DelegationRecord(
        entries=[
            cast(DelegationEntry, dict(entry))
            for entry in (entries if isinstance(entries, list) else [])
            if isinstance(entry, Mapping) and entry.get("id")
        ],
        folded=(
            {str(k): v for k, v in folded.items() if isinstance(v, int)}
            if isinstance(folded, Mapping)
            else {}
        ),
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
    subagents: bool = False,
    usage: bool = False,
) -> None:
    """Print every message of the thread: archived compactions first, then the window.

    Only committed compactions are shown. When the committed archive does not verify
    (a version missing or modified, or the mark disagreeing), a marker line under the
    first line says where it breaks (see ``broken_line``). A record whose content no
    longer matches its stored hashes is preceded by a marker line saying it was modified
    after it was archived. A line then names the thread's active skills, if any, and one counts its
    delegations (``task`` calls), if any. ``with_summary`` adds the current summary and
    its ledger, then a line about the thread's background compaction job if it has one
    (see ``job_line``); ``subagents`` then adds a section per delegation with the child's
    transcript (see ``subagent_lines``); ``usage`` then adds the table of what the
    thread's model calls cost per role (see ``usage_lines``); ``clip`` shortens each
    message to one line of at most that many characters.
    """
    thread = load_thread(persistence, thread_id)
    versioned = list(zip(thread.versions, thread.archive, strict=True))
    folded = {version: _readable(record) for version, record in versioned}
    # Offloaded user inputs are shown in full, read back from their artifacts (not when
    # each message is clipped to a line anyway).
    artifacts = ArtifactStore(persistence.store, thread_id) if clip is None else None
    out.write(_header_line(thread_id, thread, folded) + "\n")
    broken = broken_line(thread_id, versioned, thread.mark, thread.anchors)
    if broken is not None:
        out.write(broken + "\n")
    number = _write_archive(out, thread, versioned, folded, artifacts, clip)
    if thread.window:
        _write_transcript(out, thread.window, artifacts, number, clip)
    _write_counts(out, thread)
    if with_summary:
        _write_summary(out, persistence, thread_id, thread)
    if subagents:
        lines = subagent_lines(persistence, thread_id, thread.delegations, clip=clip)
        out.write("\n".join(lines) + "\n")
    if usage:
        out.write("\n" + "\n".join(usage_lines(thread.usage)) + "\n")


def _header_line(
    thread_id: str, thread: SavedThread, folded: Mapping[int, list[BaseMessage] | None]
) -> str:
    """The first line of ``show_thread``: how many messages, archived and in the window."""
    archived = sum(len(messages or []) for messages in folded.values())
    total = archived + len(thread.window)
    shown_id = escape_control(thread_id)
    if not thread.archive:
        return f"thread {shown_id}: {plural(total, 'message')}"
    return (
        f"thread {shown_id}: {plural(total, 'message')} ({archived} archived in "
        f"{plural(len(thread.archive), 'compaction')}, {len(thread.window)} in the window)"
    )


def _write_archive(
    out: TextIO,
    thread: SavedThread,
    versioned: Sequence[tuple[int, ArchiveRecord]],
    folded: Mapping[int, list[BaseMessage] | None],
    artifacts: ArtifactStore | None,
    clip: int | None,
) -> int:
    """Print each committed compaction's messages and marker; return the next message number."""
    modified = tampered_versions(versioned, thread.mark, thread.anchors)
    number = 1
    for version, record in versioned:
        messages = folded[version]
        if version in modified:
            out.write(tampered_marker_line(version, modified[version]) + "\n")
        if messages is None:
            out.write(f"(the messages of compaction v{version} cannot be read)\n")
            continue
        if messages:
            _write_transcript(out, messages, artifacts, number, clip)
        number += len(messages)
        marker = archive_marker_line(version, len(messages), record.get("cursor"))
        if (record.get("summary") or {}).get("degraded"):
            marker += " (degraded: model-free summary)"
        out.write(marker + "\n")
    return number


def _write_transcript(
    out: TextIO,
    messages: Sequence[BaseMessage],
    artifacts: ArtifactStore | None,
    number: int,
    clip: int | None,
) -> None:
    """Print ``messages`` numbered from ``number``, offloaded inputs read back in full."""
    shown, notes = full_inputs(messages, artifacts)
    lines = transcript_lines(shown, start=number, clip=clip, notes=notes)
    out.write("\n".join(lines) + "\n")


def _write_counts(out: TextIO, thread: SavedThread) -> None:
    """Print the thread's active skills and its delegation count, each when it has any."""
    if thread.skills:
        out.write(f"active skills: {escape_control(', '.join(thread.skills))}\n")
    counted = delegations_line(thread.delegations)
    if counted:
        out.write(counted + "\n")


def _write_summary(
    out: TextIO, persistence: Persistence, thread_id: str, thread: SavedThread
) -> None:
    """Print the current summary and ledger, then the background job's line if any."""
    out.write("\n" + escape_control(summary_text(thread)) + "\n")
    pending = job_line(persistence, thread_id, thread.mark)
    if pending is not None:
        out.write(pending + "\n")


def broken_line(
    thread_id: str,
    versioned: Sequence[tuple[int, ArchiveRecord]],
    mark: Mapping[str, Any] | None,
    anchors: RedactionAnchors | None = None,
) -> str | None:
    """A marker line when the thread's committed archive does not verify, else None.

    The whole chain is checked against the mark, as ``threads verify`` does (a missing or
    modified version, a mark that disagrees, a redaction entry no anchor records);
    prepared leftovers do not count.
    """
    report = verify_versioned(versioned, mark, anchors)
    if report.ok:
        return None
    return (
        f"!!!! the archive of thread {escape_control(thread_id)} does not verify: broken at "
        f"version {report.first_broken_version}: {escape_control(str(report.reason))}; "
        f"`ctxgraph threads verify {escape_control(thread_id)}` !!!!"
    )


def _status_counts(record: DelegationRecord, *, folded_only: bool = False) -> str:
    """``2 completed, 1 failed``: entries (unless ``folded_only``) and folded ones by status."""
    counts: dict[str, int] = {}
    if not folded_only:
        for entry in record["entries"]:
            counts[entry["status"]] = counts.get(entry["status"], 0) + 1
    for status, count in record["folded"].items():
        counts[status] = counts.get(status, 0) + count
    order = [s for s in STATUSES if s in counts] + sorted(set(counts) - set(STATUSES))
    return ", ".join(f"{counts[status]} {escape_control(status)}" for status in order)


def delegations_line(record: DelegationRecord) -> str | None:
    """``delegations: 3 (2 completed, 1 failed)``, folded ones included; None if there are none."""
    total = len(record["entries"]) + sum(record["folded"].values())
    if not total:
        return None
    return f"delegations: {total} ({_status_counts(record)})"


def subagent_header(entry: DelegationEntry) -> str:
    """``subagent research (task call c1): completed (final_answer), 2.5s, 120 in / 40 out``.

    The stop reason, time and token counts are left out when the entry has none (a
    running one).
    """
    line = (
        f"subagent {escape_control(str(entry.get('type')))} "
        f"(task call {escape_control(str(entry.get('id')))}): "
        f"{escape_control(str(entry.get('status')))}"
    )
    reason = entry.get("stop_reason")
    if reason:
        line += f" ({escape_control(str(reason))})"
    elapsed = entry.get("elapsed_s")
    if isinstance(elapsed, int | float) and not isinstance(elapsed, bool):
        line += f", {elapsed:.1f}s"
    tokens_in, tokens_out = entry.get("tokens_in"), entry.get("tokens_out")
    if isinstance(tokens_in, int) and isinstance(tokens_out, int):
        line += f", {tokens_in} in / {tokens_out} out"
    return line


def subagent_lines(
    persistence: Persistence,
    thread_id: str,
    record: DelegationRecord,
    *,
    clip: int | None = None,
) -> list[str]:
    """A section per delegation, in record order, then a line counting folded ones.

    Each section is a blank line, the header (``subagent_header``), the brief, then the
    child's transcript: read from the child's checkpoint (namespace ``checkpoint_ns``
    under the thread), else the text of its transcript artifact, else a line saying it
    cannot be found. A line before the transcript names its source. A thread without
    delegations gets a line saying so.
    """
    if not record["entries"] and not record["folded"]:
        return ["", "no delegations: the thread has not called the task tool"]
    artifacts = ArtifactStore(persistence.store, thread_id)
    lines: list[str] = []
    for entry in record["entries"]:
        lines.extend(["", subagent_header(entry)])
        lines.append(f"  brief: {escape_control(str(entry.get('brief') or ''))}")
        lines.extend(_child_transcript(persistence, thread_id, entry, artifacts, clip))
    if record["folded"]:
        lines.extend(
            [
                "",
                "earlier delegations, folded out of the record (no transcript shown): "
                + _status_counts(record, folded_only=True),
            ]
        )
    return lines


def _child_transcript(
    persistence: Persistence,
    thread_id: str,
    entry: DelegationEntry,
    artifacts: ArtifactStore,
    clip: int | None,
) -> list[str]:
    """The source line and transcript of one child: checkpoint, artifact, or neither."""
    ns = entry.get("checkpoint_ns")
    if isinstance(ns, str) and ns:
        saved = persistence.checkpointer.get_tuple(
            {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
        )
        shown_ns = escape_control(ns)
        if saved is None:
            missing = f"no checkpoint of the child at namespace {shown_ns}"
        else:
            values = saved.checkpoint["channel_values"]
            messages = [m for m in values.get("messages", []) if isinstance(m, BaseMessage)]
            if messages:
                return [
                    f"transcript from the child's checkpoint (namespace {shown_ns}):",
                    *transcript_lines(messages, clip=clip),
                ]
            missing = f"the child's checkpoint at namespace {shown_ns} holds no messages"
    else:
        missing = "no checkpoint namespace recorded for the child"
    ref = entry.get("transcript_ref")
    if not isinstance(ref, str) or not ref:
        return [f"the transcript cannot be found: {missing} and no transcript artifact"]
    text, problem = artifact_text(artifacts, ref, None)
    if text is None:
        return [
            f"the transcript cannot be found: {missing}, and transcript artifact "
            f"{escape_control(ref)} {escape_control(problem)}"
        ]
    return [
        f"transcript from artifact {escape_control(ref)} ({missing}):",
        escape_control(text.rstrip("\n")),
    ]


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


def job_line(
    persistence: Persistence, thread_id: str, mark: Mapping[str, Any] | None
) -> str | None:
    """A line about the thread's background compaction job, or None when there is none.

    A stored result for the thread's current compaction version (0 before the first) is
    ready to apply; otherwise a live lease means a job is running.
    """
    version = committed_version(mark) or 0
    result = JobResults(persistence.store, thread_id).ready(version)
    if result is not None:
        return (
            "background compaction: a job result is ready (folds "
            f"{plural(len(result.folded_ids), 'message')} of v{result.base_version}, stored "
            f"{escape_control(result.stored_at)}); the next turn that reaches a trigger "
            "applies it"
        )
    lease = leases_for(persistence.store).current(thread_id)
    if lease is not None and lease.live:
        return (
            f"background compaction: a job is running (holder {escape_control(lease.holder)}, "
            f"token {lease.token})"
        )
    return None


def verify_thread_command(persistence: Persistence, thread_id: str, out: TextIO) -> int:
    """Recompute checksums and the hash chain; exit status 0 when intact, 1 when broken.

    Versions above the thread's mark are prepared leftovers of an interrupted compaction:
    they are named on a line of their own and do not make the thread broken. Recorded
    redactions (``forget``) keep the thread intact and are listed on the intact line.
    """
    thread = load_thread(persistence, thread_id)
    committed = list(zip(thread.versions, thread.archive, strict=True))
    report = verify_versioned(committed, thread.mark, thread.anchors)
    if report.ok:
        checked = plural(report.versions_checked, "compaction version")
        out.write(
            f"thread {thread_id}: intact ({checked} verified against the thread state)"
            f"{redactions_text(report.redactions)}\n"
        )
    else:
        out.write(
            f"thread {thread_id}: BROKEN at version {report.first_broken_version}: "
            f"{report.reason}\n"
        )
    if thread.prepared:
        out.write(_leftover_line(thread_id, [v for v, _ in thread.prepared], thread.mark) + "\n")
    return 0 if report.ok else 1


def redactions_text(notes: Sequence[RedactionNote]) -> str:
    """``, 2 redactions: <at> fact in v1, v2; <at> text in v3`` (empty without any)."""
    if not notes:
        return ""
    listed = "; ".join(
        f"{escape_control(note.at)} {escape_control(note.kind)} in "
        + ", ".join(f"v{version}" for version in note.versions)
        for note in notes
    )
    return f", {plural(len(notes), 'redaction')}: {listed}"


def _leftover_line(thread_id: str, versions: list[int], mark: dict[str, Any] | None) -> str:
    listed = ", ".join(f"v{version}" for version in versions)
    it_is = "it is a prepared leftover" if len(versions) == 1 else "they are prepared leftovers"
    return (
        f"thread {thread_id}: also found {listed} above the committed mark "
        f"(v{committed_version(mark)}): {it_is} of an interrupted compaction, not part of "
        "the history and harmless; "
        + ("the next compaction replaces it" if len(versions) == 1 else "compactions replace them")
    )
