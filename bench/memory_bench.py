"""Memory-filter benchmark: tokens the memory model would see per turn, raw versus filtered.

A seeded, tool-heavy scripted session (uploads, tool calls with large results, injected
memory, greetings and acknowledgements) is cut into turns; each turn's raw transcript is
compared with ``render_rows(filter_for_memory(turn))``. Turns left with no user content
skip the memory model entirely and count as zero filtered tokens.

Run ``python -m bench.memory_bench [--turns 50] [--seed 7] [--extraction]``. With
``--extraction`` it also gates every turn (``memory.gate``), checks that no turn stating
an expected fact is gated, counts the memory model's input tokens per call the old way
(every stored fact, the full schema) and now (related facts, compact schema), and gates
the user lines of MADial-Bench zh when its data is present (read in place).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.store.memory import InMemoryStore

from ctxgraph.nodes.memory.extract import MEMORY_UPDATE_TOOL, extraction_prompt, relevant_facts
from ctxgraph.nodes.memory.filter import filter_for_memory, has_user_rows, render_rows
from ctxgraph.nodes.memory.gate import gate_reason
from ctxgraph.state.context import Context
from ctxgraph.state.messages import ORIGIN_KEY, content_text, is_real_user_message
from ctxgraph.state.tokens import TokenCounter, count_text, message_text
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.memory.rules import MemoryUpdate

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


# --- extraction cost: the gate, the related facts and the compact schema ----------------

STORED_FACTS = 60
ASK_SAMPLES = 200
"""Facts already stored before the session in the extraction-cost run (as a long-used memory)."""

MADIAL_DIALOGUES = (
    Path(__file__).resolve().parents[2] / "shared/data/madial_zh/MADial-Bench-zh-dialogue.json"
)
"""MADial-Bench's Chinese dialogues, read in place (one JSON object a line) when present."""

_FACT_PATTERNS = tuple(
    re.compile(re.sub(r"\\\{\w+\\\}", ".+?", re.escape(template))) for template in _FACTS
)
"""Each fact template as a pattern over a filled user message (its expected fact)."""

_SPEAKER_LINE = re.compile(r'^<(?P<who>[^>]+)>:"?(?P<text>.*?)"?\s*$', re.DOTALL)


def expected_fact(turn: Sequence[BaseMessage]) -> int | None:
    """The index in ``_FACTS`` of the fact this turn's user states, or None."""
    for message in turn:
        if is_real_user_message(message):
            text = content_text(message)
            for index, pattern in enumerate(_FACT_PATTERNS):
                if pattern.search(text):
                    return index
    return None


@dataclass(frozen=True)
class ExtractionCost:
    """The gate's effect and the memory model's input tokens over a session."""

    turns: int
    with_user_text: int
    gated: int
    facts: int
    facts_gated: int
    before: list[int]
    """Input tokens per call the old way: every stored fact and the full schema."""
    after: list[int]
    """Input tokens per call now: the related facts (capped) and the compact schema."""
    schema_before: int
    schema_after: int
    asks: int
    """Request-only user messages (the session's asks, without a fact) gated."""
    asks_gated: int


def _seed_facts(repository: MemoryRepository, context: Context, seed: int) -> None:
    rng = random.Random(seed + 1)
    for index in range(STORED_FACTS):
        topic = rng.choice(_TOPICS)
        repository.add_fact(
            context,
            f"Handles {topic} with the {rng.choice(_TEAMS)} team: " + " ".join(_words(rng, 6)),
            key=f"stored_{index:03d}",
            confidence=0.7 + rng.random() * 0.3,
        )


