"""A skill folder and two file tools for skill-policy tests: one reads, one writes.

``WRITES`` records every path ``write_file`` wrote, so a test can assert a refused call
never ran; clear it before each test.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from langchain_core.tools import tool

WRITES: list[str] = []


@tool
def read_file(path: str) -> str:
    """Read a file."""
    return f"contents of {path}"


@tool
def write_file(path: str, text: str) -> str:
    """Write a file."""
    WRITES.append(path)
    return f"wrote {path}"


def write_skill(
    root: Path,
    name: str,
    description: str = "A skill.",
    body: str = "Do the thing.",
    allowed: Sequence[str] | None = None,
) -> Path:
    """Write ``root/name/SKILL.md`` and return its path."""
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["---", f"name: {name}", f"description: {description}"]
    if allowed is not None:
        lines.append(f"allowed-tools: [{', '.join(allowed)}]")
    path = folder / "SKILL.md"
    path.write_text("\n".join([*lines, "---", body, ""]), encoding="utf-8")
    return path
