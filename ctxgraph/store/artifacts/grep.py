"""Searches an artifact's lines with a regular expression and renders the matches."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ctxgraph.state.tokens import count_text
from ctxgraph.store.artifacts.layout import WINDOW_BYTES, physical_lines, window_count, windows
from ctxgraph.store.artifacts.records import ArtifactError, shown

MAX_MATCHES = 500
"""``max_matches`` is clamped to 1..MAX_MATCHES."""

MAX_CONTEXT = 20
"""``context`` is clamped to 0..MAX_CONTEXT."""

GREP_LINE_CHARS = 400
"""Lines longer than this are cut around the match (context lines: from their start)."""

SNIPPET_BEFORE = 100
"""Characters a cut line shows before the match."""


class InvalidPatternError(ArtifactError, ValueError):
    """The grep pattern is not a valid Python regular expression."""


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """Compile ``pattern``, or raise ``InvalidPatternError`` naming it and the problem."""
    if not isinstance(pattern, str) or not pattern:
        raise InvalidPatternError(f"give a non-empty regular expression, got {pattern!r}")
    try:
        return re.compile(pattern)
    except re.error as error:
        raise InvalidPatternError(
            f"invalid regular expression {shown(pattern, 200)}: {error}"
        ) from error


def _row_of(line: str, first_row: int, position: int) -> int:
    """The display line (offset) holding character ``position`` of a physical line."""
    if len(line) * 4 <= WINDOW_BYTES:
        return first_row
    consumed = 0
    for index, part in enumerate(windows(line)):
        consumed += len(part)
        if position < consumed:
            return first_row + index
    return first_row + max(window_count(line) - 1, 0)


def _cut(line: str, start: int) -> str:
    if len(line) <= GREP_LINE_CHARS:
        return line
    begin = max(0, start - SNIPPET_BEFORE)
    end = min(len(line), begin + GREP_LINE_CHARS)
    return (
        f"{'…' if begin else ''}{line[begin:end]}{'…' if end < len(line) else ''}"
        f"  [long line cut: characters {begin}-{end} of {len(line)}]"
    )


def _groups(found: Sequence[int], context: int, count: int) -> list[tuple[int, int]]:
    """Merged, inclusive line ranges around the matching lines."""
    ranges: list[tuple[int, int]] = []
    for index in found:
        low, high = max(0, index - context), min(count - 1, index + context)
        if ranges and low <= ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], max(ranges[-1][1], high))
        else:
            ranges.append((low, high))
    return ranges


def grep_text(
    ref: str,
    pattern: str,
    content: str,
    compiled: re.Pattern[str],
    *,
    max_matches: int,
    context: int,
    max_tokens: int,
) -> str:
    r"""Render the lines of ``content`` that ``compiled`` matches, within ``max_tokens``.

    Matching lines show as ``"<offset>:\t<text>"`` and context lines as
    ``"<offset>-\t<text>"``, groups apart by ``--``; offsets are read-page offsets.
    """
    max_matches = max(1, min(max_matches, MAX_MATCHES))
    context = max(0, min(context, MAX_CONTEXT))
    lines = physical_lines(content)
    starts: dict[int, int] = {}
    total = 0
    for index, line in enumerate(lines):
        # A CRLF line's "\r" is not matched, so "$" works as it does on LF text.
        match = compiled.search(line[:-1] if line.endswith("\r") else line)
        if match is not None:
            total += 1
            if len(starts) < max_matches:
                starts[index] = match.start()
    title = f"[grep {ref} for {shown(pattern, 120)}: {total} of {len(lines)} lines match"
    if not total:
        return f"{title}]\n[no line matches]"
    title += '; "<offset>:" marks a matching line, "<offset>-" a context line (read offsets)]'
    ranges = _groups(list(starts), context, len(lines))
    last_needed = ranges[-1][1]
    first_rows = [0] * (last_needed + 1)
    row = 0
    for index in range(last_needed + 1):
        first_rows[index] = row
        row += window_count(lines[index])
    rendered: list[tuple[str, bool]] = []
    for number, (low, high) in enumerate(ranges):
        if number:
            rendered.append(("--", False))
        for index in range(low, high + 1):
            start = starts.get(index)
            if start is None:
                rendered.append((f"{first_rows[index]}-\t{_cut(lines[index], 0)}", False))
            else:
                offset = _row_of(lines[index], first_rows[index], start)
                rendered.append((f"{offset}:\t{_cut(lines[index], start)}", True))
    return _fit(title, rendered, total, max_matches, max_tokens)


def _footer(total: int, shown_matches: int, max_matches: int, cut: bool) -> str:
    if shown_matches >= total:
        return f"[all {total} matching lines shown]"
    why = " (token limit reached)" if cut else f" (max_matches={max_matches})"
    return (
        f"[{total - shown_matches} more matching lines not shown{why}; narrow the pattern, "
        "raise max_matches, or read around an offset]"
    )


def _fit(
    title: str, rendered: list[tuple[str, bool]], total: int, max_matches: int, max_tokens: int
) -> str:
    worst = _footer(total, 0, max_matches, cut=True)
    budget = max_tokens - count_text(title) - count_text(worst) - 2
    kept: list[tuple[str, bool]] = []
    cut = False
    for line, is_match in rendered:
        cost = count_text(line) + 1
        if kept and cost > budget:
            cut = True
            break
        kept.append((line, is_match))
        budget -= cost
    while True:
        if kept and kept[-1][0] == "--":
            kept.pop()
        matches = sum(is_match for _, is_match in kept)
        text = "\n".join(
            [title, *(line for line, _ in kept), _footer(total, matches, max_matches, cut)]
        )
        if len(kept) <= 1 or count_text(text) <= max_tokens:
            return text
        kept.pop()
        cut = True
