"""Memory-filter benchmark: tokens the memory model would see per turn, raw versus filtered.

A seeded, tool-heavy scripted session (uploads, tool calls with large results, injected
memory, greetings and acknowledgements) is cut into turns; each turn's raw transcript is
compared with ``render_rows(filter_for_memory(turn))``. Turns left with no user content
skip the memory model entirely and count as zero filtered tokens.

Run ``python -m bench.memory_bench [--turns 50] [--seed 7]``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from ctxgraph.nodes.memory.filter import filter_for_memory, has_user_rows, render_rows
from ctxgraph.state.messages import ORIGIN_KEY
from ctxgraph.state.tokens import count_text, message_text

TARGET_RATIO = 0.30
"""The filtered transcript must be at most this share of the raw one (totals)."""

USER_WORDS = (15, 50)
ANSWER_WORDS = (30, 80)
UPLOAD_TOKENS = (300, 800)
RESULT_TOKENS = (200, 1500)
MEMORY_TOKENS = 150
TOOL_CALLS = (1, 4)
UPLOAD_SHARE = 0.25
ACK_SHARE = 0.15

# Sentinels that must never reach the filtered transcript.
UPLOAD_MARK = "UPLOADROW"
RESULT_MARK = "TOOLRESULT"
MEMORY_MARK = "MEMORYFACT"

_WORDS = (
    "order", "invoice", "refund", "carrier", "warehouse", "customer", "payment", "status",
    "account", "shipment", "label", "return", "credit", "policy", "approval", "region",
    "ticket", "priority", "pending", "confirmed", "delayed", "customs", "discount", "total",
    "quantity", "price", "tracking", "exception", "manager", "audit", "record", "balance",
)  # fmt: skip
_TOPICS = (
    "partial refunds", "split shipments", "invoice disputes", "backorders", "carrier claims",
    "tax exemptions", "bulk discounts", "chargebacks", "delivery windows", "return labels",
)  # fmt: skip
_FACTS = (
    "I run the {team} team in {region} and we handle about {n} tickets a week.",
    "Please always give me the numbers first, then the explanation.",
    "I prefer answers in plain English without bullet points unless I ask.",
    "My manager {name} signs off on anything above {n} euros.",
    "We moved our warehouse to {region} last quarter, so old addresses are stale.",
    "I am on call every {day}, so keep weekend replies short.",
)
_ASKS = (
    "Can you check how {topic} were handled for order {order}?",
    "Look up the customer behind order {order} and tell me what went wrong with {topic}.",
    "Compare the last invoices for {order} and flag anything odd about {topic}.",
    "Search the docs for our rules on {topic} and apply them to order {order}.",
)
_ACKS = ("好的，谢谢！", "ok thanks", "Hello!!", "嗯嗯", "got it", "你好", "thank you!", "收到")
_TOOLS = ("lookup_order", "get_customer", "list_invoices", "search_docs")
_TEAMS = ("billing", "logistics", "support", "returns")
_REGIONS = ("EMEA", "APAC", "LATAM", "Nordics")
_NAMES = ("Priya", "Marcus", "Elena", "Tomasz", "Aiko")
_DAYS = ("Monday", "Wednesday", "Friday")


def _fill(rng: random.Random, template: str, **extra: str) -> str:
    values = {
        "team": rng.choice(_TEAMS),
        "region": rng.choice(_REGIONS),
        "name": rng.choice(_NAMES),
        "day": rng.choice(_DAYS),
        "n": str(rng.randint(20, 900)),
        "topic": rng.choice(_TOPICS),
        "order": f"ORD-{rng.randint(10000, 99999)}",
        **extra,
    }
    return template.format(**values)


def _words(rng: random.Random, count: int) -> list[str]:
    return [rng.choice(_WORDS) for _ in range(count)]


def _sized_words(rng: random.Random, low: int, high: int, lead: str) -> str:
    """``lead`` followed by filler so the whole text has ``low..high`` words."""
    target = rng.randint(low, high)
    words = lead.split()[:target]
    return " ".join(words + _words(rng, target - len(words)))


def _sized_tokens(rng: random.Random, tokens: int, line: Callable[[int, str], str]) -> str:
    """Lines ``line(number, words)`` until the text has about ``tokens`` tokens."""
    lines: list[str] = []
    used = 0
    while used < tokens:
        text = line(len(lines), " ".join(_words(rng, rng.randint(6, 14))))
        lines.append(text)
        used += count_text(text) + 1
    return "\n".join(lines)


def _turn(rng: random.Random, index: int) -> list[BaseMessage]:
    prefix = f"t{index:04d}"
    messages: list[BaseMessage] = [
        HumanMessage(
            content=(
                f"<memory>{MEMORY_MARK} "
                + _sized_tokens(rng, MEMORY_TOKENS, lambda i, w: f"- fact {i}: user {w}")
                + "</memory>"
            ),
            id=f"{prefix}-memory",
            additional_kwargs={ORIGIN_KEY: "memory"},
        )
    ]
    if rng.random() < ACK_SHARE:
        messages.append(HumanMessage(content=rng.choice(_ACKS), id=f"{prefix}-user"))
        answer = _sized_words(rng, *ANSWER_WORDS, "You're welcome, happy to help further.")
        messages.append(AIMessage(content=answer, id=f"{prefix}-answer"))
        return messages

    lead = _fill(rng, rng.choice(_ASKS)) + " " + _fill(rng, rng.choice(_FACTS))
    text = _sized_words(rng, *USER_WORDS, lead)
    if rng.random() < UPLOAD_SHARE:
        upload = _sized_tokens(
            rng, rng.randint(*UPLOAD_TOKENS), lambda i, w: f"{UPLOAD_MARK},{i},{w}"
        )
        block = f"<file name='export.csv'>\n{upload}\n</file>"
        text = f"{text}\n<current_uploads>\n{block}\n</current_uploads>"
    messages.append(HumanMessage(content=text, id=f"{prefix}-user"))

    for call in range(rng.randint(*TOOL_CALLS)):
        call_id = f"{prefix}-call{call}"
        name = rng.choice(_TOOLS)
        args = {"query": _fill(rng, "{order} {topic}")}
        messages.append(
            AIMessage(
                content="",
                id=f"{prefix}-ai{call}",
                tool_calls=[{"id": call_id, "name": name, "args": args, "type": "tool_call"}],
            )
        )
        result = _sized_tokens(
            rng,
            rng.randint(*RESULT_TOKENS),
            lambda i, w: json.dumps({"mark": RESULT_MARK, "row": i, "note": w}),
        )
        messages.append(
            ToolMessage(content=result, tool_call_id=call_id, id=f"{prefix}-tool{call}")
        )

    answer = _sized_words(rng, *ANSWER_WORDS, "Here is what I found in the records.")
    messages.append(AIMessage(content=answer, id=f"{prefix}-answer"))
    return messages


def generate_turns(turns: int, seed: int) -> list[list[BaseMessage]]:
    """The scripted session, one message list per turn; a pure function of its arguments."""
    rng = random.Random(seed)
    return [_turn(rng, index) for index in range(turns)]


def render_raw(messages: Sequence[BaseMessage]) -> str:
    """Every message of a turn as a transcript, tool calls and results included."""
    return "\n".join(f"[{m.id}] {message_text(m)}" for m in messages)


@dataclass(frozen=True)
class TurnResult:
    """Token counts of one turn."""

    raw: int
    filtered: int
    skipped: bool
    leaked: bool


def measure(turn: Sequence[BaseMessage]) -> TurnResult:
    """Raw and filtered tokens of one turn; a turn without user rows sends nothing."""
    rows = filter_for_memory(turn)
    rendered = render_rows(rows)
    skipped = not has_user_rows(rows)
    leaked = any(mark in rendered for mark in (UPLOAD_MARK, RESULT_MARK, MEMORY_MARK))
    filtered = 0 if skipped else count_text(rendered)
    return TurnResult(count_text(render_raw(turn)), filtered, skipped, leaked)


def p95(values: Sequence[int]) -> int:
    """Nearest-rank 95th percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def report(results: Sequence[TurnResult], seed: int, seconds: float) -> tuple[str, bool]:
    """The Markdown report and whether the target is met."""
    raw = [r.raw for r in results]
    filtered = [r.filtered for r in results]
    total_raw, total_filtered = sum(raw), sum(filtered)
    ratio = total_filtered / total_raw if total_raw else 0.0
    skipped = sum(r.skipped for r in results)
    leaks = sum(r.leaked for r in results)
    passed = ratio <= TARGET_RATIO and leaks == 0
    lines = [
        f"# Memory filter benchmark ({len(results)} turns, seed {seed})",
        "",
        "| Metric | Raw turn | Filtered |",
        "|---|---:|---:|",
        f"| Tokens per turn, median | {statistics.median(raw):,.0f} "
        f"| {statistics.median(filtered):,.0f} |",
        f"| Tokens per turn, p95 | {p95(raw):,} | {p95(filtered):,} |",
        f"| Tokens, total | {total_raw:,} | {total_filtered:,} |",
        f"| Ratio filtered/raw | 100.0% | {ratio:.1%} |",
        f"| Turns skipped (no user content, no model call) | - | {skipped} of {len(results)} |",
        f"| Turns leaking tool/upload/memory text | - | {leaks} |",
        "",
        f"Ratio filtered/raw: {ratio:.4f}",
        f"{'PASS' if passed else 'FAIL'} filtered <= {TARGET_RATIO:.0%} of raw: "
        f"{total_filtered:,} of {total_raw:,} tokens ({ratio:.1%}), {leaks} leaking turns",
        f"Elapsed: {seconds:.2f} s",
    ]
    return "\n".join(lines), passed


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print its report; exit code 1 when the target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if args.turns < 1:
        parser.error("--turns must be at least 1")
    started = time.perf_counter()
    results = [measure(turn) for turn in generate_turns(args.turns, args.seed)]
    text, passed = report(results, args.seed, time.perf_counter() - started)
    print(text)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
