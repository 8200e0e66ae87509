"""The summary record in a main request, and its size by block.

ctxgraph's record (the data message marked with the ``summary`` origin) holds the four
summary sections (``ctxgraph.nodes.compaction.sections``) and then the ledger's blocks,
each under its heading (``ctxgraph.nodes.compaction.ledger``); a peer's summary message
holds the sections alone. The record is split at those headings, each block's tokens
counted; what stands outside them (the wrapper around ctxgraph's record, the peers'
"Here is a summary" line) is the "frame".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from langchain_core.messages import BaseMessage

from ctxgraph.nodes.compaction.sections import SECTIONS
from ctxgraph.state.messages import ORIGIN_KEY, content_text

SUMMARY_ID_PREFIX = "ctxgraph-summary"

LEDGER_HEADINGS: tuple[tuple[str, str], ...] = (
    ("tool calls", "TOOL CALLS ("),
    ("user constraints", "USER CONSTRAINTS ("),
    ("user decisions", "USER DECISIONS ("),
    ("offloaded content", "OFFLOADED CONTENT ("),
    ("identifiers", "IDENTIFIERS:"),
)
"""Each ledger block and how its heading line begins (``ledger.calls``, ``constraints``,
``decisions``, ``artifacts``, ``identifiers``)."""

FRAME = "frame"
RECORD_BLOCKS: tuple[str, ...] = (
    FRAME,
    *(title.lower() for _, title in SECTIONS),
    *(name for name, _ in LEDGER_HEADINGS),
)
"""The blocks a record is split into, in the order they are reported."""

_SECTION_LINE = re.compile(
    r"^\s*(?:#{1,6}\s*)?(" + "|".join(re.escape(t) for _, t in SECTIONS) + r")\s*:?\s*$"
)


def summary_message(messages: Sequence[BaseMessage]) -> str:
    """The text of the summary record in a request (ctxgraph's or a peer's), or empty."""
    for message in messages:
        if (
            message.additional_kwargs.get(ORIGIN_KEY) == "summary"
            or (message.id or "").startswith(SUMMARY_ID_PREFIX)
            or message.additional_kwargs.get("lc_source") == "summarization"
        ):
            return content_text(message)
    return ""


def _block_of(line: str) -> str | None:
    """The block a heading line opens, or None for any other line."""
    found = _SECTION_LINE.match(line)
    if found:
        return found.group(1).lower()
    stripped = line.lstrip()
    for name, start in LEDGER_HEADINGS:
        if stripped.startswith(start):
            return name
    if stripped.startswith("</conversation_summary"):
        return FRAME
    return None


def record_blocks(text: str, tokens: Callable[[str], int]) -> dict[str, int]:
    """Tokens of each block of a summary record (every block of ``RECORD_BLOCKS``)."""
    lines: dict[str, list[str]] = {name: [] for name in RECORD_BLOCKS}
    current = FRAME
    for line in text.splitlines():
        current = _block_of(line) or current
        lines[current].append(line)
    return {name: tokens("\n".join(found)) if found else 0 for name, found in lines.items()}
