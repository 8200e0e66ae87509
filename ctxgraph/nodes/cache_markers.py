"""Explicit prompt-cache markers: Anthropic-style ``cache_control`` on the stable part.

With ``Settings.cache_markers`` on, the model node sends the request with the last content
block of the stable part's last message marked ``{"cache_control": {"type": "ephemeral"}}``
(a provider that caches prefixes then caches everything up to it). Only models that accept
such blocks get them: ``langchain_anthropic``'s ``ChatAnthropic`` and its subclasses, or any
chat model whose class sets ``accepts_cache_control = True`` (the detection hook).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage

CACHE_CONTROL: dict[str, str] = {"type": "ephemeral"}
"""The marker a content block gets."""


def accepts_cache_control(model: BaseChatModel) -> bool:
    """True when ``model`` takes ``cache_control`` content blocks.

    Detected by class: ``ChatAnthropic`` from a ``langchain_anthropic`` module anywhere in
    its class hierarchy, or a class attribute ``accepts_cache_control`` set to True.
    """
    if getattr(type(model), "accepts_cache_control", False) is True:
        return True
    return any(
        cls.__name__ == "ChatAnthropic" and cls.__module__.startswith("langchain_anthropic")
        for cls in type(model).__mro__
    )


def marked_blocks(content: str | list[str | dict[Any, Any]]) -> list[str | dict[Any, Any]] | None:
    """A copy of ``content`` whose last block carries the marker; None when it has no block.

    A string becomes one text block; a last block that is a bare string becomes a text
    block too. The given content is never changed.
    """
    if not content:
        return None
    if isinstance(content, str):
        return [{"type": "text", "text": content, "cache_control": dict(CACHE_CONTROL)}]
    blocks = copy.deepcopy(list(content))
    last = blocks[-1]
    block = {"type": "text", "text": last} if isinstance(last, str) else last
    blocks[-1] = {**block, "cache_control": dict(CACHE_CONTROL)}
    return blocks


def with_cache_marker(request: Sequence[BaseMessage], stable: int) -> list[BaseMessage]:
    """``request`` with the last message of its first ``stable`` messages marked.

    That message is copied (``model_copy``); every other message is passed as it is, so
    cached message objects stay untouched. Unchanged when there is nothing to mark.
    """
    messages = list(request)
    if not 0 < stable <= len(messages):
        return messages
    target = messages[stable - 1]
    blocks = marked_blocks(target.content)
    if blocks is not None:
        messages[stable - 1] = target.model_copy(update={"content": blocks})
    return messages
