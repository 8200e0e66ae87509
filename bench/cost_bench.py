"""Cost benchmark: input tokens as a provider bills them, for ctxgraph and its peers.

Six systems run the same scripted order-lookup sessions (``bench.cost_session``) with the
same triggers (18,000 tokens or 60 messages, keep 8): ctxgraph with memory on, ctxgraph
with memory extraction off, ``create_agent`` with ctxgraph's middleware (memory on, the
same settings and models), ``create_agent`` + ``SummarizationMiddleware``, the same plus
LangMem's memory manager after each turn, and Deep Agents (``bench.cost_systems``). Every
model call goes through a recording scripted model (one per model a system uses:
ctxgraph's main model also writes its summaries, as in the default setup, and the peers'
middleware has a summary model of its own; every summary is the same prose,
``bench.cost_summary``), and every recorded request is counted as billed, by role (main,
summary, memory):

- one tokenizer for all: tiktoken cl100k (``ctxgraph.state.tokens``, offline);
- each message: the tokens of its text (role, name, content, tool calls, tool call id)
  plus ``TOKENS_PER_MESSAGE`` (3) framing tokens; each request: ``REPLY_PRIMING`` (3)
  more (OpenAI's chat format constants);
- the tool schemas bound for the call, as JSON (sorted keys), for every call of every
  role (the summary and memory models' own schemas included).

A provider caches per model, not per role: each call's cached prefix is its longest
common prefix with the previous call sent to the same model object, whatever that call's
role (tools first, then the messages in order; within the first message that differs,
its common leading tokens). A role's cached-prefix share is token-weighted: its calls'
cached tokens over all their tokens. Effective tokens at a cached price ``p`` are
``uncached + p * cached``, summed over the roles. Provider minimums for caching (such as
1,024 tokens) are not applied.

Next to the figures: the summary record of ctxgraph's (and the peers') first main
request of turn 150 by block, and the totals of the fidelity benchmark's quick mode for
ctxgraph (its graph and its middleware) and the plain peer (``--no-fidelity`` skips it,
``--fidelity-json PATH`` reads them from ``python -m bench.fidelity_bench --quick --json
PATH``).

Run ``python -m bench.cost_bench`` (300 turns), ``--full`` (1,000 turns), ``--systems``,
``--sessions``, ``--facts``, ``--json PATH``.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:
    # Run as a script (``python bench/cost_bench.py``): this folder's modules form the
    # ``bench`` package; ctxgraph comes from PYTHONPATH when set (e.g. an older checkout).
    _HERE = Path(__file__).resolve().parent
    sys.path.append(str(_HERE.parent))
    import bench

    bench.__path__.insert(0, str(_HERE))

import argparse
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from langchain_core.messages import BaseMessage, SystemMessage

import ctxgraph
from bench.common import median, package_version
from bench.cost_record import RECORD_BLOCKS, record_blocks, summary_message
from bench.cost_session import SESSION_KINDS, order_session, order_tools, user_facts
from bench.cost_summary import is_summary_call
from bench.cost_systems import (
    CTX_MEMORY,
    CTX_NO_EXTRACTION,
    PEER,
    PEER_LANGMEM,
    SYSTEMS,
    NotInstalledError,
    System,
    Triggers,
    build_system,
)
from bench.session import Session
from ctxgraph.state.tokens import (
    REPLY_PRIMING,
    TOKENS_PER_MESSAGE,
    count_text,
    encoding,
    message_text,
)

try:
    from ctxgraph.state.messages import ORIGIN_KEY
except ImportError:  # pragma: no cover - an older layout
    ORIGIN_KEY = "origin"

ROLES = ("main", "summary", "memory")
PRICES = (0.1, 0.5)
"""Cached-token prices (relative to an uncached token) the effective figures use."""

BILLED_VS_PEER = 1.3
"""Billed input per turn, ctxgraph (extraction off) over the plain peer: at most this."""
EFFECTIVE_VS_PEER = 1.5
"""Effective tokens per turn at 0.1, ctxgraph (extraction off) over the plain peer."""
VS_LANGMEM = 1.0
"""Billed and effective, ctxgraph (memory on) over the LangMem peer: at most this."""
PREFIX_SHARE_TARGET = 0.95
"""Cached-prefix share of ctxgraph's main requests where the plain peer's is at least
``PEER_WELL_CACHED`` (elsewhere: at least the plain peer's)."""
PEER_WELL_CACHED = 0.90
WELL_CACHED = ("orders", "constraints", "short")
"""The sessions where the plain peer's main requests are at least 90% cached."""
SUMMARY_CACHED_TARGET = 0.80
"""Cached share of ctxgraph's summary calls, its main model writing the summaries."""
FULL_TURNS = 1000
BREAKDOWN_TURN = 150
PARTS = (
    "system prompt",
    "tool schemas",
    "summary record",
    "skill listing",
    "memory view",
    "window",
    "other",
)

SUMMARY_ID_PREFIX = "ctxgraph-summary"
MEMORY_ID_PREFIX = "ctxgraph-memory"
SYSTEM_ID_PREFIX = "ctxgraph-system-prompt"
_ORIGIN_PARTS = {
    "summary": "summary record",
    "memory": "memory view",
    "system": "system prompt",
    "system_prompt": "system prompt",
}
"""Parts named by a message's ``ORIGIN_KEY`` marker; any other marked data is "other"."""


# --------------------------------------------------------------------------- counting


@dataclass(frozen=True)
class Segment:
    """One cacheable piece of a request: the tool schemas, or one message."""

    text: str
    tokens: int
    framing: int


class BillCounter:
    """Counts requests as billed; remembers the counts of texts it has seen."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def tokens(self, text: str) -> int:
        """Tokens of ``text`` (cl100k)."""
        counted = self._counts.get(text)
        if counted is None:
            counted = count_text(text)
            self._counts[text] = counted
        return counted

    def segments(self, messages: Sequence[BaseMessage], tools: Sequence[Any]) -> list[Segment]:
        """The request as segments: the tool schemas (if any), then each message."""
        found: list[Segment] = []
        if tools:
            text = schema_text(tools)
            found.append(Segment(text, self.tokens(text), 0))
        for message in messages:
            text = message_text(message)
            found.append(Segment(text, self.tokens(text), TOKENS_PER_MESSAGE))
        return found


def schema_text(tools: Sequence[Any]) -> str:
    """The tool schemas as sent: JSON with sorted keys."""
    return json.dumps(list(tools), ensure_ascii=False, sort_keys=True, default=str)


def request_total(segments: Sequence[Segment]) -> int:
    """All billed tokens of a request."""
    return sum(s.tokens + s.framing for s in segments) + REPLY_PRIMING


def common_tokens(first: str, second: str) -> int:
    """How many leading tokens two texts share."""
    left = encoding().encode(first, disallowed_special=())
    right = encoding().encode(second, disallowed_special=())
    shared = 0
    for a, b in zip(left, right, strict=False):
        if a != b:
            break
        shared += 1
    return shared


def shared_prefix(previous: Sequence[Segment], current: Sequence[Segment]) -> int:
    """Tokens of ``current``'s longest common prefix with ``previous``."""
    cached = 0
    for old, new in zip(previous, current, strict=False):
        if old.text == new.text and old.framing == new.framing:
            cached += new.tokens + new.framing
            continue
        if old.framing == new.framing:
            common = common_tokens(old.text, new.text)
            if common:
                cached += new.framing + common
        break
    return cached


@dataclass
class Stream:
    """One role's calls: totals, cached prefix tokens and sizes."""

    calls: int = 0
    tokens: int = 0
    cached: int = 0
    largest: int = 0
    most_messages: int = 0
    schema_tokens: int = 0
    sizes: list[int] = field(default_factory=list)

    def add(self, segments: list[Segment], schema_tokens: int, cached: int) -> int:
        """Count one call with ``cached`` prefix tokens; returns its billed tokens."""
        total = request_total(segments)
        self.most_messages = max(self.most_messages, sum(1 for s in segments if s.framing))
        self.calls += 1
        self.tokens += total
        self.largest = max(self.largest, total)
        self.schema_tokens += schema_tokens
        self.sizes.append(total)
        self.cached += cached
        return total

    def effective(self, price: float) -> float:
        """Uncached tokens plus ``price`` times the cached ones."""
        return (self.tokens - self.cached) + price * self.cached

    @property
    def share(self) -> float:
        """The cached share of the calls' tokens (token-weighted)."""
        return self.cached / self.tokens if self.tokens else math.nan


# --------------------------------------------------------------------------- breakdown


def _system_parts(message: BaseMessage, tokens: int, prompt: str) -> dict[str, int]:
    """A ctxgraph system message: the rules, and the skill listing appended to them."""
    content = message.content
    if isinstance(content, str) and content.startswith(prompt) and len(content) > len(prompt):
        rules = count_text(message_text(message.model_copy(update={"content": prompt})))
        return {"system prompt": rules + TOKENS_PER_MESSAGE, "skill listing": tokens - rules - 3}
    return {"system prompt": tokens}


def message_part(message: BaseMessage) -> str:
    """Which part of a request ``message`` is, by the markers on it (not by position)."""
    mid = message.id or ""
    origin = message.additional_kwargs.get(ORIGIN_KEY)
    if mid.startswith(SUMMARY_ID_PREFIX) or message.additional_kwargs.get("lc_source") == (
        "summarization"
    ):
        return "summary record"
    if mid.startswith(MEMORY_ID_PREFIX):
        return "memory view"
    if mid.startswith(SYSTEM_ID_PREFIX):
        return "system prompt"
    if isinstance(origin, str):
        return _ORIGIN_PARTS.get(origin, "other")
    # Unmarked: a system message is the system prompt (the peers'), the rest is the window.
    return "system prompt" if isinstance(message, SystemMessage) else "window"


def breakdown(
    messages: Sequence[BaseMessage], tools: Sequence[Any], prompt: str, counter: BillCounter
) -> dict[str, int]:
    """Tokens of one request by part; the parts add up to the request's billed tokens."""
    parts = dict.fromkeys(PARTS, 0)
    if tools:
        parts["tool schemas"] = counter.tokens(schema_text(tools))
    for message in messages:
        tokens = counter.tokens(message_text(message)) + TOKENS_PER_MESSAGE
        part = message_part(message)
        if part == "system prompt" and (message.id or "").startswith(SYSTEM_ID_PREFIX):
            for name, value in _system_parts(message, tokens, prompt).items():
                parts[name] += value
        else:
            parts[part] += tokens
    parts["other"] += REPLY_PRIMING
    return parts


# --------------------------------------------------------------------------- running


@dataclass
class SystemResult:
    """What one system cost on one session."""

    system: str
    turns: int
    streams: dict[str, Stream]
    overheads: list[float]
    breakdown_turn: int
    breakdown: dict[str, int]
    breakdown_total: int
    seconds: float
    record: dict[str, int] = field(default_factory=dict)
    """The summary record of the broken-down request, tokens by block."""
    summary_text: str = ""
    """That summary record's text."""

    def per_turn(self, role: str | None = None) -> float:
        """Billed input tokens per user turn, of one role or of all."""
        roles = ROLES if role is None else (role,)
        return sum(self.streams[r].tokens for r in roles) / max(self.turns, 1)

    def effective_per_turn(self, price: float) -> float:
        """Effective tokens per turn at cached price ``price``, every role's prefix rule."""
        return sum(s.effective(price) for s in self.streams.values()) / max(self.turns, 1)

    @property
    def prefix_share(self) -> float:
        """Cached-prefix share of the main requests (token-weighted)."""
        return self.streams["main"].share

    @property
    def summary_share(self) -> float:
        """Cached-prefix share of the summary calls (token-weighted)."""
        return self.streams["summary"].share

    @property
    def main_median(self) -> float:
        """The median main request."""
        return median(self.streams["main"].sizes)

    @property
    def schema_per_main_call(self) -> float:
        """Tool schema tokens per main call."""
        main = self.streams["main"]
        return main.schema_tokens / main.calls if main.calls else math.nan

    @property
    def largest(self) -> int:
        """The largest request of any role."""
        return max(s.largest for s in self.streams.values())

    @property
    def overhead_ms(self) -> float:
        """Median framework time per main call (model time excluded), in milliseconds."""
        return median(self.overheads) * 1000

    def figures(self) -> dict[str, Any]:
        """The figures, for ``--json``."""
        return {
            "turns": self.turns,
            "billed_per_turn": self.per_turn(),
            "billed_per_turn_by_role": {r: self.per_turn(r) for r in ROLES},
            "calls": {r: s.calls for r, s in self.streams.items()},
            "main_median": self.main_median,
            "tool_schema_per_main_call": self.schema_per_main_call,
            "prefix_share": self.prefix_share,
            "prefix_share_by_role": {
                r: (s.cached / s.tokens if s.tokens else None) for r, s in self.streams.items()
            },
            "summary_record_by_block": self.record,
            "effective_per_turn": {str(p): self.effective_per_turn(p) for p in PRICES},
            "largest_request": self.largest,
            "largest_main_request": self.streams["main"].largest,
            "most_messages_in_main_request": self.streams["main"].most_messages,
            "overhead_ms_per_main_call": self.overhead_ms,
            "breakdown_turn": self.breakdown_turn,
            "breakdown": self.breakdown,
            "seconds": self.seconds,
        }


def _drain(
    system: System,
    streams: dict[str, Stream],
    counter: BillCounter,
    last: dict[int, list[Segment]],
) -> list[tuple[list[BaseMessage], list[Any]]]:
    """Count the calls recorded since the last drain; returns this turn's main requests.

    A call is cached against the previous call to the same model object (``last``, by
    the model's id), whatever that call's role: a provider caches per model.
    """
    mains: list[tuple[list[BaseMessage], list[Any]]] = []
    for role, model in system.models.items():
        count = len(model.requests)
        requests, tools = list(model.requests[:count]), list(model.tool_requests[:count])
        del model.requests[:count]
        del model.tool_requests[:count]
        for messages, bound in zip(requests, tools, strict=True):
            target = role
            if role == "main" and is_summary_call(messages):
                target = "summary"  # ctxgraph's main model writing a summary
            schema = counter.tokens(schema_text(bound)) if bound else 0
            segments = counter.segments(messages, bound)
            previous = last.get(id(model))
            cached = shared_prefix(previous, segments) if previous is not None else 0
            last[id(model)] = segments
            streams[target].add(segments, schema, cached)
            if target == "main":
                mains.append((messages, bound))
    return mains


def breakdown_turn(turns: int) -> int:
    """The turn whose first main request is broken down: 150, or the middle one."""
    return BREAKDOWN_TURN if turns >= BREAKDOWN_TURN else max(1, (turns + 1) // 2)


def run_system(system: System, session: Session) -> SystemResult:
    """Send every user turn to ``system`` and count what its models were sent."""
    counter = BillCounter()
    streams = {role: Stream() for role in ROLES}
    last: dict[int, list[Segment]] = {}
    overheads: list[float] = []
    chosen = breakdown_turn(len(session.turns))
    parts: dict[str, int] = {}
    record: dict[str, int] = {}
    summary_text = ""
    total = 0
    began = time.perf_counter()
    for turn in session.turns:
        before = system.model_seconds()
        start = time.perf_counter()
        system.send(turn.text)
        if system.after_turn is not None:
            system.after_turn(turn.text)
        wall = time.perf_counter() - start
        model = system.model_seconds() - before
        mains = _drain(system, streams, counter, last)
        if mains:
            overheads.append((wall - model) / len(mains))
        if turn.index + 1 == chosen and mains:
            messages, bound = mains[0]
            parts = breakdown(messages, bound, system.system_prompt, counter)
            total = request_total(counter.segments(messages, bound))
            summary_text = summary_message(messages)
            record = record_blocks(summary_text, counter.tokens)
    return SystemResult(
        system.name,
        len(session.turns),
        streams,
        overheads,
        chosen,
        parts,
        total,
        time.perf_counter() - began,
        record,
        summary_text,
    )


@dataclass(frozen=True)
class BenchConfig:
    """What to run."""

    turns: int = 300
    systems: tuple[str, ...] = tuple(SYSTEMS)
    sessions: tuple[str, ...] = tuple(SESSION_KINDS)
    facts: tuple[int, ...] = (0, 60)
    triggers: Triggers = field(default_factory=Triggers)
    seed: int = 7
    progress: bool = False
    """Write a line to stderr as each system finishes a session."""


Outcome = SystemResult | NotInstalledError


@dataclass
class Scenario:
    """One session variant with one number of stored facts, and every system's outcome."""

    session: str
    facts: int
    outcomes: dict[str, Outcome]


def run_scenario(config: BenchConfig, kind: str, facts: int) -> Scenario:
    """Run every chosen system on one session with ``facts`` stored facts."""
    session = order_session(config.turns, SESSION_KINDS[kind], config.seed)
    tools = order_tools(session)
    stored = user_facts(facts, config.seed)
    outcomes: dict[str, Outcome] = {}
    for name in config.systems:
        try:
            system = build_system(name, session, tools, stored, config.triggers)
        except NotInstalledError as missing:
            outcomes[name] = missing
            continue
        result = run_system(system, session)
        outcomes[name] = result
        if config.progress:
            sys.stderr.write(f"{kind}, {facts} facts, {name}: {result.seconds:.1f} s\n")
    return Scenario(kind, facts, outcomes)


def run_bench(config: BenchConfig) -> list[Scenario]:
    """Every session variant with every number of facts."""
    return [run_scenario(config, kind, n) for kind in config.sessions for n in config.facts]


# --------------------------------------------------------------------------- report


def _num(value: float, digits: int = 0) -> str:
    if math.isnan(value):
        return "—"
    return f"{value:,.{digits}f}"


def _ratio(ours: float, theirs: float) -> float:
    return ours / theirs if theirs and not math.isnan(theirs) else math.nan


def _pct(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.1%}"


def _results(scenario: Scenario) -> dict[str, SystemResult]:
    return {n: o for n, o in scenario.outcomes.items() if isinstance(o, SystemResult)}


def cost_table(scenario: Scenario) -> list[str]:
    """The main table: one row per system."""
    lines = [
        "| system | billed input/turn | main | summary | memory | main median | tool "
        "schemas/main call | cached prefix (main) | cached (summary) | effective/turn @0.1 | "
        "@0.5 | largest request | main calls | summary calls | memory calls |",
        "|---|" + "---:|" * 14,
    ]
    for name, outcome in scenario.outcomes.items():
        if isinstance(outcome, NotInstalledError):
            lines.append(f"| {SYSTEMS[name]} | not installed (`{outcome.command}`) |" + " |" * 13)
            continue
        r, s = outcome, outcome.streams
        lines.append(
            f"| {SYSTEMS[name]} | {_num(r.per_turn())} | {_num(r.per_turn('main'))} | "
            f"{_num(r.per_turn('summary'))} | {_num(r.per_turn('memory'))} | "
            f"{_num(r.main_median)} | {_num(r.schema_per_main_call)} | {_pct(r.prefix_share)} | "
            f"{_pct(r.summary_share)} | {_num(r.effective_per_turn(0.1))} | "
            f"{_num(r.effective_per_turn(0.5))} | "
            f"{_num(r.largest)} | {s['main'].calls} | {s['summary'].calls} | "
            f"{s['memory'].calls} |"
        )
    return lines


def overhead_table(scenario: Scenario) -> list[str]:
    """Framework time per main call, and its ratio to the plain peer."""
    results = _results(scenario)
    peer = results[PEER].overhead_ms if PEER in results else math.nan
    lines = ["| system | framework ms/main call (median) | vs plain peer |", "|---|---:|---:|"]
    for name, result in results.items():
        ratio = _ratio(result.overhead_ms, peer)
        lines.append(f"| {SYSTEMS[name]} | {_num(result.overhead_ms, 2)} | {_num(ratio, 2)}x |")
    return lines


def _by_system(
    results: dict[str, SystemResult],
    title: str,
    label: str,
    rows: Sequence[tuple[str, Callable[[SystemResult], float]]],
) -> list[str]:
    """A table with a column per system and a row per ``(name, figure)``."""
    names = list(results)
    lines = [
        title,
        "",
        f"| {label} | " + " | ".join(SYSTEMS[n] for n in names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for row, figure in rows:
        cells = " | ".join(_num(figure(results[n])) for n in names)
        lines.append(f"| {row} | {cells} |")
    return lines


def _figure(table: str, key: str) -> Callable[[SystemResult], float]:
    """Reads ``key`` of a result's ``breakdown`` or ``record`` (0 when absent)."""

    def read(result: SystemResult) -> float:
        found: dict[str, int] = getattr(result, table)
        return found.get(key, 0)

    return read


def breakdown_table(scenario: Scenario) -> list[str]:
    """Each system's broken-down request, by part."""
    results = _results(scenario)
    if not results:
        return []
    turn = next(iter(results.values())).breakdown_turn
    rows = [(part, _figure("breakdown", part)) for part in PARTS]
    rows.append(("**request**", lambda r: r.breakdown_total))
    return _by_system(
        results, f"First main request of turn {turn}, by part (tokens):", "part", rows
    )


def record_table(scenario: Scenario) -> list[str]:
    """The summary record of each broken-down request, tokens by block."""
    results = {n: r for n, r in _results(scenario).items() if r.summary_text}
    if not results:
        return ["No summary record in the broken-down requests (no compaction yet)."]
    turn = next(iter(results.values())).breakdown_turn
    title = f"The summary record in that request of turn {turn}, by block (tokens):"
    rows = [(block, _figure("record", block)) for block in RECORD_BLOCKS]
    return _by_system(results, title, "block", rows)


def _check(label: str, value: float, limit: float, *, at_most: bool = True) -> str:
    if math.isnan(value) or math.isnan(limit):
        return f"- {label}: not measured"
    ok = value <= limit if at_most else value >= limit
    sign = "<=" if at_most else ">="
    return f"- {label}: {value:.2f} ({sign} {limit:.2f}) {'PASS' if ok else 'FAIL'}"


def _ratio_checks(r: dict[str, SystemResult]) -> list[str]:
    """Billed and effective input per turn against the peers."""
    lines: list[str] = []
    pairs = (
        (CTX_NO_EXTRACTION, PEER, BILLED_VS_PEER, EFFECTIVE_VS_PEER),
        (CTX_MEMORY, PEER_LANGMEM, VS_LANGMEM, VS_LANGMEM),
    )
    for ours, theirs, billed_limit, effective_limit in pairs:
        if ours not in r or theirs not in r:
            lines.append(f"- {ours} vs {theirs}: not measured (both must run)")
            continue
        billed = _ratio(r[ours].per_turn(), r[theirs].per_turn())
        effective = _ratio(r[ours].effective_per_turn(0.1), r[theirs].effective_per_turn(0.1))
        lines.append(_check(f"billed input/turn {ours} / {theirs}", billed, billed_limit))
        lines.append(_check(f"effective @0.1 {ours} / {theirs}", effective, effective_limit))
    return lines


def prefix_target(scenario: Scenario) -> float:
    """The main requests' cached-prefix share ctxgraph must reach in this scenario.

    95% where the plain peer's is at least 90%, else the plain peer's own share; without
    the plain peer, 95% in the sessions where it is that well cached (``WELL_CACHED``).
    """
    peer = _results(scenario).get(PEER)
    if peer is None:
        return PREFIX_SHARE_TARGET if scenario.session in WELL_CACHED else math.nan
    share = peer.prefix_share
    return PREFIX_SHARE_TARGET if share >= PEER_WELL_CACHED else share


def _largest_checks(r: dict[str, SystemResult], config: BenchConfig) -> list[str]:
    lines: list[str] = []
    t = config.triggers
    for name in (CTX_MEMORY, CTX_NO_EXTRACTION):
        if name not in r:
            continue
        main = r[name].streams["main"]
        label = f"largest main request {name} / trigger"
        if config.turns < FULL_TURNS:
            lines.append(
                f"- {label}: {main.largest:,} tokens, {main.most_messages} messages "
                "(target judged at 1,000 turns: --full)"
            )
            continue
        tokens = f"{label} {t.tokens:,} tokens (largest {main.largest:,})"
        messages = f"{label} {t.messages} messages (most {main.most_messages})"
        lines.append(_check(tokens, main.largest / t.tokens, 1.0))
        lines.append(_check(messages, main.most_messages / t.messages, 1.0))
    return lines


def targets(scenario: Scenario, config: BenchConfig) -> list[str]:
    """Ratios to the peers and a PASS/FAIL line per target."""
    r = _results(scenario)
    lines = _ratio_checks(r)
    wanted = prefix_target(scenario)
    for name in (CTX_MEMORY, CTX_NO_EXTRACTION):
        if name in r:
            share = r[name].prefix_share
            lines.append(_check(f"cached-prefix share (main) {name}", share, wanted, at_most=False))
    for name in (CTX_MEMORY, CTX_NO_EXTRACTION):
        if name in r:
            share = r[name].summary_share
            label = f"cached share of summary calls {name} (main model writes them)"
            lines.append(_check(label, share, SUMMARY_CACHED_TARGET, at_most=False))
    return lines + _largest_checks(r, config)


def overview(scenarios: Sequence[Scenario]) -> list[str]:
    """One row per session, facts and system: the headline figures."""
    lines = [
        "| session | facts | system | billed input/turn | effective/turn @0.1 | @0.5 | cached "
        "prefix (main) | cached (summary) | largest main request | framework ms/main call |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for scenario in scenarios:
        for name, outcome in scenario.outcomes.items():
            head = f"| {scenario.session} | {scenario.facts} | {SYSTEMS[name]} |"
            if isinstance(outcome, NotInstalledError):
                lines.append(f"{head} not installed | | | | | | |")
                continue
            lines.append(
                f"{head} {_num(outcome.per_turn())} | {_num(outcome.effective_per_turn(0.1))} | "
                f"{_num(outcome.effective_per_turn(0.5))} | {_pct(outcome.prefix_share)} | "
                f"{_pct(outcome.summary_share)} | {_num(outcome.streams['main'].largest)} | "
                f"{_num(outcome.overhead_ms, 2)} |"
            )
    return lines


Fidelity = dict[str, dict[str, int]]
"""The fidelity benchmark's totals by column (``fidelity_bench.totals``)."""


def run_fidelity(seed: int) -> tuple[Fidelity, float]:
    """The fidelity benchmark's quick mode, ctxgraph (graph and middleware) and the plain
    peer with the shared prose; returns the totals by column and the seconds it took."""
    from bench.fidelity_bench import QUICK, shared_prose_scores, totals

    began = time.perf_counter()
    scores = shared_prose_scores(replace(QUICK, seed=seed))
    return {s.system: totals(s) for s in scores}, time.perf_counter() - began


def fidelity_table(fidelity: Fidelity | None, source: str) -> list[str]:
    """The fidelity totals next to the cost figures, or why they are missing."""
    if not fidelity:
        return [f"Fidelity: not run ({source})."]
    lines = [
        f"Fidelity (`bench.fidelity_bench`, {source}): probe scores over all rounds",
        "",
        "| system | turns | compactions | request | archive | lost | not yet planted |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in fidelity.items():
        cells = " | ".join(
            str(row.get(k, "—"))
            for k in ("turns", "compactions", "request", "archive", "lost", "not yet planted")
        )
        lines.append(f"| {name} | {cells} |")
    return lines


def report(
    scenarios: Sequence[Scenario],
    config: BenchConfig,
    fidelity: Fidelity | None = None,
    fidelity_source: str = "--no-fidelity",
) -> str:
    """The whole report, in markdown."""
    t = config.triggers
    versions = ", ".join(
        f"{p} {package_version(p)}"
        for p in ("langgraph", "langchain", "langchain-core", "langmem", "deepagents")
    )
    lines = [
        f"# Cost benchmark: {config.turns} turns, trigger {t.tokens:,} tokens or "
        f"{t.messages} messages, keep {t.keep}",
        "",
        f"ctxgraph {ctxgraph.__version__} from `{ctxgraph.__file__}`; {versions}.",
        f"Counting: cl100k, {TOKENS_PER_MESSAGE} framing tokens per message, {REPLY_PRIMING} "
        "per request, tool schemas as JSON on every call.",
        "",
        *overview(scenarios),
        "",
        *fidelity_table(fidelity, fidelity_source),
    ]
    for scenario in scenarios:
        kind = SESSION_KINDS[scenario.session]
        lines += [
            "",
            f"## Session `{scenario.session}` ({kind.description}), {scenario.facts} stored facts",
            "",
            *cost_table(scenario),
            "",
            *overhead_table(scenario),
            "",
            *breakdown_table(scenario),
            "",
            *record_table(scenario),
            "",
            "Targets:",
            "",
            *targets(scenario, config),
        ]
    return "\n".join(lines) + "\n"


def to_json(scenarios: Sequence[Scenario], config: BenchConfig) -> dict[str, Any]:
    """Every figure, for ``--json``."""
    return {
        "config": {**asdict(config), "ctxgraph": ctxgraph.__file__},
        "scenarios": [
            {
                "session": s.session,
                "facts": s.facts,
                "systems": {
                    name: (
                        {"not_installed": o.command}
                        if isinstance(o, NotInstalledError)
                        else o.figures()
                    )
                    for name, o in s.outcomes.items()
                },
            }
            for s in scenarios
        ],
    }


def _names(value: str, known: Sequence[str], what: str) -> tuple[str, ...]:
    names = tuple(v.strip() for v in value.split(",") if v.strip())
    unknown = [n for n in names if n not in known]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {what} {unknown}; choose from {list(known)}")
    return names


def parse_args(argv: Sequence[str] | None) -> tuple[BenchConfig, argparse.Namespace]:
    """The configuration and the parsed arguments (``--json``, the fidelity flags)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--full", action="store_true", help=f"run {FULL_TURNS} turns")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=", ".join(SYSTEMS))
    parser.add_argument(
        "--sessions", default=",".join(SESSION_KINDS), help=", ".join(SESSION_KINDS)
    )
    parser.add_argument("--facts", default="0,60", help="numbers of stored facts, e.g. 0,60")
    parser.add_argument("--trigger-tokens", type=int, default=Triggers.tokens)
    parser.add_argument("--trigger-messages", type=int, default=Triggers.messages)
    parser.add_argument("--keep", type=int, default=Triggers.keep)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", default=None, metavar="PATH")
    parser.add_argument(
        "--no-fidelity",
        action="store_true",
        help="skip the fidelity benchmark's quick mode (about 5 s) run next to the figures",
    )
    parser.add_argument(
        "--fidelity-json",
        default=None,
        metavar="PATH",
        help="read the fidelity totals from `python -m bench.fidelity_bench --quick "
        "--shared-prose --json PATH` instead of running it",
    )
    args = parser.parse_args(argv)
    try:
        systems = _names(args.systems, list(SYSTEMS), "system")
        sessions = _names(args.sessions, list(SESSION_KINDS), "session")
        facts = tuple(int(v) for v in args.facts.split(",") if v.strip())
    except (argparse.ArgumentTypeError, ValueError) as error:
        parser.error(str(error))
    config = BenchConfig(
        turns=FULL_TURNS if args.full else args.turns,
        systems=systems,
        sessions=sessions,
        facts=facts,
        triggers=Triggers(args.trigger_tokens, args.trigger_messages, args.keep),
        seed=args.seed,
        progress=True,
    )
    return config, args


def fidelity_for(args: argparse.Namespace, seed: int) -> tuple[Fidelity | None, str]:
    """The fidelity totals the flags ask for, and where they come from."""
    if args.fidelity_json:
        with open(args.fidelity_json, encoding="utf-8") as handle:
            return json.load(handle), f"read from `{args.fidelity_json}`"
    if args.no_fidelity:
        return None, "--no-fidelity"
    found, seconds = run_fidelity(seed)
    return found, f"quick mode, the shared summary prose, run now in {seconds:.1f} s"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the report."""
    config, args = parse_args(argv)
    json_path = args.json
    # Deep Agents logs each failed history offload and similar; the figures are the report.
    logging.getLogger("deepagents").setLevel(logging.ERROR)
    # ctxgraph warns of each skipped compaction; the summary calls and request sizes show it.
    logging.getLogger("ctxgraph.compaction").setLevel(logging.ERROR)
    scenarios = run_bench(config)
    fidelity, source = fidelity_for(args, config.seed)
    sys.stdout.write(report(scenarios, config, fidelity, source))
    if json_path:
        data = {**to_json(scenarios, config), "fidelity": fidelity}
        with open(json_path, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
