"""Old tool-call arguments: long strings stored as artifacts and replaced by a placeholder."""

from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage

from ctxgraph.nodes.offload.inputs import cheap_tokens
from ctxgraph.nodes.offload.refs import OFFLOAD_ARGS_KEY
from ctxgraph.state.sans_io import Flow, io
from ctxgraph.state.settings import Settings
from ctxgraph.state.tokens import TokenCounter, count_text
from ctxgraph.store.artifacts import Artifact, ArtifactKind, ArtifactStore, ArtifactWriteError

logger = logging.getLogger("ctxgraph.offload")

ARGS_KIND: ArtifactKind = "tool_args"
"""Artifact kind of a stored tool-call argument."""

Path = tuple[str | int, ...]
"""Where a value sits in a call's arguments: keys of objects, indexes of arrays."""

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def arg_path(path: Path) -> str:
    """The JSON path of an argument: ``content``, ``files[2].text``, ``["a key"]``."""
    out = ""
    for step in path:
        if isinstance(step, int):
            out += f"[{step}]"
        elif _IDENTIFIER.fullmatch(step):
            out += f".{step}" if out else step
        else:
            out += f"[{json.dumps(step, ensure_ascii=False)}]"
    return out


def placeholder(artifact: Artifact, tokens: int) -> str:
    """The string an offloaded argument is replaced by; it names the ref and how to read it."""
    return f'[offloaded to {artifact.ref}: {tokens:,} tokens; read_artifact(ref="{artifact.ref}")]'


@lru_cache(maxsize=64)
def _tokens(text: str) -> int:
    """Tokens of a long argument; memoized, as the router looks at the same calls each step."""
    return count_text(text)


def _strings(value: object, path: Path = ()) -> Iterator[tuple[Path, str]]:
    """Every string inside ``value`` (objects and arrays, at any depth) with its path."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(item, (*path, str(key)))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _strings(item, (*path, index))


@dataclass(frozen=True)
class LongArgument:
    """A string argument of an old tool call, long enough to offload."""

    message: AIMessage
    call_id: str
    tool: str
    path: Path
    text: str
    tokens: int

    @property
    def part(self) -> str:
        """The argument's JSON path, the artifact's ``part``."""
        return arg_path(self.path)


def call_id_of(message: BaseMessage, index: int, call: Mapping[str, Any]) -> str:
    """A call's id; a call without one is named by its message id and position."""
    call_id = call.get("id")
    return call_id if isinstance(call_id, str) and call_id else f"{message.id}#{index}"


def _offloaded(message: BaseMessage) -> set[tuple[str, str]]:
    """(call id, argument path) pairs of ``message`` offloaded already."""
    return {
        (str(entry.get("call_id")), str(entry.get("arg")))
        for entry in message.additional_kwargs.get(OFFLOAD_ARGS_KEY) or ()
        if isinstance(entry, Mapping)
    }


def long_arguments(
    messages: Sequence[AnyMessage], settings: Settings, *, counter: TokenCounter | None = None
) -> list[LongArgument]:
    """String arguments over ``offload_args_min_tokens`` in the tool calls of ``messages``.

    Arguments offloaded already are skipped, so a placeholder is never offloaded again.
    Tokens are counted with ``counter`` (the graph's), else with tiktoken; then it is
    cheap for short strings: one of ``n`` characters has at most ``4 n`` tokens, so only
    long strings are counted.
    """
    least = settings.offload_args_min_tokens
    found: list[LongArgument] = []
    for message in messages:
        if isinstance(message, AIMessage) and message.tool_calls and message.id:
            found += _message_arguments(message, least, counter)
    return found


def _message_arguments(
    message: AIMessage, least: int, counter: TokenCounter | None
) -> list[LongArgument]:
    """The string arguments over ``least`` tokens in ``message``'s tool calls, not offloaded."""
    done = _offloaded(message)
    found: list[LongArgument] = []
    for index, call in enumerate(message.tool_calls):
        call_id = call_id_of(message, index, call)
        for path, text in _strings(call["args"]):
            if (call_id, arg_path(path)) in done:
                continue
            tokens = cheap_tokens(text, least, counter, _tokens)
            if tokens is not None and tokens > least:
                found.append(LongArgument(message, call_id, call["name"], path, text, tokens))
    return found


def _replaced(value: Any, path: Path, text: str) -> Any:
    """``value`` (a copy) with the string at ``path`` replaced by ``text``."""
    if not path:
        return text
    step, rest = path[0], path[1:]
    if isinstance(value, Mapping) and isinstance(step, str) and step in value:
        return {**value, step: _replaced(value[step], rest, text)}
    if isinstance(value, (list, tuple)) and isinstance(step, int) and step < len(value):
        items = list(value)
        items[step] = _replaced(items[step], rest, text)
        return items
    return value


