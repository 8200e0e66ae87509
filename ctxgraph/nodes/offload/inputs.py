"""Large user inputs: stored as artifacts and replaced in the window by their head, tail and ref."""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from langchain_core.messages import AnyMessage, BaseMessage

from ctxgraph.nodes.offload.refs import OFFLOAD_FAILED_KEY, OFFLOAD_KEY
from ctxgraph.state.messages import content_text, is_real_user_message
from ctxgraph.state.sans_io import Flow, io
from ctxgraph.state.settings import Settings
from ctxgraph.state.tokens import TokenCounter, count_text, encoding
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

UNKNOWN_WINDOW_SHARE = 0.5
"""Share of ``trigger_tokens`` one user message may keep in the window when the main
model's input window is unknown (the same half a known window allows).

A message just below the threshold stays in full, and it is the newest message, so
compaction cannot fold it. The other half of the trigger is what the rest of that
request may use before it compacts again: the system prompt and the tool schemas, the
summary (``summary_max_tokens``, 1,500) with its record (``ledger_max_tokens``, 1,000),
the memory view (``memory_budget``, 2,000) and the recent messages kept with it. At the
defaults that is 9,000 tokens for the message and 9,000 for the rest; after compaction
the request then fits under the trigger, though not always under ``compaction_target``
(0.6) of it, in which case compaction keeps only the last exchange and the pinned
messages. A message over the threshold is replaced by a stub of under 1,800 tokens.
"""

WINDOW_FIX = (
    "set CTXGRAPH_CONTEXT_WINDOW (Settings.context_window) to the main model's input "
    "window in tokens"
)
"""How to tell ctxgraph the input window a provider does not report."""


class InputNotOffloadedError(RuntimeError):
    """A user message too large to keep in the window could not be offloaded.

    Raised when the main model's input window is unknown and the run has nowhere to store
    artifacts (no Store, or no thread id); the message says what to set.
    """


