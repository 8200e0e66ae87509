"""YAML front matter between ``---`` lines at the top of a Markdown file, and the body after it.

Skills (``SKILL.md``) and subagent files share this layout; each caller checks the fields.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import yaml

__all__ = ["FrontMatterError", "split_front_matter", "string_field"]

FENCE = "---"


class FrontMatterError(ValueError):
    """The front matter is missing, not closed, or not valid YAML; the message says which."""


def split_front_matter(text: str) -> tuple[Mapping[object, object], str]:
    """The fields of ``text``'s YAML front matter and its body.

    A UTF-8 BOM and CRLF line ends are accepted. The body loses its leading blank lines and
    trailing whitespace. Raises ``FrontMatterError`` with a one-line message, also when
    the front matter is not a mapping of fields.
    """
    lines = text.removeprefix("\ufeff").replace("\r\n", "\n").split("\n")
    if not lines or lines[0].rstrip() != FENCE:
        raise FrontMatterError("no front matter: the file must start with a '---' line")
    for index in range(1, len(lines)):
        if lines[index].rstrip() == FENCE:
            rest = lines[index + 1 :]
            while rest and not rest[0].strip():
                rest.pop(0)
            return _fields("\n".join(lines[1:index])), "\n".join(rest).rstrip()
    raise FrontMatterError("the front matter is not closed by a '---' line")


def string_field(
    data: Mapping[object, object],
    field: str,
    fail: Callable[[str, str], Exception],
    *,
    missing: str,
    empty: str | None = None,
) -> str:
    """The string value of ``field``; ``fail(field, message)`` is raised when it is unusable.

    ``missing`` ends the message of an absent field. With ``empty`` (the whole message
    for a blank value) the value is stripped and must not be blank.
    """
    value = data.get(field)
    if value is None:
        raise fail(field, f"missing; {missing}")
    if not isinstance(value, str):
        raise fail(field, f"must be a string, not {type(value).__name__}")
    if empty is None:
        return value
    value = value.strip()
    if not value:
        raise fail(field, empty)
    return value


def _fields(front: str) -> Mapping[object, object]:
    """``yaml.safe_load`` of the front matter, which must be a mapping; errors as one line."""
    try:
        loaded: object = yaml.safe_load(front)
    except (yaml.YAMLError, ValueError, OverflowError, RecursionError) as error:
        first = str(error).strip().splitlines()
        raise FrontMatterError(
            f"invalid YAML: {first[0] if first else type(error).__name__}"
        ) from None
    if not isinstance(loaded, Mapping):
        kind = "empty" if loaded is None else type(loaded).__name__
        raise FrontMatterError(f"the front matter must be a YAML mapping of fields, not {kind}")
    return loaded
