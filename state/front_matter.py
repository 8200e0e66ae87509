"""YAML front matter between ``---`` lines at the top of a Markdown file, and the body after it.

Skills (``SKILL.md``) and subagent files share this layout; each caller checks the fields.
"""

from __future__ import annotations

import yaml

__all__ = ["FrontMatterError", "split_front_matter"]

FENCE = "---"


class FrontMatterError(ValueError):
    """The front matter is missing, not closed, or not valid YAML; the message says which."""


def split_front_matter(text: str) -> tuple[object, str]:
    """The loaded YAML front matter of ``text`` and its body.

    A UTF-8 BOM and CRLF line ends are accepted. The body loses its leading blank lines and
    trailing whitespace. Raises ``FrontMatterError`` with a one-line message.
    """
    lines = text.removeprefix("\ufeff").replace("\r\n", "\n").split("\n")
    if not lines or lines[0].rstrip() != FENCE:
        raise FrontMatterError("no front matter: the file must start with a '---' line")
    for index in range(1, len(lines)):
        if lines[index].rstrip() == FENCE:
            rest = lines[index + 1 :]
            while rest and not rest[0].strip():
                rest.pop(0)
            return _load_yaml("\n".join(lines[1:index])), "\n".join(rest).rstrip()
    raise FrontMatterError("the front matter is not closed by a '---' line")


def _load_yaml(front: str) -> object:
    """``yaml.safe_load`` of the front matter, its errors as one line."""
    try:
        loaded: object = yaml.safe_load(front)
    except (yaml.YAMLError, ValueError, OverflowError, RecursionError) as error:
        first = str(error).strip().splitlines()
        raise FrontMatterError(
            f"invalid YAML: {first[0] if first else type(error).__name__}"
        ) from None
    return loaded
