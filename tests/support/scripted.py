"""Helpers for tests that drive the graph with scripted models: tell summary calls apart."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage

from ctxgraph.nodes.compaction.plan import SUMMARY_REQUEST_ORIGIN
from ctxgraph.nodes.compaction.summarizer import SUMMARY_SYSTEM
from ctxgraph.state.demo_replies import demo_summary
from ctxgraph.state.messages import message_origin
from ctxgraph.state.scripted_model import ScriptedChatModel

MainReply = AIMessage | str | BaseException
"""What a main-model call answers: a reply, plain text, or an error to raise."""


def is_summary_request(messages: Sequence[BaseMessage]) -> bool:
    """True for a summary call: a compact one opens with the summary system prompt, a
    shared-prefix one ends with the marked summary instruction (or its repair request)."""
    if not messages:
        return False
    if message_origin(messages[-1]) == SUMMARY_REQUEST_ORIGIN:
        return True
    return isinstance(messages[0], SystemMessage) and messages[0].content == SUMMARY_SYSTEM


def summary_requests(model: ScriptedChatModel) -> list[list[BaseMessage]]:
    """The summary calls ``model`` answered, in order."""
    return [request for request in model.requests if is_summary_request(request)]


def main_requests(model: ScriptedChatModel) -> list[list[BaseMessage]]:
    """The main-model (agent) calls ``model`` answered, in order."""
    return [request for request in model.requests if not is_summary_request(request)]


def prompt_text(request: Sequence[BaseMessage]) -> str:
    """The human prompt of a summary call."""
    content = request[-1].content
    assert isinstance(content, str)
    return content


def block(prompt: str, tag: str) -> str:
    """The text inside ``<tag>…</tag>`` of a summary prompt (without the framing newlines)."""
    match = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", prompt, re.DOTALL)
    assert match is not None, f"no <{tag}> block in the prompt"
    return match.group(1)


def summary_text(
    intent: str, summary: str, artifacts: str = "See the ledger.", next_steps: str = "Go on."
) -> str:
    """A well-formed four-section summary answer."""
    return (
        f"SESSION INTENT\n{intent}\nSUMMARY\n{summary}\nARTIFACTS\n{artifacts}\n"
        f"NEXT STEPS\n{next_steps}"
    )


def demo_summarizer() -> ScriptedChatModel:
    """A summary model that answers every call with ``graph.demo.demo_summary``."""
    return ScriptedChatModel(responder=lambda messages: demo_summary(prompt_text(messages)))


class Dispatch:
    """A responder that answers summary calls and main calls from separate sources.

    ``main`` is either a list of replies played in order or a function of the request;
    ``summary`` is a list of summary replies played in order or a function of the prompt.
    An exception instance in a list is raised instead of answered.
    """

    def __init__(
        self,
        main: Iterable[MainReply] | Callable[[list[BaseMessage]], AIMessage],
        summary: Iterable[MainReply] | Callable[[str], AIMessage] = demo_summary,
    ) -> None:
        self._main: Any = main if callable(main) else list(main)
        self._summary: Any = summary if callable(summary) else list(summary)

    @staticmethod
    def _play(source: Any, argument: Any) -> AIMessage:
        item = source(argument) if callable(source) else source.pop(0)
        if isinstance(item, BaseException):
            raise item
        return AIMessage(content=item) if isinstance(item, str) else item

    def __call__(self, messages: list[BaseMessage]) -> AIMessage:
        if is_summary_request(messages):
            return self._play(self._summary, prompt_text(messages))
        return self._play(self._main, messages)


def tool_call(name: str, args: dict[str, Any], call_id: str, *, id: str | None = None) -> AIMessage:
    """An assistant message making one tool call."""
    return AIMessage(
        content="",
        id=id or f"ai-{call_id}",
        tool_calls=[{"name": name, "args": args, "id": call_id}],
    )
