"""Large user inputs: stored as artifacts and replaced in the window by their head, tail and ref."""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from langchain_core.messages import AnyMessage, BaseMessage

from ctxgraph.nodes.offload.refs import OFFLOAD_FAILED_KEY, OFFLOAD_KEY
from ctxgraph.state.messages import content_text, is_real_user_message
from ctxgraph.state.settings import Settings
from ctxgraph.state.tokens import count_text, encoding
from ctxgraph.store.artifacts import Artifact, ArtifactKind, ArtifactStore, ArtifactWriteError

logger = logging.getLogger("ctxgraph.offload")

INPUT_KIND: ArtifactKind = "user_input"
"""Artifact kind of a stored user input."""

EXCERPT_TOKENS = 1_600
"""Most tokens of the head and tail shown together; the framing adds under 200."""

MIN_EXCERPT_TOKENS = 100
"""Fewest tokens of head and tail shown together, however low the threshold is set."""

REASON_CHARS = 300
"""The error named in a not-saved notice is cut after this many characters."""


@dataclass(frozen=True)
class LargeInput:
    """A user message over its threshold (``input_threshold``) still in the window in full."""

    message: AnyMessage
    text: str
    tokens: int
    excerpt: int
    """Tokens of head and tail its stand-in shows."""

    @property
    def sha256(self) -> str:
        """SHA-256 hex of the text's UTF-8 bytes."""
        return hashlib.sha256(self.text.encode("utf-8", errors="surrogatepass")).hexdigest()


@lru_cache(maxsize=32)
def _tokens(text: str) -> int:
    """Tokens of a long text; memoized, as the router asks about the same message each step."""
    return count_text(text)


