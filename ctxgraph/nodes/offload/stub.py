"""The short text standing in for an offloaded tool result, or for one that was not saved."""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ctxgraph.state.tokens import count_text
from ctxgraph.store.artifacts.layout import physical_lines, window_count

MAX_STUB_TOKENS = 1_500
"""Largest stub (or unsaved-result text) in tokens, counted with ``count_text``."""

LINE_CHARS = 300
"""A shown line is cut after this many characters, with a marker saying how long it was."""

NAME_CHARS = 80
"""Tool names, keys and column names are cut after this many characters."""

LISTED_NAMES = 20
"""At most this many keys or columns are listed in a synopsis."""

SYNOPSIS_MAX_CHARS = 10_000_000
"""Longer results get no JSON/table synopsis (parsing them costs too much)."""

REASON_CHARS = 300
"""The error named in an unsaved-result notice is cut after this many characters."""

READ_PAGE = 200
"""The ``limit`` the usage line suggests for ``read_artifact``."""


class ArtifactFacts(Protocol):
    """What the stub tells about a stored artifact (``ctxgraph.store.artifacts.Artifact``)."""

    @property
    def ref(self) -> str:
        """The artifact's id, ``art-...``."""
        ...

    @property
    def size_bytes(self) -> int:
        """UTF-8 size of the stored text."""
        ...

    @property
    def tokens(self) -> int:
        """Tokens of the stored text."""
        ...

    @property
    def lines(self) -> int:
        """Lines of the stored text."""
        ...


def offload_stub(artifact: ArtifactFacts, text: str, *, tool_name: str) -> str:
    """The stub for ``text`` (a tool result) stored as ``artifact``: within ``MAX_STUB_TOKENS``.

    It gives the ref, the size in bytes, tokens and lines, a synopsis (JSON shape, table
    columns and rows) where one applies, the first and last lines, and the exact calls
    that read the artifact back. The same inputs always give the same text.
    """
    ref = artifact.ref
    header = [
        f"[tool result offloaded] The result of {_name(tool_name)} was too large to keep in "
        f"the conversation; it is stored in full as artifact {ref}.",
        f"ref: {ref}",
        f"size: {_many(artifact.size_bytes, 'byte')}, {_many(artifact.tokens, 'token')}, "
        f"{_many(artifact.lines, 'line')}",
    ]
    usage = [
        "Read it back in pages of lines, or find the lines that match a pattern:",
        f'read_artifact(ref="{ref}", offset=0, limit={READ_PAGE})',
        f'grep_artifact(ref="{ref}", pattern="...")',
    ]
    synopsis = _synopsis(text)
    lines = _Lines.of(text)

    def render(head: int, tail: int, cut: int, with_synopsis: bool) -> str:
        parts = list(header)
        if synopsis and with_synopsis:
            parts.append(f"synopsis: {synopsis}")
        parts.extend(_excerpt(lines, head, tail, cut))
        parts.extend(usage)
        return "\n".join(parts)

    return _first_fitting(render(*size) for size in _STUB_SIZES)


