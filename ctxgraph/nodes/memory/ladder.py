"""The extraction ladder as model calls: the ``MemoryUpdate`` call, then one ask for plain lines.

The first call asks for the ``MemoryUpdate`` tool. Its answer is read in order of trust:
the tool call, else a ``MemoryUpdate`` written as JSON in the text (``reading``). Only
when neither holds anything usable (no tool call, no usable JSON) is the model asked once
more, with ``LINE_PROMPT``: one fact per line in a format a small model can write. The
sync and async extractors share :class:`ExtractionLadder` and differ only in how they call
the model.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from langchain_core.exceptions import OutputParserException
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.output_parsers import BaseOutputParser
from langchain_core.outputs import ChatGeneration
from pydantic import BaseModel

from ctxgraph.nodes.memory.filter import render_rows
from ctxgraph.nodes.memory.reading import (
    LINE_FORMAT,
    Reading,
    read_text,
    read_update,
    unreadable,
)
from ctxgraph.state.usage import CallUsage

logger = logging.getLogger("ctxgraph.memory")

Rung = Literal["update", "lines"]
"""A call of the ladder: the ``MemoryUpdate`` call, or the ask for plain lines."""

LINE_PROMPT = f"""List what the user says about themselves in the conversation below that \
stays true later: who they are, their work, where they are, how they want to be answered.

One fact per line, exactly in this form, and nothing else:
{LINE_FORMAT}

- key: a short snake_case name, e.g. preferred_language
- content: the fact in a few words
- category: preference, context, goal or correction
- quote: the user's own words, copied exactly from one user line

Requests to do something now are not facts. If there is no such fact, answer NONE.

<new_conversation>
{{conversation}}
</new_conversation>"""
"""The ladder's last rung: ``{conversation}`` is the extraction's rows, as the first call
shows them. Its answer is read by ``read_lines``; every line passes the same gate."""

LINE_PLACEHOLDERS = frozenset({"conversation"})
"""The placeholders ``LINE_PROMPT`` uses."""


def line_messages(system: str, rows: Sequence[Mapping[str, str]]) -> list[BaseMessage]:
    """The messages of the ask for plain lines over ``rows``, under the extraction's system."""
    return [
        SystemMessage(content=system),
        HumanMessage(content=LINE_PROMPT.format(conversation=render_rows(rows))),
    ]


_UNREADABLE = (OutputParserException, TypeError, ValueError)
"""What reading a reply's tool call may raise: the reply's fault, not the call's."""


def read_reply(parser: BaseOutputParser[Any], reply: Any) -> Reading:
    """The reading of a ``MemoryUpdate`` call's reply: its tool call, else JSON in its text."""
    try:
        parsed = _parsed(parser, reply)
    except _UNREADABLE as error:
        return _or_text(reply, f"invalid MemoryUpdate arguments ({_first_line(error)})")
    if parsed is not None:
        return _from_arguments(parsed, reply)
    if isinstance(reply, AIMessage) and reply.invalid_tool_calls:
        return _or_text(reply, "invalid MemoryUpdate arguments (not JSON)")
    return _or_text(reply, "no MemoryUpdate tool call")


def read_raw(result: Any) -> Reading:
    """:func:`read_reply` for ``with_structured_output(include_raw=True)``'s dict."""
    if not isinstance(result, dict) or "raw" not in result:
        return _from_arguments(result, None)
    parsed, failure = result.get("parsed"), result.get("parsing_error")
    if isinstance(failure, BaseException):
        return _or_text(result["raw"], f"invalid MemoryUpdate arguments ({_first_line(failure)})")
    if parsed is not None:
        return _from_arguments(parsed, result["raw"])
    return _or_text(result["raw"], "no MemoryUpdate tool call")


def raw_of(result: Any) -> Any:
    """The model's own reply inside ``include_raw=True``'s dict (or the result itself)."""
    if isinstance(result, dict) and "raw" in result:
        return result["raw"]
    return result