def input_threshold(settings: Settings, window: int | None) -> int:
    """Tokens above which a user message is offloaded; 0 means never.

    ``offload_input_tokens``, capped at half of a known input ``window``: a message that
    large could never be sent along with the rest of a request.
    """
    limit = settings.offload_input_tokens
    if limit <= 0:
        return 0
    return min(limit, window // 2) if window else limit


def large_inputs(
    messages: Sequence[AnyMessage], settings: Settings, window: int | None = None
) -> list[LargeInput]:
    """Real user messages over ``input_threshold`` not offloaded yet, in order.

    A message already replaced (by a stub or a not-saved notice) is never picked again;
    one too short to gain from its stub is left alone. Cheap for short messages: a text
    of ``n`` characters has at most ``4 n`` tokens, so only long texts are counted.
    """
    limit = input_threshold(settings, window)
    if limit <= 0:
        return []
    excerpt = max(MIN_EXCERPT_TOKENS, min(EXCERPT_TOKENS, limit // 2))
    floor = max(limit, excerpt + 200)
    found: list[LargeInput] = []
    for message in messages:
        if not message.id or not is_real_user_message(message):
            continue
        extra = message.additional_kwargs or {}
        if OFFLOAD_KEY in extra or OFFLOAD_FAILED_KEY in extra:
            continue
        text = content_text(message)
        if 4 * len(text) <= floor:
            continue
        tokens = _tokens(text)
        if tokens > floor:
            found.append(LargeInput(message, text, tokens, excerpt))
    return found


def _edges(text: str, budget: int) -> tuple[str, str]:
    """The first and last tokens of ``text`` within ``budget`` (two thirds for the head).

    Each edge is trimmed to whole lines when a line break lies near its cut.
    """
    tokens = encoding().encode(text, disallowed_special=())
    head_count = budget * 2 // 3
    tail_count = budget - head_count
    head = encoding().decode_bytes(tokens[:head_count]).decode("utf-8", errors="ignore")
    tail_bytes = encoding().decode_bytes(tokens[len(tokens) - tail_count :])
    tail = tail_bytes.decode("utf-8", errors="ignore")
    cut = head.rfind("\n")
    if cut > len(head) * 2 // 3:
        head = head[:cut]
    start = tail.find("\n")
    if 0 <= start < len(tail) // 3:
        tail = tail[start + 1 :]
    return head, tail


_BODY = re.compile(
    r"\n--- beginning ---\n(?P<head>.*)\n\[\.\.\. about [\d,]+ tokens not shown \.\.\.\]\n"
    r"--- end ---\n(?P<tail>.*)\Z",
    re.DOTALL,
)
"""The head and tail below the notice line of an offloaded (or not saved) input."""


def shown_words(message: BaseMessage) -> str | None:
    """The user's own words an offloaded input still shows: its head and tail, no notice.

    None for any other message. The compaction ledger reads constraints and identifiers
    from these, never from the notice ctxgraph wrote.
    """
    extra = message.additional_kwargs or {}
    if message.type != "human" or not (OFFLOAD_KEY in extra or OFFLOAD_FAILED_KEY in extra):
        return None
    match = _BODY.search(content_text(message))
    return "" if match is None else f"{match['head']}\n{match['tail']}"


def _body(item: LargeInput) -> str:
    head, tail = _edges(item.text, item.excerpt)
    omitted = max(0, item.tokens - count_text(head) - count_text(tail))
    return (
        f"--- beginning ---\n{head}\n[... about {omitted:,} tokens not shown ...]\n"
        f"--- end ---\n{tail}"
    )


def input_stub(item: LargeInput, artifact: Artifact) -> str:
    """The text standing in for a stored input: a notice with the ref, its head and tail."""
    ref = artifact.ref
    notice = (
        f"[user input offloaded] This user message is {item.tokens:,} tokens, too long to "
        f"keep in the conversation; its full text is stored as artifact {ref} "
        f"({artifact.lines:,} lines). Only its beginning and end are shown below. Read "
        f'the rest in pages of lines with read_artifact(ref="{ref}", offset=0, limit=200), '
        f'or find lines with grep_artifact(ref="{ref}", pattern="...").'
    )
    return f"{notice}\n{_body(item)}"


def unsaved_stub(item: LargeInput, reason: str) -> str:
    """The text standing in for an input that could not be stored: head, tail, a warning."""
    why = " ".join(reason.split())
    if len(why) > REASON_CHARS:
        why = why[:REASON_CHARS] + "..."
    notice = (
        f"[user input NOT saved] This user message is {item.tokens:,} tokens, too long to "
        f"keep in the conversation, and its full text was NOT saved ({why}). Only its "
        "beginning and end are shown below; the rest is lost. If the missing part matters, "
        "ask the user to send it again in smaller pieces."
    )
    return f"{notice}\n{_body(item)}"


def _content(message: BaseMessage, text: str) -> str | list[str | dict[str, Any]]:
    """``text`` as the message's content; non-text blocks (images, files) are kept after it."""
    if isinstance(message.content, str):
        return text
    others = [
        block
        for block in message.content
        if isinstance(block, dict) and block.get("type", "text") != "text"
    ]
    return [{"type": "text", "text": text}, *others]


def stored_input(item: LargeInput, artifact: Artifact) -> AnyMessage:
    """The message, same id, with its stub and ``additional_kwargs["offload"]``."""
    extra = {
        **item.message.additional_kwargs,
        OFFLOAD_KEY: {"ref": artifact.ref, "sha256": artifact.sha256, "tokens": item.tokens},
    }
    content = _content(item.message, input_stub(item, artifact))
    return item.message.model_copy(update={"content": content, "additional_kwargs": extra})


def unsaved_input(item: LargeInput, reason: str) -> AnyMessage:
    """The message, same id, with its head and tail and a notice that it was not saved."""
    logger.warning(
        "user message %s (%d tokens) was too large to keep and could not be stored: %s; "
        "only its head and tail stay in the conversation",
        item.message.id,
        item.tokens,
        reason,
    )
    extra = {
        **item.message.additional_kwargs,
        OFFLOAD_FAILED_KEY: {"sha256": item.sha256, "tokens": item.tokens, "error": reason},
    }
    content = _content(item.message, unsaved_stub(item, reason))
    return item.message.model_copy(update={"content": content, "additional_kwargs": extra})


@dataclass
class InputsOffloaded:
    """What offloading a window's large inputs did: replacement messages and refs written."""

    messages: list[AnyMessage]
    refs: list[str]


def offload_inputs(
    artifacts: ArtifactStore | None,
    items: Sequence[LargeInput],
    *,
    unavailable: str = "",
) -> InputsOffloaded:
    """Store each input and replace it; without ``artifacts``, say why (``unavailable``)."""
    done = InputsOffloaded([], [])
    for item in items:
        if artifacts is None:
            done.messages.append(unsaved_input(item, unavailable))
            continue
        try:
            artifact = artifacts.put(
                INPUT_KIND, item.text, source_id=str(item.message.id), tokens=item.tokens
            )
        except ArtifactWriteError as error:
            done.messages.append(unsaved_input(item, str(error)))
            continue
        done.messages.append(stored_input(item, artifact))
        done.refs.append(artifact.ref)
    return done


async def aoffload_inputs(
    artifacts: ArtifactStore | None,
    items: Sequence[LargeInput],
    *,
    unavailable: str = "",
) -> InputsOffloaded:
    """Async :func:`offload_inputs`."""
    done = InputsOffloaded([], [])
    for item in items:
        if artifacts is None:
            done.messages.append(unsaved_input(item, unavailable))
            continue
        try:
            artifact = await artifacts.aput(
                INPUT_KIND, item.text, source_id=str(item.message.id), tokens=item.tokens
            )
        except ArtifactWriteError as error:
            done.messages.append(unsaved_input(item, str(error)))
            continue
        done.messages.append(stored_input(item, artifact))
        done.refs.append(artifact.ref)
    return done
