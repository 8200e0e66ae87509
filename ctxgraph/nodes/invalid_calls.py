"""The ``invalid_calls`` node: answers tool calls whose arguments cannot be used.

A model answer lists calls whose arguments are not a JSON object in
``AIMessage.invalid_tool_calls``; the model node adds the calls of an answer cut off at
the output token limit. Chat Completions converters send invalid calls back to the
provider as ordinary assistant ``tool_calls`` (with the raw argument text), so each one
needs a tool result, or every later request holds a call without its result. This node
gives each one an error ``ToolMessage`` that names the problem and quotes the arguments,
and the model runs again.

It also rewrites the assistant message (same id, so ``add_messages`` replaces it in
place) into the form the rest of the graph already pairs with results: each invalid
entry becomes a ``tool_calls`` entry with empty arguments and the same id, and the
entries as the model sent them move to ``additional_kwargs["invalid_tool_calls"]``. The
request builder and compaction keep an assistant message and its results together by
``tool_calls`` ids, and providers get a well-formed call (``"{}"``) instead of the raw
text, which some servers reject.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    InvalidToolCall,
    ToolCall,
    ToolMessage,
)
from langchain_core.messages.tool import tool_call

from ctxgraph.state.graph_state import AgentState

INVALID_ARGUMENTS = (
    "Error: this {name} call was not run, because its arguments are unusable.\n"
    "Problem: {problem}\n{parser}Arguments as received{cut}: {arguments}\n"
    "Call the tool again with its arguments as one JSON object that matches its schema."
)
"""The error result of an invalid call; the placeholders name the call and the problem."""

PARSER_LINE = "Parser message: {message}\n"
"""The ``{parser}`` line: the provider parser's own message, when the entry carries one."""

SHOWN_ARGUMENT_CHARS = 500
"""How much of the raw argument text an error result quotes."""

SHOWN_PROBLEM_CHARS = 300
"""How much of the parser's error message an error result quotes."""

UNNAMED_TOOL = "unnamed_tool"
"""The tool name used when an invalid call came without one."""

ORIGINALS_KEY = "invalid_tool_calls"
"""``additional_kwargs`` key of a rewritten answer: its invalid calls as the model sent them."""

RESULT_ID_SUFFIX = "-invalid-arguments"
"""Suffix of an error result's message id (the call id comes first), stable across retries."""


CUT_OFF = (
    "the answer was cut off at the model's output token limit ({reason}) while it was "
    "writing its tool calls, so their arguments may be incomplete"
)
"""The ``error`` of a call in a cut-off answer; ``{reason}`` is the provider's stop reason."""

CUT_OFF_REASONS = {"finish_reason": "length", "stop_reason": "max_tokens"}
"""``response_metadata`` entries that mean the output limit cut the answer off."""


def cut_off_reason(reply: AIMessage) -> str | None:
    """The provider's stop reason when the output token limit cut ``reply`` off, else None."""
    for key, value in CUT_OFF_REASONS.items():
        if reply.response_metadata.get(key) == value:
            return f"{key} {value!r}"
    return None


def with_cut_off_calls_invalid(reply: AIMessage) -> AIMessage:
    """``reply`` with every tool call moved to ``invalid_tool_calls`` if it was cut off.

    When a streamed answer stops at the output limit in the middle of a call, the client
    completes the partial JSON as well as it can (``{"to": "a@b.c", "body": "Hi`` becomes
    a call with a shortened body), so the call looks valid. No call of such an answer is
    run; each gets an error result instead, and the model can call again.
    """
    reason = cut_off_reason(reply)
    if reason is None or not reply.tool_calls:
        return reply
    moved: list[InvalidToolCall] = [
        {
            "type": "invalid_tool_call",
            "id": call["id"],
            "name": call["name"],
            "args": json.dumps(call["args"], ensure_ascii=False),
            "error": CUT_OFF.format(reason=reason),
        }
        for call in reply.tool_calls
    ]
    return reply.model_copy(
        update={"tool_calls": [], "invalid_tool_calls": [*moved, *reply.invalid_tool_calls]}
    )


def invalid_call_id(message_id: str | None, index: int, name: str | None, args: str | None) -> str:
    """A stable id for an invalid call that came without one.

    It depends only on the answer's id, the entry's position, name and raw arguments, so
    the same answer always gets the same ids.
    """
    material = json.dumps([message_id, index, name, args], ensure_ascii=False)
    return f"call_invalid_{hashlib.sha256(material.encode()).hexdigest()[:24]}"