def text_of(reply: Any) -> str:
    """The text of a reply (a message or a string); empty for anything else."""
    if isinstance(reply, BaseMessage):
        return reply.text
    return reply if isinstance(reply, str) else ""


def _parsed(parser: BaseOutputParser[Any], reply: Any) -> Any:
    if isinstance(reply, BaseMessage):
        return parser.parse_result([ChatGeneration(message=reply)])
    return parser.invoke(reply)


def _from_arguments(arguments: Any, reply: Any) -> Reading:
    """The reading of a tool call's arguments; the text's when they hold nothing usable."""
    if isinstance(arguments, BaseModel):
        arguments = arguments.model_dump()
    reading = read_update(arguments, "tool call")
    if reading.usable:
        return reading
    why = reading.problem or "; ".join(reason for _, reason in reading.dropped)
    return _or_text(reply, f"invalid MemoryUpdate arguments ({why})", reading)


def _or_text(reply: Any, problem: str, tried: Reading | None = None) -> Reading:
    """The ``MemoryUpdate`` written in the reply's text, or why nothing usable was read."""
    text = text_of(reply)
    reading = read_text(text)
    if reading is not None and reading.usable:
        return reading
    if reading is not None:
        why = reading.problem or "; ".join(reason for _, reason in reading.dropped)
        problem = f"{problem} and no usable fact in the MemoryUpdate JSON of the text ({why})"
    elif not text.strip():
        problem = f"{problem} and an empty answer"
    else:
        problem = f"{problem} and no MemoryUpdate JSON in the answer text ({len(text)} chars)"
    failed = unreadable("answer text", problem)
    for earlier in (tried, reading):
        if earlier is not None:
            failed.dropped.extend(earlier.dropped)
    return failed


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


class ExtractionLadder:
    """One extraction, as model calls: which prompt to send next, and what was read.

    ``next_call`` names the rung and its messages (None once done); the caller makes
    the call, reads the reply for that rung (``read_reply`` / ``read_raw`` /
    ``read_lines``) and hands the reading and the call's usage to ``answered``. The
    ``MemoryUpdate`` call always runs; the ask for lines runs once, only when the first
    answer held nothing usable.
    """

    def __init__(self, first: list[BaseMessage], lines: list[BaseMessage]) -> None:
        self._prompts: dict[Rung, list[BaseMessage]] = {"update": first, "lines": lines}
        self._rung: Rung | None = "update"
        self.calls: list[CallUsage] = []
        """The usage of every call made, in order."""
        self.readings: list[Reading] = []
        """The reading of every answer, in order."""

    def next_call(self) -> tuple[Rung, list[BaseMessage]] | None:
        """The rung to call next and its messages; None once the extraction is read."""
        if self._rung is None:
            return None
        return self._rung, self._prompts[self._rung]

    def answered(self, reading: Reading, usage: CallUsage) -> None:
        """Take the current rung's reading and usage: done, or ask for lines next."""
        self.calls.append(usage)
        self.readings.append(reading)
        if reading.usable or self._rung == "lines":
            self._rung = None
            return
        logger.info(
            "memory model's answer held no usable MemoryUpdate (%s); asking once more for "
            "plain lines",
            reading.problem or reading.summary(),
        )
        self._rung = "lines"

    @property
    def reading(self) -> Reading | None:
        """The usable reading of the extraction; None when no answer held one."""
        last = self.readings[-1] if self.readings else None
        return last if last is not None and last.usable else None

    def dropped(self) -> list[tuple[str, str]]:
        """``(label, reason)`` of every item dropped by any answer's reading, in order."""
        return [item for reading in self.readings for item in reading.dropped]

    def skipped(self) -> str | None:
        """Why nothing was read (each answer's problem), or None when something was."""
        if self.reading is not None:
            return None
        problems = [reading.problem or reading.summary() for reading in self.readings]
        if len(problems) > 1:
            return f"{problems[0]}; asked for plain lines: {'; '.join(problems[1:])}"
        return problems[0] if problems else "no answer"
