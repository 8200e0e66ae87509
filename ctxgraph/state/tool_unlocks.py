"""The ``tools_unlocked`` channel: built-in tools a thread has unlocked, kept for good."""

from __future__ import annotations

from collections.abc import Iterable

UNLOCKED_KEY = "tools_unlocked"
"""The state key of the unlocked tool names."""


def merge_unlocked(current: Iterable[str] | None, update: Iterable[str] | None) -> list[str]:
    """Reducer of ``tools_unlocked``: the union of both, sorted; nothing is ever removed."""
    names = {str(name) for name in current or ()} | {str(name) for name in update or ()}
    return sorted(names)