def with_invalid_call_ids(reply: AIMessage) -> AIMessage:
    """``reply`` with an id on every invalid call; unchanged when they all have one."""
    invalid = reply.invalid_tool_calls
    if all(entry.get("id") for entry in invalid):
        return reply
    fixed: list[InvalidToolCall] = [
        entry
        if entry.get("id")
        else {
            **entry,
            "id": invalid_call_id(reply.id, index, entry.get("name"), entry.get("args")),
        }
        for index, entry in enumerate(invalid)
    ]
    return reply.model_copy(update={"invalid_tool_calls": fixed})


def latest_answer(messages: Sequence[BaseMessage]) -> AIMessage | None:
    """The assistant message that the trailing tool results (if any) answer."""
    index = len(messages) - 1
    while index >= 0 and isinstance(messages[index], ToolMessage):
        index -= 1
    message = messages[index] if index >= 0 else None
    return message if isinstance(message, AIMessage) else None


def has_invalid_calls(messages: Sequence[BaseMessage]) -> bool:
    """Whether the latest answer still has invalid calls that no result answers yet."""
    answer = latest_answer(messages)
    return answer is not None and bool(answer.invalid_tool_calls)


def argument_problem(args: str | None) -> str:
    """Why ``args`` is not a JSON object, in one line (empty when it is one)."""
    if args is None or not args.strip():
        return "no arguments were sent"
    try:
        value = json.loads(args)
    except json.JSONDecodeError as error:
        return f"invalid JSON: {error.msg} (line {error.lineno}, column {error.colno})"
    if not isinstance(value, dict):
        return f"the arguments are a JSON {type(value).__name__}, not an object"
    return ""


def error_result(entry: InvalidToolCall, call_id: str, name: str) -> ToolMessage:
    """The error ``ToolMessage`` answering one invalid call."""
    args = entry.get("args")
    reported = _shorten(" ".join((entry.get("error") or "").split()), SHOWN_PROBLEM_CHARS)
    problem = argument_problem(args) or reported or "the model's answer marked it invalid"
    parser = PARSER_LINE.format(message=reported) if reported and reported != problem else ""
    text = "" if args is None else args
    cut = ""
    if len(text) > SHOWN_ARGUMENT_CHARS:
        cut = f" (first {SHOWN_ARGUMENT_CHARS} of {len(text)} characters)"
        text = text[:SHOWN_ARGUMENT_CHARS]
    content = INVALID_ARGUMENTS.format(
        name=name,
        problem=problem,
        parser=parser,
        cut=cut,
        arguments=json.dumps(text, ensure_ascii=False),
    )
    return ToolMessage(
        content=content,
        tool_call_id=call_id,
        name=name,
        status="error",
        id=f"{call_id}{RESULT_ID_SUFFIX}",
    )


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def answer_invalid_calls(answer: AIMessage) -> tuple[AIMessage, list[ToolMessage]]:
    """The rewritten answer and one error result per invalid call (see the module doc)."""
    if answer.id is None:
        raise ValueError(f"answer_invalid_calls needs a stored answer with an id, got {answer!r}")
    answer = with_invalid_call_ids(answer)
    calls: list[ToolCall] = list(answer.tool_calls)
    results: list[ToolMessage] = []
    for entry in answer.invalid_tool_calls:
        call_id = str(entry.get("id"))
        name = entry.get("name") or UNNAMED_TOOL
        calls.append(tool_call(name=name, args={}, id=call_id))
        results.append(error_result(entry, call_id, name))
    originals: list[dict[str, Any]] = [dict(entry) for entry in answer.invalid_tool_calls]
    rewritten = answer.model_copy(
        update={
            "tool_calls": calls,
            "invalid_tool_calls": [],
            "additional_kwargs": {**answer.additional_kwargs, ORIGINALS_KEY: originals},
        }
    )
    return rewritten, results


def invalid_calls_node(state: AgentState) -> dict[str, list[AnyMessage]]:
    """Answer the latest answer's invalid calls with error results; the model goes next."""
    messages = state.get("messages") or []
    answer = latest_answer(messages)
    if answer is None or not answer.invalid_tool_calls:
        last = type(messages[-1]).__name__ if messages else "no messages"
        raise ValueError(
            "invalid_calls_node expects an assistant answer with invalid_tool_calls, "
            f"optionally followed by tool results; the state ends with {last}"
        )
    rewritten, results = answer_invalid_calls(answer)
    return {"messages": [rewritten, *results]}