@dataclass(frozen=True)
class LargeInput:
    """A user message over its threshold (``input_threshold``) still in the window in full."""

    message: AnyMessage
    text: str
    tokens: int
    excerpt: int
    """Tokens of head and tail its stand-in shows."""
    limit: int = 0
    """The threshold it is over (``input_threshold``)."""
    window_known: bool = True
    """Whether the threshold came from a known input window (else from ``trigger_tokens``)."""

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
    large could never be sent along with the rest of a request. With the window unknown
    (``None``), capped at ``UNKNOWN_WINDOW_SHARE`` of ``trigger_tokens`` instead, so that
    after offloading the request fits under the trigger.
    """
    limit = settings.offload_input_tokens
    if limit <= 0:
        return 0
    if window:
        return min(limit, window // 2)
    return min(limit, int(settings.trigger_tokens * UNKNOWN_WINDOW_SHARE))


def refusal_limit(
    settings: Settings, window: int | None, *, can_offload: bool
) -> tuple[int, str] | None:
    """The most tokens one user message may have before it is refused, and what that is.

    For a caller that checks messages before it runs the graph (the command line). The
    text names the limit as in "over <text> of <tokens> tokens". None: no limit, because
    the graph offloads a large message (the window is unknown, input offloading is on and
    ``can_offload``: there is a working artifact store). A known ``window`` is the limit
    itself. With the window unknown and nothing to offload to, the limit is the input
    threshold, or ``trigger_tokens`` when input offloading is off; both texts say to set
    ``CTXGRAPH_CONTEXT_WINDOW``.

    Args:
        settings: The run's settings.
        window: The main model's input window, None when it is unknown.
        can_offload: Whether the run has a Store and a thread id to keep artifacts in.

    Returns:
        ``(tokens, text)``, or None when no message is refused for its size.

    """
    if window is not None:
        return window, "the model's input window"
    threshold = input_threshold(settings, None)
    if threshold > 0 and can_offload:
        return None
    if threshold > 0:
        return threshold, (
            "the offload threshold for user messages (offload_input_tokens, at most half of "
            "trigger_tokens while the model's input window is unknown; no artifact store "
            f"can hold the message: {WINDOW_FIX})"
        )
    return settings.trigger_tokens, (
        "trigger_tokens (the model's input window is unknown and input offloading is off, "
        f"offload_input_tokens=0; {WINDOW_FIX})"
    )


def large_inputs(
    messages: Sequence[AnyMessage],
    settings: Settings,
    window: int | None = None,
    *,
    counter: TokenCounter | None = None,
) -> list[LargeInput]:
    """Real user messages over ``input_threshold`` not offloaded yet, in order.

    A message already replaced (by a stub or a not-saved notice) is never picked again;
    one too short to gain from its stub is left alone. Tokens are counted with
    ``counter`` (the graph's), else with tiktoken; then it is cheap for short messages: a
    text of ``n`` characters has at most ``4 n`` tokens, so only long texts are counted.
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
        tokens = cheap_tokens(text, floor, counter, _tokens)
        if tokens is not None and tokens > floor:
            found.append(LargeInput(message, text, tokens, excerpt, limit, window is not None))
    return found


def cheap_tokens(
    text: str, floor: int, counter: TokenCounter | None, tokens: Callable[[str], int]
) -> int | None:
    """The tokens of ``text`` by ``counter`` (the graph's), else by ``tokens`` (tiktoken).

    With tiktoken a text of ``n`` characters has at most ``4 n`` tokens, so one that cannot
    be over ``floor`` is not counted (None).
    """
    if counter is not None and not counter.tiktoken:
        return counter.count_text(text)
    if 4 * len(text) <= floor:
        return None
    return tokens(text)


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


def not_offloaded(item: LargeInput, unavailable: str) -> InputNotOffloadedError:
    """The error for an input over an unknown window's threshold with nowhere to store it."""
    return InputNotOffloadedError(
        f"user message {item.message.id} is {item.tokens:,} tokens, over the "
        f"{item.limit:,} tokens a message may keep in the conversation while the main model's "
        "input window is unknown (the smaller of offload_input_tokens and half of "
        f"trigger_tokens), and it cannot be offloaded: {unavailable}. To send it, "
        f"{WINDOW_FIX}, or run the graph with a LangGraph Store (build_graph(store=...)) "
        "and a thread id so it is stored as an artifact"
    )


def _check_storable(artifacts: ArtifactStore | None, items: Sequence[LargeInput], why: str) -> None:
    """Raise before anything changes when an item cannot be stored and must not be cut.

    Without ``artifacts``, an item over an unknown window's threshold is refused
    (``InputNotOffloadedError``); one over a known window's keeps its head and tail.
    """
    if artifacts is not None:
        return
    for item in items:
        if not item.window_known:
            raise not_offloaded(item, why)


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
) -> Flow[InputsOffloaded]:
    """Store each input and replace it; without ``artifacts``, say why (``unavailable``).

    A flow (``ctxgraph.state.sans_io``): ``run`` or ``arun`` it, or ``yield from`` it.

    Raises:
        InputNotOffloadedError: without ``artifacts``, for an input whose threshold came
            from ``trigger_tokens`` (the main model's input window is unknown).

    """
    _check_storable(artifacts, items, unavailable)
    done = InputsOffloaded([], [])
    for item in items:
        if artifacts is None:
            done.messages.append(unsaved_input(item, unavailable))
            continue
        try:
            artifact = yield from io(
                artifacts.put,
                artifacts.aput,
                INPUT_KIND,
                item.text,
                source_id=str(item.message.id),
                tokens=item.tokens,
            )
        except ArtifactWriteError as error:
            done.messages.append(unsaved_input(item, str(error)))
            continue
        done.messages.append(stored_input(item, artifact))
        done.refs.append(artifact.ref)
    return done