def with_placeholders(
    message: AIMessage, stored: Sequence[tuple[LongArgument, Artifact]]
) -> AIMessage:
    """``message`` (same id) with each stored argument replaced by its placeholder.

    ``tool_calls`` and the provider's copy of the calls (``additional_kwargs["tool_calls"]``,
    whose ``function.arguments`` is a JSON string, and ``tool_use`` content blocks) change
    together, and ``additional_kwargs["offload_args"]`` lists each ``{ref, sha256, tokens,
    call_id, arg}``.
    """
    new_args: dict[str, Any] = {}
    calls = copy.deepcopy(message.tool_calls)
    for index, call in enumerate(calls):
        call_id = call_id_of(message, index, call)
        for argument, artifact in stored:
            if argument.call_id == call_id:
                text = placeholder(artifact, argument.tokens)
                call["args"] = _replaced(call["args"], argument.path, text)
                new_args[call_id] = call["args"]
    extra = dict(message.additional_kwargs)
    extra[OFFLOAD_ARGS_KEY] = [
        *(extra.get(OFFLOAD_ARGS_KEY) or ()),
        *(
            {
                "ref": artifact.ref,
                "sha256": artifact.sha256,
                "tokens": argument.tokens,
                "call_id": argument.call_id,
                "arg": argument.part,
            }
            for argument, artifact in stored
        ),
    ]
    if isinstance(extra.get("tool_calls"), list):
        extra["tool_calls"] = [_provider_call(raw, new_args) for raw in extra["tool_calls"]]
    content = message.content
    if isinstance(content, list):
        content = [_content_block(block, new_args) for block in content]
    update = {"tool_calls": calls, "additional_kwargs": extra, "content": content}
    return message.model_copy(update=update)


def _provider_call(raw: object, new_args: Mapping[str, Any]) -> object:
    """An OpenAI-format call with its ``function.arguments`` re-encoded from the new args."""
    if not isinstance(raw, Mapping) or raw.get("id") not in new_args:
        return raw
    function = raw.get("function")
    if not isinstance(function, Mapping):
        return raw
    arguments = json.dumps(new_args[raw["id"]], ensure_ascii=False)
    return {**raw, "function": {**function, "arguments": arguments}}


def _content_block(block: object, new_args: Mapping[str, Any]) -> Any:
    """An Anthropic-format ``tool_use`` block with its ``input`` replaced by the new args."""
    if (
        isinstance(block, dict)
        and block.get("type") in ("tool_use", "tool_call")
        and block.get("id") in new_args
    ):
        key = "input" if block.get("type") == "tool_use" else "args"
        return {**block, key: new_args[block["id"]]}
    return block


@dataclass
class ArgsOffloaded:
    """What offloading old tool arguments did: replacement messages and refs written."""

    messages: list[AnyMessage] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)


def _by_message(arguments: Sequence[LongArgument]) -> list[list[LongArgument]]:
    groups: dict[str, list[LongArgument]] = {}
    for argument in arguments:
        groups.setdefault(str(argument.message.id), []).append(argument)
    return list(groups.values())


def _failed(argument: LongArgument, error: ArtifactWriteError) -> None:
    logger.warning(
        "argument %s of tool call %s (%d tokens) stays in the conversation: it could not be "
        "stored (%s)",
        argument.part,
        argument.call_id,
        argument.tokens,
        error,
    )


def offload_arguments(
    artifacts: ArtifactStore, arguments: Sequence[LongArgument]
) -> Flow[ArgsOffloaded]:
    """Store each argument and replace it in its message; one that fails to store stays.

    A flow (``ctxgraph.state.sans_io``): ``run`` or ``arun`` it, or ``yield from`` it.
    """
    done = ArgsOffloaded()
    for group in _by_message(arguments):
        stored: list[tuple[LongArgument, Artifact]] = []
        for argument in group:
            try:
                artifact = yield from io(
                    artifacts.put,
                    artifacts.aput,
                    ARGS_KIND,
                    argument.text,
                    source_id=argument.call_id,
                    tool_name=argument.tool,
                    part=argument.part,
                    tokens=argument.tokens,
                )
            except ArtifactWriteError as error:
                _failed(argument, error)
                continue
            stored.append((argument, artifact))
        if stored:
            done.messages.append(with_placeholders(group[0].message, stored))
            done.refs.extend(artifact.ref for _, artifact in stored)
    return done
