r"""How artifact text is cut into numbered display lines and packed into Store chunks.

A *physical line* is the text between two ``"\n"``; a trailing ``"\n"`` ends the last
line and starts no new one (``""`` has no lines). Every other character, ``"\r"``
included, stays in its line. A physical line is shown as one or more *display lines*
(windows): greedily, each window takes at most ``LINE_WINDOW`` characters and at most
``WINDOW_BYTES`` UTF-8 bytes, so a window never holds more than ``WINDOW_BYTES`` tokens
(every cl100k token covers at least one byte). Display lines are numbered from 0 across
the whole text; they are the offsets a reader pages with.

A chunk is a run of whole display lines (each with the ``"\n"`` that follows it), at most
``CHUNK_BYTES`` bytes: it starts at a window boundary, so re-splitting it greedily gives
exactly the windows of the whole text.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

CHUNK_BYTES = 262_144
"""The largest content kept in one Store item; longer content is split into chunks."""

LINE_WINDOW = 2_000
"""The most characters of a physical line one display line (window) shows."""

WINDOW_BYTES = 3_000
"""The most UTF-8 bytes one window holds: a bound on its tokens."""


@dataclass(frozen=True, slots=True)
class Row:
    """One display line: a window of a physical line."""

    text: str
    continues: bool
    """True when this window continues the physical line of the row before it."""
    newline: bool
    """True when a ``"\\n"`` follows this window in the text."""


@dataclass(frozen=True)
class ChunkSpan:
    """Where one chunk lies in the content, in characters and in display lines."""

    start: int
    end: int
    first: int
    """Offset of the chunk's first display line."""
    rows: int
    size: int
    """UTF-8 bytes."""
    continues: bool
    """True when the chunk starts inside a physical line (with a continuation window)."""


def utf8(text: str) -> bytes:
    """The UTF-8 bytes of ``text``, a lone surrogate as its three bytes (any text has some)."""
    return text.encode("utf-8", "surrogatepass")


def utf8_size(text: str) -> int:
    """UTF-8 bytes of ``text``."""
    return len(utf8(text))


def windows(line: str) -> list[str]:
    """The windows of one physical line; an empty line is one empty window."""
    if len(line) <= LINE_WINDOW and (
        len(line) * 4 <= WINDOW_BYTES or utf8_size(line) <= WINDOW_BYTES
    ):
        return [line]
    found: list[str] = []
    start = 0
    while start < len(line):
        piece = line[start : start + LINE_WINDOW]
        data = utf8(piece)
        if len(data) > WINDOW_BYTES:
            cut = WINDOW_BYTES
            while data[cut] & 0xC0 == 0x80:  # a continuation byte: the cut is inside a character
                cut -= 1
            piece = data[:cut].decode("utf-8", "surrogatepass")
        found.append(piece)
        start += len(piece)
    return found


def window_count(line: str) -> int:
    """How many display lines a physical line takes."""
    if len(line) * 4 <= WINDOW_BYTES:
        return 1
    return len(windows(line))


def physical_lines(text: str) -> list[str]:
    """The physical lines of ``text`` (see the module docstring)."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def iter_rows(text: str, *, continues: bool = False) -> Iterator[Row]:
    """The display lines of ``text``, which starts at a window boundary.

    ``continues`` says that ``text`` starts inside a physical line (a chunk that does).
    """
    if not text:
        return
    segments = text.split("\n")
    ends_with_newline = segments[-1] == ""
    if ends_with_newline:
        segments.pop()
    last = len(segments) - 1
    for index, segment in enumerate(segments):
        parts = windows(segment)
        newline_after = index < last or ends_with_newline
        for position, part in enumerate(parts):
            yield Row(
                part,
                continues=position > 0 or (index == 0 and continues),
                newline=newline_after and position == len(parts) - 1,
            )


def row_count(text: str) -> int:
    """How many display lines ``text`` has."""
    return sum(window_count(line) for line in physical_lines(text))


def plan_chunks(content: str, limit: int = CHUNK_BYTES) -> list[ChunkSpan]:
    """Pack the display lines of ``content`` into chunks of at most ``limit`` bytes."""
    if limit < WINDOW_BYTES + 1:
        raise ValueError(f"a chunk must hold at least one window, got limit={limit}")
    spans: list[ChunkSpan] = []
    position = first = rows = size = start = 0
    starts_inside = False
    for row in iter_rows(content):
        chars = len(row.text) + row.newline
        nbytes = utf8_size(row.text) + row.newline
        if rows and size + nbytes > limit:
            spans.append(ChunkSpan(start, position, first, rows, size, starts_inside))
            start, first, rows, size, starts_inside = position, first + rows, 0, 0, row.continues
        position += chars
        rows += 1
        size += nbytes
    if rows:
        spans.append(ChunkSpan(start, position, first, rows, size, starts_inside))
    return spans
