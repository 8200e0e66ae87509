"""The artifacts block: the offloaded contents the folded messages refer to, by ref."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxgraph.nodes.compaction.ledger.block import (
    ARTIFACT,
    Block,
    Bounds,
    Candidate,
    Shown,
    Walk,
    older,
    store_listed,
    store_newest,
    stored_int,
)
from ctxgraph.nodes.compaction.ledger.fields import Ledger
from ctxgraph.nodes.offload.refs import ArtifactMention

MAX_ARTIFACTS = 50
"""Artifact refs the ledger lists (the newest); older ones are counted in ``folded_artifacts``."""


def _artifact(value: object) -> ArtifactMention | None:
    """A stored artifact entry, or None when it names no ref."""
    if not isinstance(value, Mapping) or not isinstance(value.get("ref"), str):
        return None
    kind, tool = value.get("kind"), value.get("tool")
    return {
        "ref": value["ref"],
        "kind": kind if isinstance(kind, str) else "artifact",
        "tool": tool if isinstance(tool, str) else None,
        "tokens": stored_int(value.get("tokens")),
    }


def ledger_artifacts(ledger: Mapping[str, Any]) -> list[ArtifactMention]:
    """The artifact entries of a ledger (any stored shape), oldest first, one per ref."""
    entries = (_artifact(value) for value in ledger.get("artifacts") or ())
    merged: dict[str, ArtifactMention] = {}
    for entry in entries:
        if entry is not None:
            merged.setdefault(entry["ref"], entry)
    return list(merged.values())


def _listed(ledger: Ledger) -> list[ArtifactMention]:
    """The artifacts a ledger in the current shape lists (empty when it has none)."""
    return ledger.get("artifacts") or []


def _folded(ledger: Ledger) -> int:
    return ledger.get("folded_artifacts", 0)


_KEYS = ("artifacts", "folded_artifacts")


def _store(ledger: Ledger, entries: list[ArtifactMention], folded: int) -> None:
    """Set the keys, or leave them out when there is nothing to record."""
    store_listed(ledger, _KEYS, entries, folded)


def _what(entry: ArtifactMention) -> str:
    """What an artifact holds: ``result of read_file``, ``arguments of write_file``, ..."""
    kind, tool = entry["kind"], entry["tool"]
    if kind == "tool_result":
        return f"result of {tool}" if tool else "tool result"
    if kind == "tool_args":
        return f"arguments of {tool}" if tool else "tool arguments"
    return "user input" if kind == "user_input" else kind


def _line(entry: ArtifactMention) -> str:
    """One artifact: its ref, what it holds and its size."""
    size = f", {entry['tokens']:,} tokens" if entry["tokens"] else ""
    return f"- {entry['ref']}: {_what(entry)}{size}"


class ArtifactBlock(Block):
    """OFFLOADED CONTENT: each artifact's ref, what it holds and its size."""

    def read(self, raw: Mapping[str, Any], into: Ledger) -> None:
        """The entries with a ref, one per ref; the folded count."""
        _store(into, ledger_artifacts(raw), stored_int(raw.get("folded_artifacts")))

    def derive(self, walk: Walk, into: Ledger) -> None:
        """The offloaded contents the messages refer to (``messages_artifacts``)."""
        _store(into, walk.artifacts, 0)

    def merge(self, old: Ledger, new: Ledger, shift: int, into: Ledger) -> None:
        """Both lists, one entry per ref (the first kept); the counts added."""
        artifacts = ledger_artifacts({"artifacts": [*_listed(old), *_listed(new)]})
        _store(into, artifacts, _folded(old) + _folded(new))

    def bound(self, ledger: Ledger, bounds: Bounds) -> None:
        """Only the ``max_artifacts`` newest stay listed; the older ones are counted."""
        store_newest(ledger, _KEYS, _listed(ledger), _folded(ledger), bounds.max_artifacts)

    def render(
        self, view: Ledger, above: Sequence[str], unlisted: Mapping[str, int] | None
    ) -> list[str]:
        """The listed artifacts, newest first, then how many are not."""
        artifacts, folded = _listed(view), _folded(view)
        if not (artifacts or folded):
            return []
        lines = [
            "OFFLOADED CONTENT (artifacts, newest first; read one back with "
            'read_artifact(ref="...") or grep_artifact(ref="...", pattern="...")):'
        ]
        lines.extend(_line(entry) for entry in reversed(artifacts))
        if folded:
            lines.append(
                f"{older(folded, 'artifact')} not listed "
                "(their refs are in the archived messages: read_history)"
            )
        return lines

    def candidates(self, full: Ledger) -> list[Candidate]:
        """Each artifact's line, newest first."""
        artifacts = _listed(full)
        return [
            Candidate(ARTIFACT, "artifact", ("artifact", index), _line(artifacts[index]))
            for index in reversed(range(len(artifacts)))
        ]

    def emptied(self, full: Ledger, bare: Ledger, unlisted: dict[str, int]) -> None:
        """No artifact listed, each counted."""
        _store(bare, [], _folded(full) + len(_listed(full)))

    def view(
        self, full: Ledger, picked: set[Shown], view: Ledger, unlisted: dict[str, int]
    ) -> None:
        """The picked artifacts listed, the others counted."""
        artifacts = _listed(full)
        shown = [e for i, e in enumerate(artifacts) if ("artifact", i) in picked]
        _store(view, shown, _folded(full) + len(artifacts) - len(shown))


ARTIFACTS = ArtifactBlock()
