"""Reading ``SubagentSpec``s from a folder of Markdown files with YAML front matter."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from langchain_core.tools import BaseTool

from ctxgraph.state.front_matter import FrontMatterError, split_front_matter, string_field
from ctxgraph.state.subagents import NAME_PATTERN, SubagentSpec, SubagentSpecError

__all__ = [
    "KNOWN_FIELDS",
    "SUBAGENT_FILE_SUFFIX",
    "SubagentFileError",
    "parse_subagent_md",
    "read_subagent_specs",
]

SUBAGENT_FILE_SUFFIX = ".md"
"""Every non-hidden file of the folder with this suffix is one subagent spec."""

KNOWN_FIELDS = frozenset({"name", "description", "tools", "model"})
"""The front-matter fields a subagent file may have; any other one is an error."""

BODY_FIELD = "body"
"""The name errors give the Markdown body, which becomes ``SubagentSpec.system_prompt``."""

_Fail = Callable[[str | None, str], "SubagentFileError"]
"""Builds the error of one field: (field, message) -> the error to raise."""


class SubagentFileError(ValueError):
    """A subagent file or folder that cannot be used; the message names the path and field."""


def read_subagent_specs(
    folder: str | Path, tools: Mapping[str, BaseTool]
) -> tuple[SubagentSpec, ...]:
    """The specs of the ``*.md`` files in ``folder``, in file-name order.

    ``tools`` are the tools a file may name in its ``tools`` field, by name. Hidden files
    and subfolders are left out. Raises ``SubagentFileError`` for a missing folder, for
    any file that is not a valid spec, and for one name defined by two files.
    """
    root = Path(folder)
    if not root.exists():
        raise SubagentFileError(
            f"{root}: no such folder; give a folder of subagent .md files "
            "(for example examples/subagents)"
        )
    if not root.is_dir():
        raise SubagentFileError(
            f"{root}: not a folder; give the folder that holds the subagent .md files"
        )
    try:
        paths = sorted(
            (
                path
                for path in root.iterdir()
                if path.suffix == SUBAGENT_FILE_SUFFIX
                and not path.name.startswith(".")
                and path.is_file()
            ),
            key=lambda path: path.name,
        )
    except OSError as error:
        raise SubagentFileError(f"{root}: cannot list the folder: {error.strerror}") from None
    specs: list[SubagentSpec] = []
    defined_in: dict[str, Path] = {}
    for path in paths:
        spec = parse_subagent_md(_read_text(path), file=str(path), tools=tools)
        if spec.name in defined_in:
            raise SubagentFileError(
                f"{path}: name: {spec.name!r} is already defined by {defined_in[spec.name]}; "
                "give each subagent its own name"
            )
        defined_in[spec.name] = path
        specs.append(spec)
    return tuple(specs)


def parse_subagent_md(text: str, *, file: str, tools: Mapping[str, BaseTool]) -> SubagentSpec:
    """The spec ``text`` describes: front matter between ``---`` lines, then the prompt.

    ``file`` names the source in errors; ``tools`` are the tools the ``tools`` field may
    name. Raises ``SubagentFileError`` naming ``file`` and the field at fault.
    """

    def fail(field: str | None, message: str) -> SubagentFileError:
        where = f"{file}: {field}" if field else file
        return SubagentFileError(f"{where}: {message}")

    try:
        data, body = split_front_matter(text)
    except FrontMatterError as error:
        raise fail(None, str(error)) from None
    unknown = sorted(str(key) for key in data if key not in KNOWN_FIELDS)
    if unknown:
        raise fail(
            unknown[0],
            f"unknown front-matter field; the fields are {', '.join(sorted(KNOWN_FIELDS))}",
        )
    if "model" in data:
        raise fail(
            "model",
            "is not supported in subagent files; a subagent file uses the graph's main "
            "model, and another model is set in Python with SubagentSpec(model=...)",
        )
    name = _name(data, fail)
    description = _description(data, fail)
    chosen = _tools(data, tools, fail)
    if not body:
        raise fail(
            BODY_FIELD,
            "is empty; write the subagent's system prompt as Markdown after the closing '---'",
        )
    try:
        return SubagentSpec(name=name, description=description, system_prompt=body, tools=chosen)
    except SubagentSpecError as error:
        raise fail(None, str(error)) from None


def _read_text(path: Path) -> str:
    """The UTF-8 text of ``path``, or ``SubagentFileError``."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise SubagentFileError(f"{path}: cannot read the file: {error.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise SubagentFileError(
            f"{path}: not UTF-8 text (byte {error.start}); save the file as UTF-8"
        ) from None


def _name(data: Mapping[object, object], fail: _Fail) -> str:
    """The ``name`` field, checked against ``NAME_PATTERN``."""
    name = string_field(
        data, "name", fail, missing="give the subagent's name, for example 'researcher'"
    )
    if not NAME_PATTERN.fullmatch(name):
        raise fail(
            "name",
            f"{name!r} is not 1-64 lowercase letters, digits, '-' or '_' starting with a "
            "letter or digit (for example 'researcher')",
        )
    return name


def _description(data: Mapping[object, object], fail: _Fail) -> str:
    """The ``description`` field, stripped and non-empty."""
    return string_field(
        data,
        "description",
        fail,
        missing="say what the subagent does and when to hand work to it",
        empty="is empty; say what the subagent does and when to use it",
    )


def _tools(
    data: Mapping[object, object], available: Mapping[str, BaseTool], fail: _Fail
) -> tuple[BaseTool, ...]:
    """The tools the ``tools`` field names, deduplicated in order; none when it is absent."""
    value = data.get("tools")
    if value is None:
        return ()
    if not isinstance(value, list):
        raise fail(
            "tools",
            f"must be a YAML list of tool names, for example [calculator], "
            f"not {type(value).__name__}",
        )
    chosen: dict[str, BaseTool] = {}
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise fail("tools", f"item {index} ({item!r}) is not a tool name")
        name = item.strip()
        tool = available.get(name)
        if tool is None:
            known = ", ".join(sorted(available))
            hint = (
                f"the tools available are: {known}"
                if known
                else "no tools are available to list here, so remove the field (every "
                "subagent gets the artifact readers anyway)"
            )
            raise fail("tools", f"unknown tool {name!r}; {hint}")
        chosen.setdefault(name, tool)
    return tuple(chosen.values())
