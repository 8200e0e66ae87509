r"""Renders pages of an artifact as numbered display lines, and rebuilds the text from pages.

A page is a header, one row per display line and a footer, joined with ``"\n"``::

    [artifact art-…: tool_result of sh, 900 bytes, 120 lines (offsets 0-119), final newline: yes]
    [format: …]
    0\tfirst line
    1\ta long line, first window
    2+\tthe same line, second window
    [showed offsets 0-2 of 120; next offset: 3]

Row ``n`` is ``f"{n}\t{text}"`` when it starts a physical line and ``f"{n}+\t{text}"``
when it continues the line of row ``n - 1`` (see ``layout``). The text is the rows joined
with ``"\n"``, except that a ``+`` row joins its predecessor directly, plus a ``"\n"`` when
the header says ``final newline: yes``; :func:`reconstruct` does exactly that.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ctxgraph.state.tokens import count_text
from ctxgraph.store.artifacts.layout import LINE_WINDOW, WINDOW_BYTES, Row
from ctxgraph.store.artifacts.records import Artifact

MAX_LIMIT = 1_000
"""The most display lines one page shows (``limit`` is clamped to 1..MAX_LIMIT)."""

MIN_PAGE_TOKENS = WINDOW_BYTES + 700
"""The smallest ``max_tokens`` a page accepts: room for a header, a footer and one window.

A page with one window has at most this many UTF-8 bytes, hence at most this many tokens.
"""

MAX_NAME_CHARS = 64
"""Tool names are cut to this length in headers."""

FORMAT_NOTE = (
    '[format: one "<offset>\\t<text>" row per line; a line longer than '
    f'{LINE_WINDOW} characters is split, each later part shown as "<offset>+\\t<text>"]'
)

_CONTROL = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")
_ROW = re.compile(r"(\d+)(\+?)\t")
_FINAL_NEWLINE = re.compile(r"final newline: (yes|no)\]$")


@dataclass(frozen=True)
class Page:
    """One rendered page of an artifact."""

    text: str
    """What the reader sees: header, numbered rows, footer."""
    next_offset: int | None
    """The offset to pass for the next page; None once the end was shown."""
    total_lines: int
    """Display lines of the whole artifact (the offsets run 0..total_lines-1)."""
    cut: bool
    """True when the token budget stopped the page before ``limit`` lines."""


def header(artifact: Artifact, total: int, final_newline: bool) -> str:
    """The first line of a page: what the artifact is and how its offsets run."""
    source: str = artifact.kind
    if artifact.tool_name:
        name = _CONTROL.sub(" ", artifact.tool_name)
        if len(name) > MAX_NAME_CHARS:
            name = name[: MAX_NAME_CHARS - 1] + "…"
        source += f" of {name}"
    span = f"offsets 0-{total - 1}" if total else "empty"
    return (
        f"[artifact {artifact.ref}: {source}, {artifact.size_bytes} bytes, {total} lines "
        f"({span}), final newline: {'yes' if final_newline else 'no'}]"
    )


def render_row(offset: int, row: Row) -> str:
    """One display line as a page shows it."""
    return f"{offset}{'+' if row.continues else ''}\t{row.text}"


def past_end(head: str, offset: int, total: int) -> Page:
    """The page for an offset at or past the end."""
    where = f"offsets 0-{total - 1}" if total else "it is empty"
    note = f"[offset {offset} is past the end: the artifact has {total} lines ({where})]"
    return Page(f"{head}\n{note}", None, total, cut=False)


def _footer(first: int, shown: int, total: int, cut: bool, last: Row | None) -> str:
    if shown == 0:
        return "[end of artifact: it is empty]"
    end = first + shown - 1
    if end >= total - 1:
        return f"[end of artifact: showed offsets {first}-{end} of {total}]"
    why = " (token limit reached)" if cut else ""
    more = f"[showed offsets {first}-{end} of {total}{why}; next offset: {end + 1}"
    if last is not None and not last.newline:
        more += f"; the line at offset {end} continues at offset {end + 1}"
    return more + "]"


class PageBuilder:
    """Collects rows from ``offset`` on until ``limit`` lines or the token budget is used."""

    def __init__(self, head: str, *, offset: int, limit: int, total: int, max_tokens: int) -> None:
        self.offset, self.limit, self.total = offset, limit, total
        self.max_tokens = max_tokens
        self.cut = False
        self._head = f"{head}\n{FORMAT_NOTE}"
        self._rows: list[str] = []
        self._shown: list[Row] = []
        worst = _footer(total, 1, total + total + 2, cut=True, last=Row("", False, False))
        self._budget = max_tokens - count_text(self._head) - count_text(worst) - 2

    @property
    def wants_more(self) -> bool:
        """True while the page can take another row."""
        return not self.cut and len(self._rows) < self.limit and self.next_row < self.total

    @property
    def next_row(self) -> int:
        """The offset of the next row this page would show."""
        return self.offset + len(self._rows)

    def add(self, row: Row) -> bool:
        """Add the row at :attr:`next_row`; False (and the page is cut) if it does not fit."""
        line = render_row(self.next_row, row)
        cost = count_text(line) + 1
        if self._rows and cost > self._budget:
            self.cut = True
            return False
        self._rows.append(line)
        self._shown.append(row)
        self._budget -= cost
        return True

    def page(self) -> Page:
        """The finished page; drops rows from its end if the exact count is over budget."""
        while True:
            last = self._shown[-1] if self._shown else None
            footer = _footer(self.offset, len(self._rows), self.total, self.cut, last)
            text = "\n".join([self._head, *self._rows, footer])
            if len(self._rows) <= 1 or count_text(text) <= self.max_tokens:
                break
            self._rows.pop()
            self._shown.pop()
            self.cut = True
        shown_to = self.offset + len(self._rows)
        next_offset = shown_to if self._rows and shown_to < self.total else None
        return Page(text, next_offset, self.total, cut=self.cut and next_offset is not None)


def reconstruct(pages: Iterable[Page | str]) -> str:
    """Rebuild an artifact's text from the pages that showed all of it (in any order).

    Uses only the rendered text (see the module docstring); raises ``ValueError`` when
    offsets are missing or the header is not there.
    """
    rows: dict[int, tuple[bool, str]] = {}
    final_newline: bool | None = None
    for page in pages:
        text = page.text if isinstance(page, Page) else page
        for line in text.split("\n"):
            if line.startswith("[artifact "):
                found = _FINAL_NEWLINE.search(line)
                if found:
                    final_newline = found.group(1) == "yes"
                continue
            match = _ROW.match(line)
            if match:
                rows[int(match.group(1))] = (match.group(2) == "+", line[match.end() :])
    if final_newline is None:
        raise ValueError("no page header found (it says whether the text ends with a newline)")
    missing = sorted(set(range(len(rows))) - set(rows))
    if missing or (rows and max(rows) != len(rows) - 1):
        raise ValueError(f"the pages do not cover offsets 0-{max(rows, default=0)}: {missing}")
    parts: list[str] = []
    for offset in range(len(rows)):
        continues, text = rows[offset]
        if offset and not continues:
            parts.append("\n")
        parts.append(text)
    if final_newline and rows:
        parts.append("\n")
    return "".join(parts)
