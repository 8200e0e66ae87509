"""What a finished child leaves: its bounded result message, transcript text and record entry."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage

from ctxgraph.nodes.skills.active import cut_to_tokens
from ctxgraph.nodes.subagents.tool import TASK_TOOL
from ctxgraph.state.delegations import DelegationEntry, DelegationStatus
from ctxgraph.state.messages import content_text, safe_text, sanitized_message
from ctxgraph.state.tokens import TokenCounter, count_text

_COUNTER = TokenCounter(max_entries=2_000)
"""Counts the answers whose provider reported no usage (message counts cached by id)."""

SUBAGENT_KEY = "subagent"
"""``additional_kwargs`` key of a task result: status, stop reason, hashes and refs."""


@dataclass
class Outcome:
    """How one child ended: status, reason, its last messages and what it cost."""

    status: DelegationStatus
    stop_reason: str
    messages: list[BaseMessage] = field(default_factory=list)
    error: str | None = None
    elapsed_s: float = 0.0

    def final_text(self) -> str:
        """The last assistant text, or the last non-empty one before it; may be empty.

        NUL and lone surrogates are replaced by U+FFFD (``safe_text``), so the answer can
        be stored as an artifact and in the parent's thread.
        """
        for message in reversed(self.messages):
            if isinstance(message, AIMessage):
                text = safe_text(content_text(message)).strip()
                if text:
                    return text
        return ""

    def usage(self) -> tuple[int, int]:
        """Input and output tokens of the child's model calls.

        Each answer's ``usage_metadata`` is used as the provider reported it; an answer
        without one is counted here: the transcript before it as input (tool schemas
        left out) and the answer as output.
        """
        tokens_in = tokens_out = 0
        for index, message in enumerate(self.messages):
            if not isinstance(message, AIMessage):
                continue
            if message.usage_metadata:
                tokens_in += message.usage_metadata.get("input_tokens", 0)
                tokens_out += message.usage_metadata.get("output_tokens", 0)
            else:
                tokens_in += _COUNTER.count_messages(self.messages[:index])
                tokens_out += _COUNTER.count_message(message)
        return tokens_in, tokens_out


def completed_outcome(messages: list[BaseMessage], elapsed_s: float) -> Outcome:
    """A child that ended by itself: ``completed``, or ``failed`` when it said nothing."""
    outcome = Outcome("completed", "final_answer", messages, elapsed_s=elapsed_s)
    if not outcome.final_text():
        outcome.status, outcome.stop_reason = "failed", "empty_answer"
        outcome.error = "the subagent ended without any answer text"
    return outcome


def transcript_text(messages: Sequence[BaseMessage]) -> str:
    """The child's whole transcript as numbered plain text, tool calls included.

    NUL and lone surrogates are replaced by U+FFFD, so the text can be stored.
    """
    lines: list[str] = []
    for number, message in enumerate(messages, start=1):
        role = {
            "system": "system",
            "human": "user",
            "ai": "assistant",
            "tool": "tool",
        }.get(message.type, message.type)
        if isinstance(message, ToolMessage):
            role = f"tool {message.name or ''} ({message.tool_call_id})".replace("  ", " ")
        lines.append(f"[{number}] {role}: {content_text(message)}")
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                arguments = json.dumps(call["args"], ensure_ascii=False, sort_keys=True)
                lines.append(f"    call {call['name']} ({call.get('id')}): {arguments}")
    return safe_text("\n".join(lines) + "\n")


@dataclass(frozen=True)
class Refs:
    """Artifacts of a child: its full answer (when cut) and its transcript."""

    transcript: str | None = None
    answer: str | None = None
    problem: str | None = None
    """Why an artifact could not be stored, when one could not."""


def status_line(kind: str, outcome: Outcome, refs: Refs, full_tokens: int, cut: bool) -> str:
    """The line after the result: status, reason, time, and where the full text is."""
    reason = "" if outcome.stop_reason == "final_answer" else f" ({outcome.stop_reason})"
    parts = [f"[subagent {kind}: {outcome.status}{reason} after {outcome.elapsed_s:.1f} s"]
    if outcome.error:
        parts.append(f"error: {outcome.error}")
    if cut:
        where = refs.answer or "not stored"
        parts.append(f"answer cut from {full_tokens} tokens, full answer: {where}")
    if refs.transcript:
        parts.append(f"transcript: {refs.transcript}")
    if refs.problem:
        parts.append(f"artifacts not stored: {refs.problem}")
    return "; ".join(parts) + "]"


STATUS_LINE_TOKENS = 80
"""Tokens of the result budget set aside for the status line."""


def answer_budget(result_tokens: int) -> int:
    """Tokens of a child's answer that fit in a result of ``result_tokens``."""
    return max(result_tokens - STATUS_LINE_TOKENS, result_tokens // 2)


def cut_answer(text: str, budget: int) -> tuple[str, int, bool]:
    """``text`` cut to ``budget`` tokens, its full token count, and whether it was cut."""
    tokens = count_text(text)
    if tokens <= budget:
        return text, tokens, False
    kept, _ = cut_to_tokens(text, budget, count_text)
    return kept, tokens, True


def result_message(
    call_id: str, kind: str, outcome: Outcome, refs: Refs, budget: int, checkpoint_ns: str | None
) -> ToolMessage:
    """The parent's tool result: the cut answer, a status line, ``additional_kwargs``.

    Made storable by ``sanitized_message`` (an error text may hold anything).
    """
    full = outcome.final_text()
    kept, full_tokens, cut = cut_answer(full, answer_budget(budget))
    line = status_line(kind, outcome, refs, full_tokens, cut)
    content = f"{kept}\n\n{line}" if kept else line
    tokens_in, tokens_out = outcome.usage()
    meta: dict[str, Any] = {
        "type": kind,
        "status": outcome.status,
        "stop_reason": outcome.stop_reason,
        "result_sha256": hashlib.sha256(full.encode("utf-8", "surrogatepass")).hexdigest(),
        "result_tokens": full_tokens,
        "cut": cut,
        "result_ref": refs.answer,
        "transcript_ref": refs.transcript,
        "checkpoint_ns": checkpoint_ns,
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "elapsed_s": round(outcome.elapsed_s, 3),
    }
    message = ToolMessage(
        content=content,
        tool_call_id=call_id,
        name=TASK_TOOL,
        status="success" if outcome.status == "completed" else "error",
        additional_kwargs={SUBAGENT_KEY: meta},
    )
    return sanitized_message(message)


def final_entry(call_id: str, message: ToolMessage, brief: str) -> DelegationEntry:
    """The record's final entry for a result made by ``result_message``."""
    meta = message.additional_kwargs[SUBAGENT_KEY]
    return {
        "id": call_id,
        "type": meta["type"],
        "brief": brief,
        "status": meta["status"],
        "stop_reason": meta["stop_reason"],
        "elapsed_s": meta["elapsed_s"],
        "transcript_ref": meta["transcript_ref"],
        "result_ref": meta["result_ref"],
        "checkpoint_ns": meta["checkpoint_ns"],
        "tokens_in": meta["tokens_in"],
        "tokens_out": meta["tokens_out"],
    }


def child_prompt(system_prompt: str) -> SystemMessage:
    """The child's system message (a fixed id, so a resumed child does not repeat it)."""
    return SystemMessage(content=system_prompt, id="subagent-system")