def measure_extraction(turns: Sequence[Sequence[BaseMessage]], seed: int) -> ExtractionCost:
    """Gate every turn and count what each memory model call would be sent, old and new.

    A store starts with ``STORED_FACTS`` facts; each fact a turn states is then stored
    under its template's key (a later value replaces it), as an extraction would.
    """
    counter = TokenCounter()
    full_schema = convert_to_openai_tool(MemoryUpdate)
    schema_before = counter.count_tools([full_schema])
    schema_after = counter.count_tools([MEMORY_UPDATE_TOOL])
    repository = MemoryRepository(InMemoryStore())
    context = Context(user_id="bench-user")
    _seed_facts(repository, context, seed)
    with_user = gated = facts = facts_gated = 0
    before: list[int] = []
    after: list[int] = []
    for turn in turns:
        rows = filter_for_memory(turn)
        fact = expected_fact(turn)
        facts += fact is not None
        if not has_user_rows(rows):
            continue
        with_user += 1
        stored = repository.list_facts(context)
        before.append(counter.count_messages(extraction_prompt(rows, {}, stored)) + schema_before)
        if gate_reason(rows) is not None:
            gated += 1
            facts_gated += fact is not None
        else:
            related = relevant_facts(repository, context, rows)
            after.append(
                counter.count_messages(extraction_prompt(rows, {}, related)) + schema_after
            )
        if fact is not None:
            user = next(row["content"] for row in rows if row["role"] == "user")
            repository.add_fact(context, user[:400], key=f"template_{fact}", confidence=0.9)
    rng = random.Random(seed + 2)
    asks = [_fill(rng, rng.choice(_ASKS)) for _ in range(ASK_SAMPLES)]
    asks_gated = sum(
        gate_reason([{"id": "a", "role": "user", "content": a}]) is not None for a in asks
    )
    return ExtractionCost(
        turns=len(turns),
        with_user_text=with_user,
        gated=gated,
        facts=facts,
        facts_gated=facts_gated,
        before=before,
        after=after,
        schema_before=schema_before,
        schema_after=schema_after,
        asks=len(asks),
        asks_gated=asks_gated,
    )


def madial_user_lines(path: Path = MADIAL_DIALOGUES) -> list[str]:
    """The user's lines of every MADial-Bench zh dialogue (empty when the file is absent)."""
    if not path.is_file():
        return []
    lines: list[str] = []
    with path.open(encoding="utf-8") as handle:
        for raw in handle:
            if not raw.strip():
                continue
            for line in json.loads(raw).get("dialogue", []):
                match = _SPEAKER_LINE.match(line.strip())
                if match and match.group("who") != "Assistant":
                    lines.append(match.group("text"))
    return lines


def extraction_report(cost: ExtractionCost, madial: Sequence[str]) -> tuple[str, bool]:
    """The extraction-cost section of the report; passes when no expected fact was gated."""
    calls_before, calls_after = len(cost.before), len(cost.after)
    mean_before = statistics.mean(cost.before) if cost.before else 0.0
    mean_after = statistics.mean(cost.after) if cost.after else 0.0
    share = cost.gated / cost.with_user_text if cost.with_user_text else 0.0
    lines = [
        "",
        f"## Extraction cost ({cost.turns} turns, {STORED_FACTS} facts stored before)",
        "",
        "| Metric | Before | Now |",
        "|---|---:|---:|",
        f"| MemoryUpdate schema tokens | {cost.schema_before:,} | {cost.schema_after:,} |",
        f"| Memory model calls | {calls_before} | {calls_after} |",
        f"| Input tokens per call, mean | {mean_before:,.0f} | {mean_after:,.0f} |",
        f"| Input tokens, total | {sum(cost.before):,} | {sum(cost.after):,} |",
        f"| Turns with user text gated | - | {cost.gated} of {cost.with_user_text} ({share:.1%}) |",
        f"| Expected facts whose turn was gated | - | {cost.facts_gated} of {cost.facts} |",
        f"| Request-only messages gated | - | {cost.asks_gated} of {cost.asks} |",
    ]
    if madial:
        passed_lines = sum(
            gate_reason([{"id": "u", "role": "user", "content": t}]) is None for t in madial
        )
        held = len(madial) - passed_lines
        lines.append(
            f"| MADial-Bench zh user lines gated | - | {held} of {len(madial)} "
            f"({held / len(madial):.1%}) |"
        )
    ok = cost.facts_gated == 0
    lines.append("")
    lines.append(
        f"{'PASS' if ok else 'FAIL'} no expected fact gated: {cost.facts_gated} of {cost.facts}"
    )
    return "\n".join(lines), ok


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print its report; exit code 1 when the target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--extraction",
        action="store_true",
        help="also measure the extraction gate, the related facts and the compact schema",
    )
    args = parser.parse_args(argv)
    if args.turns < 1:
        parser.error("--turns must be at least 1")
    started = time.perf_counter()
    turns = generate_turns(args.turns, args.seed)
    results = [measure(turn) for turn in turns]
    text, passed = report(results, args.seed, time.perf_counter() - started)
    print(text)
    if args.extraction:
        section, gate_ok = extraction_report(
            measure_extraction(turns, args.seed), madial_user_lines()
        )
        print(section)
        passed = passed and gate_ok
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
