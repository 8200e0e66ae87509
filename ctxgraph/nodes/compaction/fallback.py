"""The last rung of the summary ladder: a model-free, degraded record of the folded turns."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage

from ctxgraph.nodes.compaction.faithfulness import DEGRADED_KEY
from ctxgraph.nodes.compaction.plan import SummaryJob
from ctxgraph.nodes.compaction.sections import SECTIONS
from ctxgraph.nodes.compaction.summarizer import Check, SummaryError
from ctxgraph.state.identifiers import extract_identifiers
from ctxgraph.state.messages import content_text, is_real_user_message
from ctxgraph.state.settings import Settings
from ctxgraph.state.tokens import count_text

DEGRADED = DEGRADED_KEY
"""The key that marks sections (and the summary record and mark) as model-free."""

RECOVER_HINT = "read_history versions {first}..{last} to recover details."
"""Where a degraded record's reader finds what it leaves out."""

_DIGEST_LINES = 6
"""A digest line (one request or answer) gets this fraction of its section's budget."""

_HEADING_ROOM = 40
"""Tokens kept free of the summary budget for the four headings."""

_SHRINK = 4
"""The record is at most about a quarter of the folded messages, so the request shrinks."""

_MIN_SECTION = 48
"""The smallest budget of a section, in tokens."""


def degraded_sections(
    job: SummaryJob, settings: Settings, check: Check, *, version: int
) -> dict[str, str]:
    """Four sections built by code from ``job``'s folded messages, marked degraded.

    SESSION INTENT holds the first and last user requests of the folded span (after the
    previous intent, if any); SUMMARY a digest of the user requests and the assistant's
    final answers; ARTIFACTS the identifiers found; NEXT STEPS the latest request and
    where to read the details. Each is cut to a quarter of ``summary_max_tokens`` and
    the whole to about a quarter of the folded text, so the request shrinks; if the
    digest fails ``check`` (a contradiction with the ledger), a plainer record
    without quoted answers is tried. ``check`` sees the sections marked ``DEGRADED``: a
    record written by code is not held to the checks of a model's prose (see
    ``faithfulness``).

    Args:
        job: The folded messages, previous record and current request.
        settings: Supplies ``summary_max_tokens``.
        check: The problems of candidate sections (empty means acceptable).
        version: The archive version this record will commit.

    Returns:
        The four sections plus ``DEGRADED: "true"``.

    Raises:
        SummaryError: neither form passes ``check``.

    """
    budget = _section_budget(job.folded, settings)
    requests = [content_text(m) for m in job.folded if is_real_user_message(m)]
    hint = RECOVER_HINT.format(first=1, last=version)
    plain_summary = (
        f"Model-free record: {len(job.folded)} message(s) folded into version {version} "
        f"({len(requests)} user request(s)); {hint}"
    )
    digest = _digest(plain_summary, requests, _answers(job.folded), budget)
    base = _fixed_sections(job, requests, budget, hint)
    problems: list[str] = []
    for summary in (digest, plain_summary):
        sections = {**base, "summary": _cut(summary, budget), DEGRADED: "true"}
        problems = check(sections)
        if not problems:
            return {**{key: sections[key] for key, _ in SECTIONS}, DEGRADED: "true"}
    raise SummaryError("the model-free record is unusable too: " + "; ".join(problems))


def _section_budget(folded: Sequence[BaseMessage], settings: Settings) -> int:
    """Tokens of each section: a quarter of the summary budget and of the folded text."""
    folded_tokens = sum(count_text(content_text(m)) for m in folded)
    return max(
        _MIN_SECTION,
        min(
            (settings.summary_max_tokens - _HEADING_ROOM) // len(SECTIONS),
            folded_tokens // _SHRINK // len(SECTIONS),
        ),
    )


def _answers(folded: Sequence[BaseMessage]) -> list[str]:
    """The assistant's final answers (replies without tool calls) among ``folded``."""
    return [
        content_text(m)
        for m in folded
        if isinstance(m, AIMessage) and not m.tool_calls and content_text(m)
    ]


def _digest(plain: str, requests: Sequence[str], answers: Sequence[str], budget: int) -> str:
    """The plain SUMMARY, then a line per user request and per latest answer."""
    line = max(8, budget // _DIGEST_LINES)
    return "\n".join(
        [
            plain,
            *(f"user: {_cut(r, line)}" for r in requests),
            *(f"assistant: {_cut(a, line)}" for a in answers[-_DIGEST_LINES:]),
        ]
    )


def _fixed_sections(
    job: SummaryJob, requests: Sequence[str], budget: int, hint: str
) -> dict[str, str]:
    """SESSION INTENT, ARTIFACTS and NEXT STEPS of the model-free record."""
    previous = job.previous or {}
    previous_intent = str(previous.get("session_intent") or "").strip()
    intent_parts = [_cut(previous_intent, budget // 3)] if previous_intent else []
    intent_parts += [_cut(request, budget // 2) for request in _ends(requests)]
    identifiers = _identifiers(job.folded, previous.get("artifacts"))
    latest = job.current_request or (requests[-1] if requests else "")
    steps = f"Continue with: {latest}\n{hint}" if latest else hint
    return {
        "session_intent": _cut(
            "\n".join(intent_parts) or "(no user request in the folded turns)", budget
        ),
        "artifacts": _cut("\n".join(identifiers) or "(none found)", budget),
        "next_steps": _cut(steps, budget),
    }


def _ends(requests: Sequence[str]) -> list[str]:
    """The first and the last request (one when there is one)."""
    if not requests:
        return []
    if len(requests) == 1:
        return [requests[0]]
    return [f"first: {requests[0]}", f"last: {requests[-1]}"]


def _identifiers(messages: Sequence[BaseMessage], previous: object) -> list[str]:
    """Identifiers of the previous artifacts and the folded messages, newest last, once each."""
    seen: dict[str, None] = {}
    texts = [str(previous)] if isinstance(previous, str) else []
    texts += [content_text(m) for m in messages]
    for text in texts:
        for identifier in extract_identifiers(text):
            seen.pop(identifier, None)
            seen[identifier] = None
    return list(seen)[::-1]


def _cut(text: str, budget: int) -> str:
    """``text`` within ``budget`` tokens, cut at the end and marked."""
    text = text.strip()
    if count_text(text) <= budget:
        return text
    chars = min(len(text), budget * 4)
    while chars > 1 and count_text(text[:chars] + " […]") > budget:
        chars = chars * 3 // 4
    return text[:chars].rstrip() + " […]"
