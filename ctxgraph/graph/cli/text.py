"""Plain-text helpers of the terminal output that need nothing but the standard library."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""Control characters (C0 but tab and newline, DEL, C1): ESC starts every ANSI sequence."""


def _escaped(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def escape_control(text: str) -> str:
    r"""``text`` with control characters shown as ``\xNN``, so the terminal does not act on them.

    Newlines and tabs stay as they are; a carriage return, an escape (and so any ANSI
    escape sequence), a bell or a backspace is printed as its visible escape, e.g. ``\x1b``.
    """
    return _CONTROL.sub(_escaped, text)


def plural(count: int, noun: str) -> str:
    """``count`` and ``noun``, plural unless ``count`` is 1: ``1 compaction``, ``2 compactions``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