def unsaved_text(text: str, *, tool_name: str, tokens: int, reason: str) -> str:
    """What replaces ``text`` (``tokens`` long) when it could not be stored.

    A notice that the full output was NOT saved and why (``reason``, e.g. the error), then
    the beginning and the end of ``text``; there is no ref. The whole text stays within
    ``MAX_STUB_TOKENS``.
    """
    size = len(text.encode("utf-8", errors="surrogatepass"))
    lines = len(text.splitlines())
    notice = (
        f"[tool result NOT saved] The result of {_name(tool_name)} was too large to keep in "
        f"the conversation ({_many(tokens, 'token')}, {_many(size, 'byte')}, "
        f"{_many(lines, 'line')}), and the "
        f"full output was NOT saved: {_cut(' '.join(reason.split()), REASON_CHARS)}. Only "
        "its beginning and end are shown below; the rest is lost. Run the tool again with "
        "narrower arguments if you need more of it."
    )

    def render(head: int, tail: int) -> str:
        if head + tail >= len(text):
            return f"{notice}\n--- output ---\n{text}"
        tail_text = text[len(text) - tail :] if tail else ""
        omitted = len(text) - head - tail
        return (
            f"{notice}\n--- beginning ---\n{text[:head]}\n"
            f"[... {omitted:,} characters not shown ...]\n--- end ---\n{tail_text}"
        )

    return _first_fitting(render(head, head // 2) for head in _UNSAVED_HEADS)


_STUB_SIZES: tuple[tuple[int, int, int, bool], ...] = (
    (8, 5, LINE_CHARS, True),
    (5, 3, 200, True),
    (3, 2, 120, True),
    (2, 1, 80, False),
    (1, 1, 40, False),
    (0, 0, 0, False),
)
"""(head lines, tail lines, characters per line, synopsis), tried in order until one fits."""

_UNSAVED_HEADS = (2_400, 1_600, 1_000, 600, 300, 150, 60, 0)
"""Characters of the beginning of an unsaved result, tried in order; the end gets half."""


def _first_fitting(renderings: Iterable[str]) -> str:
    """The first rendering (largest first) within ``MAX_STUB_TOKENS``; else the last."""
    text = ""
    for text in renderings:
        if count_text(text) <= MAX_STUB_TOKENS:
            return text
    return text


def _name(tool_name: str) -> str:
    return f"the tool `{_cut(tool_name, NAME_CHARS)}`" if tool_name else "a tool"


def _many(count: int, noun: str) -> str:
    """``1 line``, ``2,000 lines``."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def _cut(text: str, limit: int) -> str:
    """``text`` cut after ``limit`` characters, with a marker saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...[cut, {len(text):,} chars]"


def _excerpt(lines: _Lines, head: int, tail: int, cut: int) -> list[str]:
    """The ``head`` first and ``tail`` last lines, each cut after ``cut`` characters.

    The tail says the ``read_artifact`` offset (display line) it starts at.
    """
    physical = lines.physical
    if head + tail == 0 or not physical:
        return []
    if len(physical) <= head + tail:
        label = "the only line:" if len(physical) == 1 else "every line:"
        return [label, *(_shown_line(line, cut) for line in physical)]
    out = [f"first {_many(head, 'line')}:", *(_shown_line(line, cut) for line in physical[:head])]
    if tail:
        last = physical[-tail:]
        offset = lines.rows - sum(window_count(line) for line in last)
        out.append(f"last {_many(tail, 'line')} (from read_artifact offset {offset:,}):")
        out.extend(_shown_line(line, cut) for line in last)
    return out


def _shown_line(line: str, cut: int) -> str:
    return _cut(line.removesuffix("\r"), cut)


@dataclass(frozen=True)
class _Lines:
    """The physical lines of a text and its number of display lines (read offsets)."""

    physical: list[str]
    rows: int

    @classmethod
    def of(cls, text: str) -> _Lines:
        physical = physical_lines(text)
        return cls(physical, sum(window_count(line) for line in physical))


def _synopsis(text: str) -> str:
    """A one-line description of the result's shape, or ``""`` when none applies."""
    if len(text) > SYNOPSIS_MAX_CHARS:
        return ""
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        shape = _json_synopsis(stripped)
        if shape:
            return shape
    return _markdown_synopsis(text) or _delimited_synopsis(text)


def _names(names: Sequence[object]) -> str:
    shown = [_cut(str(name), NAME_CHARS) for name in names[:LISTED_NAMES]]
    more = len(names) - len(shown)
    return ", ".join(shown) + (f", ... ({more:,} more)" if more > 0 else "")


_JSON_TYPES = {
    dict: "object",
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


def _json_synopsis(text: str) -> str:
    try:
        value: Any = json.loads(text)
    except (ValueError, RecursionError):
        return ""
    if isinstance(value, dict):
        if not value:
            return "valid JSON: an empty object"
        return f"valid JSON: an object with {len(value):,} keys: {_names(list(value))}"
    if not isinstance(value, list):
        return ""
    if not value:
        return "valid JSON: an empty array"
    kinds = list(dict.fromkeys(_JSON_TYPES.get(type(item), "value") for item in value[:3]))
    described = f"valid JSON: an array of {len(value):,} items (first items: {', '.join(kinds)})"
    keys = list(dict.fromkeys(key for item in value[:3] if isinstance(item, dict) for key in item))
    return f"{described}; keys of the first objects: {_names(keys)}" if keys else described


_MD_SEPARATOR = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")


def _md_cells(line: str) -> list[str]:
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") else inner
    return [cell.strip() for cell in inner.split("|")]


def _markdown_synopsis(text: str) -> str:
    """Columns and row count of the first Markdown table, if the text has one."""
    lines = text.split("\n")
    for index in range(len(lines) - 1):
        header = lines[index].strip()
        if not header.startswith("|") or not _MD_SEPARATOR.match(lines[index + 1]):
            continue
        rows = 0
        for line in lines[index + 2 :]:
            if not line.strip().startswith("|"):
                break
            rows += 1
        tables = sum(
            1
            for i in range(len(lines) - 1)
            if lines[i].strip().startswith("|") and _MD_SEPARATOR.match(lines[i + 1])
        )
        where = f" (the first of {tables:,} tables, at line {index + 1:,})" if tables > 1 else ""
        columns = _md_cells(header)
        return (
            f"a Markdown table{where}: {len(columns):,} columns ({_names(columns)}), {rows:,} rows"
        )
    return ""


_SNIFF_LINES = 20
"""Lines that must agree on their number of fields for a text to count as CSV/TSV."""


def _delimited_synopsis(text: str) -> str:
    """Columns and row count of a CSV or TSV text, if the text is one."""
    first = text.split("\n", 1)[0]
    delimiter = "\t" if "\t" in first else "," if "," in first else ""
    if not delimiter:
        return ""
    records = (r for r in csv.reader(io.StringIO(text, newline=""), delimiter=delimiter) if r)
    try:
        sniffed = list(itertools.islice(records, _SNIFF_LINES))
        width = len(sniffed[0]) if sniffed else 0
        if len(sniffed) < 3 or width < 2 or any(len(r) != width for r in sniffed):
            return ""
        rows, ragged = len(sniffed) - 1, 0
        for record in records:
            rows += 1
            ragged += len(record) != width
    except csv.Error:
        return ""
    kind = "TSV" if delimiter == "\t" else "CSV"
    note = f" ({ragged:,} with a different number of fields)" if ragged else ""
    return (
        f"a {kind} table: {width:,} columns ({_names(sniffed[0])}), "
        f"{rows:,} rows after the header{note}"
    )
