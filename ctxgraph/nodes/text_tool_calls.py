"""Tool calls a model wrote as text: made real calls when safe, else flagged with the cause.

Small local models, and chat templates without tool support, often answer with the call
written out instead of a real tool call: ``<tools>{"name": ..., "arguments": {...}}</tools>``,
a fenced ```` ```json ```` block, a doubled opening brace. Shown as the answer, such text
means the tool never runs. :func:`read_text_tool_calls` reads the answer with the shared
reader (``state.answer_json``) and, in mode ``recover``, turns it into real tool calls when
the WHOLE answer is calls of bound tools whose arguments validate against the tools'
schemas. Otherwise, text that looks like a call is left as it is and a warning says why.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.messages import AIMessage, ToolCall
from langchain_core.messages.tool import tool_call
from langchain_core.tools import BaseTool
from pydantic import BaseModel, ValidationError

from ctxgraph.state.answer_json import JsonSpan, residue, top_level_objects
from ctxgraph.state.events import emit_event
from ctxgraph.state.messages import RECOVERED_CALL_ID_PREFIX as CALL_ID_PREFIX

TextToolCallMode = Literal["recover", "warn", "off"]
"""``Settings.text_tool_calls``: make the calls real, only warn, or leave the text alone."""

logger = logging.getLogger("ctxgraph.model")

EVENT = "model.text_tool_calls"
"""The event of an answer that held tool calls written as text (recovered or warned)."""

MARK_KEY = "ctxgraph_text_tool_calls"
"""``additional_kwargs`` key of a recovered answer: how many calls, their form, the text."""

NAME_KEYS = ("name", "function", "tool", "tool_name")
"""Keys under which a call written as text names its tool, the first present wins."""

ARGUMENT_KEYS = ("arguments", "parameters", "args", "input")
"""Keys under which a call written as text puts its arguments, the first present wins."""

LIKELY_CAUSE = (
    "the model wrote a tool call as text (a small model, or a chat template without tool support)"
)
"""How every warning starts: what happened and its likely cause."""

WARNING = "{cause}: {problem}; the text stays the answer and no tool ran"
"""The warning of a call written as text that was not recovered."""

SHOWN_PROBLEMS = 3
"""How many schema errors of one call a warning lists."""

_LIST_PUNCTUATION = re.compile(r"[\[\],\s]*")
"""What may be left around the calls of a JSON list of calls (``[{...}, {...}]``)."""

_TAG = re.compile(r"<\s*/?\s*[A-Za-z_]+\s*>")
"""A tag around a call (``<tools>``, ``<tool_call>``), to name the form."""

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}
"""Python types of the JSON-schema types a dict schema may name."""


@dataclass(frozen=True)
class TextCall:
    """One tool call as the answer text wrote it."""

    name: str
    args: dict[str, Any] | None
    """The arguments, or None when they are not a JSON object."""


@dataclass(frozen=True)
class TextToolCalls:
    """What the text of one answer held, and the answer to keep."""

    message: AIMessage
    """The answer with real ``tool_calls`` when recovered, else the answer as it came."""
    recovered: int = 0
    """How many calls were recovered from the text."""
    warning: str = ""
    """Why text that looks like a tool call stays the answer (empty: nothing to say)."""
    form: str = ""
    """How the calls were written: ``tagged``, ``fenced``, ``doubled_brace``, ``list``,
    ``bare``, joined by ``+`` when several apply; empty when the text held no call."""


def read_text_tool_calls(
    reply: AIMessage, tools: Sequence[BaseTool], mode: TextToolCallMode
) -> TextToolCalls:
    """Read the tool calls ``reply`` wrote as text, and recover them when it is safe.

    Only an answer with no real (or invalid) tool calls is read, and only with tools
    bound. In mode ``recover``, when the whole answer is calls of tools in ``tools`` (the
    JSON, its fences, call tags and list brackets, nothing else) and each call's
    arguments validate against its tool's schema, the result's message is ``reply`` with
    those calls as ``tool_calls`` (fresh ids starting with ``CALL_ID_PREFIX``), its text
    emptied (the calls now say it, and a window that shows written calls invites the
    model to copy them), and ``additional_kwargs[MARK_KEY]`` holding the count, the form
    and the original text. Otherwise text that looks like a call is kept and the result's
    ``warning`` says why (mode ``warn``, an unbound tool, arguments that do not validate,
    text besides the calls).

    Args:
        reply: The main model's answer.
        tools: The tools bound for the call that produced ``reply``.
        mode: ``Settings.text_tool_calls``; ``off`` reads nothing.

    Returns:
        The answer to keep, how many calls were recovered, and the warning, if any.

    """
    if _not_read(reply, tools, mode):
        return TextToolCalls(reply)
    text = reply.text
    by_name = {tool.name: tool for tool in tools}
    spans = top_level_objects(text)
    calls = [_as_call(span.value, by_name) for span in spans]
    found = [call for call in calls if call is not None]
    if not found:
        return TextToolCalls(reply)
    form = _form(text, spans)
    whole = len(found) == len(calls) and _only_calls(text, spans)
    problem = _why_kept(found, by_name, mode, whole=whole)
    if problem:
        return TextToolCalls(
            reply, warning=WARNING.format(cause=LIKELY_CAUSE, problem=problem), form=form
        )
    return _recovered(reply, found, form)


def _not_read(reply: AIMessage, tools: Sequence[BaseTool], mode: TextToolCallMode) -> bool:
    """True when ``reply`` is not read: mode off, no tools, real calls, or no ``{``."""
    return (
        mode == "off"
        or not tools
        or bool(reply.tool_calls)
        or bool(reply.invalid_tool_calls)
        or "{" not in reply.text
    )


def _why_kept(
    found: Sequence[TextCall],
    bound: Mapping[str, BaseTool],
    mode: TextToolCallMode,
    *,
    whole: bool,
) -> str:
    """Why the calls ``found`` stay text (``whole``: the answer is only calls); empty if not."""
    if not whole:
        return "the answer holds other text besides the call"
    problem = _problem(found, bound)
    if not problem and mode == "warn":
        return "text_tool_calls is 'warn' (CTXGRAPH_TEXT_TOOL_CALLS), so it was not run"
    return problem


def _recovered(reply: AIMessage, found: Sequence[TextCall], form: str) -> TextToolCalls:
    """``reply`` with the calls ``found`` made real, its text emptied and kept in the mark."""
    real: list[ToolCall] = [
        tool_call(name=call.name, args=dict(call.args or {}), id=_new_id()) for call in found
    ]
    mark = {"recovered": len(real), "form": form, "text": reply.text}
    recovered = reply.model_copy(
        update={
            "content": "",
            "tool_calls": real,
            "additional_kwargs": {**reply.additional_kwargs, MARK_KEY: mark},
        }
    )
    return TextToolCalls(recovered, recovered=len(real), form=form)


def report_text_tool_calls(found: TextToolCalls, thread_id: str) -> None:
    """Emit ``model.text_tool_calls`` for ``found``, and log its warning at WARNING.

    Nothing is emitted for an answer whose text held no call.

    Args:
        found: What :func:`read_text_tool_calls` made of an answer.
        thread_id: The run's thread (empty when not known).

    """
    if not found.recovered and not found.warning:
        return
    if found.warning:
        logger.warning("%s", found.warning)
    fields = {
        "recovered": found.recovered,
        "warned": bool(found.warning),
        "form": found.form,
        "reason": found.warning or None,
    }
    emit_event(logger, EVENT, thread_id, fields)


def _new_id() -> str:
    return f"{CALL_ID_PREFIX}{uuid.uuid4().hex[:24]}"


def _as_call(value: Mapping[str, Any], bound: Mapping[str, BaseTool]) -> TextCall | None:
    """The call ``value`` writes, or None when it does not look like a tool call.

    It looks like one when it names a tool (``NAME_KEYS``) and has arguments
    (``ARGUMENT_KEYS``), or names a bound tool; OpenAI's ``{"type": "function",
    "function": {...}}`` is read as its inner object. Without an arguments key, the
    object's other keys are the arguments.
    """
    inner = value.get("function")
    if isinstance(inner, Mapping):
        value = inner
    name = next((value[key] for key in NAME_KEYS if isinstance(value.get(key), str)), None)
    if not isinstance(name, str) or not name:
        return None
    key = next((key for key in ARGUMENT_KEYS if key in value), None)
    if key is None:
        if name not in bound:
            return None
        skipped = {*NAME_KEYS, "type", "id"}
        return TextCall(name, {k: v for k, v in value.items() if k not in skipped})
    return TextCall(name, _arguments(value[key]))


def _arguments(raw: object) -> dict[str, Any] | None:
    """Arguments as an object (a JSON string is decoded), or None when they are not one."""
    if isinstance(raw, str):
        if not raw.strip():
            return {}
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    return dict(raw) if isinstance(raw, Mapping) else None


def _only_calls(text: str, spans: Sequence[JsonSpan]) -> bool:
    """Whether ``text`` is nothing but ``spans`` (with fences, call tags, list brackets)."""
    return _LIST_PUNCTUATION.fullmatch(residue(text, list(spans))) is not None


def _problem(calls: Sequence[TextCall], bound: Mapping[str, BaseTool]) -> str:
    """Why ``calls`` cannot be recovered; empty when they can."""
    for call in calls:
        tool = bound.get(call.name)
        if tool is None:
            names = ", ".join(sorted(bound))
            return f"{call.name} is not a bound tool (bound: {names})"
        if call.args is None:
            return f"the arguments of {call.name} are not a JSON object"
        mismatch = schema_problem(tool, call.args)
        if mismatch:
            return f"the arguments of {call.name} do not match its schema ({mismatch})"
    return ""


def schema_problem(tool: BaseTool, args: Mapping[str, Any]) -> str:
    """Why ``args`` do not validate against ``tool``'s call schema; empty when they do.

    A pydantic schema validates them; a JSON-schema dict is checked for its required
    keys and the JSON types of the properties it types. Arguments the tool gets injected
    (``ToolRuntime``, ``InjectedStore``) are not part of the call schema.
    """
    schema = tool.tool_call_schema
    if isinstance(schema, Mapping):
        return _json_schema_problem(schema, args)
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        try:
            schema.model_validate(dict(args))
        except ValidationError as error:
            return "; ".join(_error_line(e) for e in error.errors()[:SHOWN_PROBLEMS])
    return ""


def _error_line(error: Mapping[str, Any]) -> str:
    where = ".".join(str(part) for part in error.get("loc") or ()) or "arguments"
    return f"{where}: {error.get('msg', 'invalid')}"


def _json_schema_problem(schema: Mapping[str, Any], args: Mapping[str, Any]) -> str:
    problems: list[str] = []
    required = schema.get("required")
    for key in required if isinstance(required, list) else ():
        if key not in args:
            problems.append(f"{key}: Field required")
    properties = schema.get("properties")
    for key, value in args.items():
        spec = properties.get(key) if isinstance(properties, Mapping) else None
        kind = spec.get("type") if isinstance(spec, Mapping) else None
        wanted = _JSON_TYPES.get(kind) if isinstance(kind, str) else None
        if wanted is None:
            continue
        if not isinstance(value, wanted) or (isinstance(value, bool) and bool not in wanted):
            problems.append(f"{key}: expected {kind}")
    return "; ".join(problems[:SHOWN_PROBLEMS])


def _form(text: str, spans: Sequence[JsonSpan]) -> str:
    """How the calls were written, for the event and the mark."""
    forms = [
        name
        for name, present in (
            ("tagged", bool(_TAG.search(text))),
            ("fenced", "```" in text),
            ("doubled_brace", any(s.start > 0 and text[s.start - 1] == "{" for s in spans)),
            ("list", "[" in residue(text, list(spans))),
        )
        if present
    ]
    return "+".join(forms) or "bare"
