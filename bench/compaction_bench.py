"""Compaction benchmark: ctxgraph against ``create_agent`` + ``SummarizationMiddleware``.

Both systems run the same seeded session, turn by turn and interleaved, in one process,
on one Postgres checkpointer, with scripted models that answer from the messages alone.
For each system it reports the tokens of every main-model request and the graph's own
time per main-model call (wall time of the turn minus the time spent inside the main
and summary models), then the ratios and a PASS/FAIL line per target.

It also counts the input tokens of every model call (main, summary and memory) per user
turn, and samples the size of ctxgraph's record (the summary in the thread state and the
one in the latest archive version) as the session goes on. With
``--constraint-every-turn`` every user message ends with a constraint, as when a user
repeats "不要改收货地址" in each turn.

With ``--memory on`` ctxgraph runs with long-term memory as by default (memory_mode
"auto", memory_extraction "inline") and a scripted memory model that finds no facts; the
time inside it counts as model time, like the main and summary models'. ``--backend
memory`` runs both systems on LangGraph's in-memory saver (and ctxgraph on an
``InMemoryStore``) instead of Postgres.

Run ``python -m bench.compaction_bench [--turns 300] [--repeats 3] [--memory on]
[--backend memory]``, or ``python -m bench.compaction_bench --turns 1000
--constraint-every-turn``. ``python -m bench.compaction_bench --latency [--latency-turns
60] [--main-delay 0.5] [--summary-delay 2.0] [--repeats 3] [--backend memory]`` runs the
turn-latency benchmark of background compaction instead (``bench.compaction_latency``), and
``python -m bench.compaction_bench --short-messages [--turns 40] [--main-delay 0.6]
[--summary-delay 1.5] [--repeats 3] [--backend memory]`` the turn latency of a session of
short messages at a 20-message trigger, where the record is larger than what it folds
(``bench.compaction_short``: per-turn medians, the max/median ratio, and the summary calls
made inline and in background jobs).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import math
import os
import platform
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import BaseTool

from bench.common import Backend, add_backend_arguments, backend_label, open_backend, percentile
from bench.common import median as _median
from bench.common import package_version as _version
from bench.session import (
    STANDING_CONSTRAINT,
    Session,
    ctxgraph_summary_responder,
    generate_session,
    make_main_responder,
    make_tools,
    peer_summary_responder,
)
from ctxgraph.graph import build_graph
from ctxgraph.nodes.compaction.summarizer import SUMMARY_SYSTEM
from ctxgraph.nodes.parts.compaction import SUMMARY_MESSAGE_ID
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.summary import canonical_json
from ctxgraph.state.tokens import TokenCounter, count_text
from ctxgraph.store.persistence.archive import ThreadArchive

CTXGRAPH = "ctxgraph"
PEER = "peer"
PEER_LABEL = "create_agent + SummarizationMiddleware"

INPUT_RATIO_TARGET = 2.0
"""Largest accepted ratio of ctxgraph's input tokens per turn (all model calls) to the peer's."""

INPUT_RATIO_GOAL = 1.0
"""The ratio the input tokens per turn aim for."""

RECORD_GROWTH_TARGET = 1.2
"""Largest accepted growth of ctxgraph's record from the reference turn to the last turn."""

RECORD_REFERENCE_TURN = 100
"""The turn the record's size at the last turn is compared with."""


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class BenchConfig:
    """What to run; the trigger and keep apply to both systems."""

    turns: int = 300
    repeats: int = 3
    seed: int = 7
    trigger_tokens: int = 4000
    trigger_messages: int = 40
    keep_messages: int = 8
    warmup_turns: int = 10
    peer_token_counter: str = "exact"
    database_uri: str | None = None
    ctxgraph_overrides: tuple[tuple[str, Any], ...] = ()
    """Extra ctxgraph ``Settings`` (name, value); none by default."""
    constraints: bool = False
    """Every user message ends with a constraint (``generate_session(constraints=True)``)."""
    memory: bool = False
    """ctxgraph runs with long-term memory on (its defaults) instead of off."""
    backend: Literal["postgres", "memory"] = "postgres"
    """Postgres (embedded or ``database_uri``), or LangGraph's in-memory saver and store."""

    @property
    def record_turns(self) -> tuple[int, ...]:
        """The turns after which the record's size is sampled: every 100th and the last."""
        reference = min(RECORD_REFERENCE_TURN, self.turns)
        return tuple(sorted({reference, self.turns, *range(100, self.turns + 1, 100)}))


# --------------------------------------------------------------------------- measurement


class TimedResponder:
    """Wraps a responder and sums the time spent inside it (that time is model time)."""

    def __init__(self, respond: Callable[[list[BaseMessage]], AIMessage]) -> None:
        self._respond = respond
        self.seconds = 0.0

    def __call__(self, messages: list[BaseMessage]) -> AIMessage:
        start = time.perf_counter()
        try:
            return self._respond(messages)
        finally:
            self.seconds += time.perf_counter() - start


class CompactionLog(logging.Handler):
    """Counts ctxgraph's compaction warnings (and keeps them off stderr)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.skipped = 0
        self.summary_failures = 0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("compaction skipped"):
            self.skipped += 1
        elif message.startswith("summary model"):
            self.summary_failures += 1


def empty_memory_update(messages: list[BaseMessage]) -> AIMessage:
    """The memory model's answer when it finds nothing to remember: an empty tool call."""
    update: dict[str, list[object]] = {"facts": [], "profile_updates": []}
    return AIMessage(
        content="", tool_calls=[{"name": "MemoryUpdate", "args": update, "id": "call_memory_0"}]
    )


def json_tokens(value: object) -> int:
    """Tokens of a value as stored: its canonical JSON."""
    return count_text(canonical_json(value).decode("utf-8"))


def is_summary_prompt(messages: Sequence[BaseMessage]) -> bool:
    """A ctxgraph summary call (it falls back to the main model if the summary model fails)."""
    return bool(messages) and messages[0].content == SUMMARY_SYSTEM


def summary_message_of(messages: Sequence[BaseMessage]) -> BaseMessage | None:
    """The summary message inside a main-model request, for either system."""
    for message in messages:
        if (message.id or "").startswith(SUMMARY_MESSAGE_ID):
            return message
        if message.additional_kwargs.get("lc_source") == "summarization":
            return message
    return None


@dataclass
class TurnTiming:
    """One user turn: its wall time, the model time inside it and its main-model calls."""

    wall: float
    model: float
    main_calls: int

    @property
    def overhead_per_call(self) -> float:
        return (self.wall - self.model) / max(self.main_calls, 1)


@dataclass(frozen=True)
class RecordSize:
    """The size of a system's record after one turn, in tokens (0 before the first one).

    For ctxgraph: the summary in the thread state (sections and ledger, as canonical JSON)
    and the summary of the archive version the state's mark names. For the peer: its
    summary message.
    """

    turn: int
    state: int
    archive: int


@dataclass
class Run:
    """One system on one thread: how to send a user turn, its models and its timings."""

    system: str
    send: Callable[[str], None]
    main: ScriptedChatModel
    summary: ScriptedChatModel
    main_timer: TimedResponder
    summary_timer: TimedResponder
    log: CompactionLog
    committed: Callable[[], int]
    record: Callable[[int], RecordSize]
    memory: ScriptedChatModel | None = None
    memory_timer: TimedResponder | None = None
    timings: list[TurnTiming] = field(default_factory=list)
    records: list[RecordSize] = field(default_factory=list)
    skipped: int = 0
    summary_failures: int = 0

    def model_seconds(self) -> float:
        """Time spent inside the scripted models so far: main, summary and memory."""
        memory = self.memory_timer.seconds if self.memory_timer is not None else 0.0
        return self.main_timer.seconds + self.summary_timer.seconds + memory

    def step(self, text: str, sample_record: bool = False) -> None:
        model_before = self.model_seconds()
        requests_before = len(self.main.requests)
        skipped, failures = self.log.skipped, self.log.summary_failures
        # Collect the young generations now, off the clock, so that garbage one system
        # left behind is not collected while the other system is being timed.
        gc.collect(1)
        start = time.perf_counter()
        self.send(text)
        wall = time.perf_counter() - start
        model = self.model_seconds() - model_before
        new = self.main.requests[requests_before:]
        calls = sum(1 for request in new if not is_summary_prompt(request))
        self.timings.append(TurnTiming(wall=wall, model=model, main_calls=calls))
        self.skipped += self.log.skipped - skipped
        self.summary_failures += self.log.summary_failures - failures
        if sample_record:
            self.records.append(self.record(len(self.timings)))


@dataclass(frozen=True)
class RunResult:
    """The figures of one run of one system."""

    system: str
    repeat: int
    request_tokens: list[int]
    request_messages: list[int]
    summary_in_request: list[int]
    ledger_in_request: list[int]
    main_calls: int
    summary_calls: int
    summary_input_tokens: int
    memory_calls: int
    memory_input_tokens: int
    compactions: int
    skipped: int
    summary_failures: int
    tool_count: int
    tool_schema_tokens: int
    overhead_mean: float
    overhead_p95: float
    model_per_call: float
    wall_total: float
    turns: int
    records: list[RecordSize]

    @property
    def input_tokens(self) -> int:
        """Input tokens of every model call: main requests, summary and memory calls."""
        return sum(self.request_tokens) + self.summary_input_tokens + self.memory_input_tokens

    @property
    def input_per_turn(self) -> float:
        """Input tokens of every model call per user turn."""
        return self.input_tokens / max(self.turns, 1)


_LEDGER_MARKERS = ("TOOL CALLS (recorded by code", "USER CONSTRAINTS (verbatim)", "IDENTIFIERS: ")
"""Headings of ``render_ledger``'s blocks; the ledger runs from the first one found."""


class RequestMeter:
    """Counts request tokens exactly: messages plus the tool schemas bound for the call."""

    def __init__(self) -> None:
        self.counter = TokenCounter()
        self._schemas: dict[str, int] = {}
        self._ledgers: dict[str, int] = {}

    def ledger_tokens(self, summary: BaseMessage) -> int | None:
        """Tokens of the code-derived ledger inside a ctxgraph summary message."""
        if not (summary.id or "").startswith(SUMMARY_MESSAGE_ID):
            return None
        key = f"{summary.id}:{hash(summary.text)}"
        if key not in self._ledgers:
            text = summary.text
            starts = [text.find(marker) for marker in _LEDGER_MARKERS if marker in text]
            end = text.rfind("</conversation_summary>")
            self._ledgers[key] = count_text(text[min(starts) : end]) if starts else 0
        return self._ledgers[key]

    def schema_tokens(self, tools: list[dict[str, Any]]) -> int:
        if not tools:
            return 0
        text = json.dumps(tools, ensure_ascii=False, sort_keys=True)
        if text not in self._schemas:
            self._schemas[text] = count_text(text)
        return self._schemas[text]

    def result(self, run: Run, repeat: int) -> RunResult:
        tokens: list[int] = []
        sizes: list[int] = []
        in_request: list[int] = []
        ledgers: list[int] = []
        for messages, tools in zip(run.main.requests, run.main.tool_requests, strict=True):
            if is_summary_prompt(messages):
                continue
            tokens.append(self.counter.count_messages(messages) + self.schema_tokens(tools))
            sizes.append(len(messages))
            summary = summary_message_of(messages)
            if summary is not None:
                in_request.append(self.counter.count_message(summary))
                ledger = self.ledger_tokens(summary)
                if ledger is not None:
                    ledgers.append(ledger)
        fallbacks = [m for m in run.main.requests if is_summary_prompt(m)]
        summary_requests = [*run.summary.requests, *fallbacks]
        calls = sum(t.main_calls for t in run.timings)
        schemas = run.main.tool_requests[0] if run.main.tool_requests else []
        overhead = sum(t.wall - t.model for t in run.timings)
        model = sum(t.model for t in run.timings)
        memory_requests = run.memory.requests if run.memory is not None else []
        return RunResult(
            system=run.system,
            repeat=repeat,
            request_tokens=tokens,
            request_messages=sizes,
            summary_in_request=in_request,
            ledger_in_request=ledgers,
            main_calls=len(tokens),
            summary_calls=len(summary_requests),
            summary_input_tokens=sum(self.counter.count_messages(m) for m in summary_requests),
            memory_calls=len(memory_requests),
            memory_input_tokens=sum(self.counter.count_messages(m) for m in memory_requests),
            compactions=run.committed(),
            skipped=run.skipped,
            summary_failures=run.summary_failures,
            tool_count=len(schemas),
            tool_schema_tokens=self.schema_tokens(schemas),
            overhead_mean=overhead / max(calls, 1),
            overhead_p95=percentile([t.overhead_per_call for t in run.timings], 0.95),
            model_per_call=model / max(calls, 1),
            wall_total=sum(t.wall for t in run.timings),
            turns=len(run.timings),
            records=list(run.records),
        )


# --------------------------------------------------------------------------- the two systems


def build_ctxgraph(
    session: Session,
    tools: list[BaseTool],
    persistence: Backend,
    config: BenchConfig,
    thread_id: str,
    log: CompactionLog,
) -> Run:
    """ctxgraph's graph on the shared checkpointer and store."""
    main_timer = TimedResponder(make_main_responder(session))
    summary_timer = TimedResponder(ctxgraph_summary_responder)
    main = ScriptedChatModel(responder=main_timer, model_name="bench-main")
    summary = ScriptedChatModel(responder=summary_timer, model_name="bench-summary")
    # With memory on, a memory model that finds nothing: the figures measure the graph's
    # memory work per turn (loading, filtering, bookkeeping), not what facts cost.
    memory_timer = TimedResponder(empty_memory_update)
    memory = ScriptedChatModel(responder=memory_timer, model_name="bench-memory")
    values: dict[str, Any] = {
        "trigger_tokens": config.trigger_tokens,
        "trigger_messages": config.trigger_messages,
        "keep_messages": config.keep_messages,
    }
    if not config.memory:
        # Compaction alone; long-term memory has a benchmark of its own (and --memory on).
        values |= {"memory_extraction": "off", "memory_mode": "off"}
    settings = Settings(**{**values, **dict(config.ctxgraph_overrides)})
    graph = build_graph(
        checkpointer=persistence.checkpointer,
        store=persistence.store,
        models=Models(main=main, summary=summary, memory=memory),
        tools=tools,
        settings=settings,
    )
    run_config: Any = {"configurable": {"thread_id": thread_id}}
    context = Context(user_id="bench")

    def send(text: str) -> None:
        turn: Any = {"messages": [("user", text)]}
        graph.invoke(turn, run_config, context=context)

    def committed() -> int:
        state = graph.get_state(run_config).values
        return int((state.get("compaction") or {}).get("version", 0))

    archive = ThreadArchive(persistence.store, thread_id)

    def record(turn: int) -> RecordSize:
        state = graph.get_state(run_config).values
        version = int((state.get("compaction") or {}).get("version", 0))
        stored = archive.get(version) if version else None
        return RecordSize(
            turn=turn,
            state=json_tokens(state["summary"]) if state.get("summary") else 0,
            archive=json_tokens(stored["summary"]) if stored else 0,
        )

    return Run(
        CTXGRAPH,
        send,
        main,
        summary,
        main_timer,
        summary_timer,
        log,
        committed,
        record,
        memory,
        memory_timer,
    )


def build_peer(
    session: Session,
    tools: list[BaseTool],
    persistence: Backend,
    config: BenchConfig,
    thread_id: str,
    log: CompactionLog,
) -> Run:
    """``create_agent`` with ``SummarizationMiddleware`` on the same checkpointer."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import SummarizationMiddleware

    main_timer = TimedResponder(make_main_responder(session))
    summary_timer = TimedResponder(peer_summary_responder)
    main = ScriptedChatModel(responder=main_timer, model_name="bench-main")
    summary = ScriptedChatModel(responder=summary_timer, model_name="bench-summary")
    options: dict[str, Any] = {}
    if config.peer_token_counter == "exact":
        options["token_counter"] = TokenCounter().count_messages
    middleware = SummarizationMiddleware(
        model=summary,
        trigger=[("tokens", config.trigger_tokens), ("messages", config.trigger_messages)],
        keep=("messages", config.keep_messages),
        **options,
    )
    agent = create_agent(
        model=main,
        tools=tools,
        system_prompt=Settings().system_prompt,
        middleware=[middleware],
        checkpointer=persistence.checkpointer,
        name="peer",
    )
    run_config: Any = {"configurable": {"thread_id": thread_id}}

    def send(text: str) -> None:
        turn: Any = {"messages": [("user", text)]}
        agent.invoke(turn, run_config)

    def committed() -> int:
        return len(summary.requests)

    def record(turn: int) -> RecordSize:
        messages = agent.get_state(run_config).values.get("messages") or []
        found = summary_message_of(messages)
        size = TokenCounter().count_message(found) if found is not None else 0
        return RecordSize(turn=turn, state=size, archive=0)

    return Run(PEER, send, main, summary, main_timer, summary_timer, log, committed, record)


Builder = Callable[[Session, list[BaseTool], Backend, BenchConfig, str, CompactionLog], Run]
BUILDERS: dict[str, Builder] = {CTXGRAPH: build_ctxgraph, PEER: build_peer}


# --------------------------------------------------------------------------- running


@contextmanager
def compaction_log() -> Iterator[CompactionLog]:
    handler = CompactionLog()
    logger = logging.getLogger("ctxgraph.compaction")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


@contextmanager
def backend(config: BenchConfig) -> Iterator[Backend]:
    """In-memory saver and store, or Postgres (``config.database_uri`` or embedded)."""
    with open_backend(config.backend, config.database_uri) as opened:
        yield opened


def run_bench(config: BenchConfig, session: Session | None = None) -> list[RunResult]:
    """Run both systems ``config.repeats`` times, interleaved turn by turn."""
    session = session or generate_session(config.turns, config.seed, constraints=config.constraints)
    tools = make_tools(session)
    meter = RequestMeter()
    results: list[RunResult] = []
    nonce = uuid.uuid4().hex[:8]
    with backend(config) as persistence, compaction_log() as log:

        def runs(label: str) -> list[Run]:
            return [
                build(session, tools, persistence, config, f"bench-{nonce}-{system}-{label}", log)
                for system, build in BUILDERS.items()
            ]

        warm = runs("warmup")
        for turn in session.turns[: config.warmup_turns]:
            for run in warm:
                run.step(turn.text)
        for repeat in range(config.repeats):
            current = runs(f"r{repeat}")
            gc.collect()
            sampled = set(config.record_turns)
            for turn in session.turns:
                # Alternate who goes first, so neither system always follows the other.
                order = current if (turn.index + repeat) % 2 == 0 else current[::-1]
                for run in order:
                    run.step(turn.text, sample_record=turn.index + 1 in sampled)
            results.extend(meter.result(run, repeat) for run in current)
    return results


# --------------------------------------------------------------------------- report


def _ratio(ours: float, peer: float) -> str:
    if peer == 0 or math.isnan(ours) or math.isnan(peer):
        return "—"
    return f"{ours / peer:.2f}"


def _int(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:,.0f}"


def _ms(value: float) -> str:
    return "—" if math.isnan(value) else f"{value * 1000:.2f}"


@dataclass(frozen=True)
class Figures:
    """One system's figures across repetitions (token figures are deterministic)."""

    first: RunResult
    runs: list[RunResult]

    @property
    def deterministic(self) -> bool:
        return all(
            r.request_tokens == self.first.request_tokens
            and r.summary_calls == self.first.summary_calls
            for r in self.runs
        )

    def overhead(self) -> float:
        return _median([r.overhead_mean for r in self.runs])

    def overhead_p95(self) -> float:
        return _median([r.overhead_p95 for r in self.runs])


def figures(results: Sequence[RunResult], system: str) -> Figures:
    runs = sorted((r for r in results if r.system == system), key=lambda r: r.repeat)
    return Figures(first=runs[0], runs=runs)


def report(results: Sequence[RunResult], config: BenchConfig, session: Session) -> str:
    """The Markdown report: settings, the table, per-repetition timings, ratios, targets."""
    ours, peer = figures(results, CTXGRAPH), figures(results, PEER)
    a, b = ours.first, peer.first
    rows: list[tuple[str, float, float, Callable[[float], str]]] = [
        ("Main-model requests", a.main_calls, b.main_calls, _int),
        ("Summary-model calls", a.summary_calls, b.summary_calls, _int),
        ("Memory-model calls", a.memory_calls, b.memory_calls, _int),
        ("Compactions committed", a.compactions, b.compactions, _int),
        ("Compaction attempts refused (ctxgraph log)", a.skipped, math.nan, _int),
        ("Request tokens, median", _median(a.request_tokens), _median(b.request_tokens), _int),
        (
            "Request tokens, p95",
            percentile(a.request_tokens, 0.95),
            percentile(b.request_tokens, 0.95),
            _int,
        ),
        ("Request tokens, max", max(a.request_tokens), max(b.request_tokens), _int),
        ("Request messages, max", max(a.request_messages), max(b.request_messages), _int),
        (
            f"Requests over the trigger (> {config.trigger_tokens:,})",
            sum(t > config.trigger_tokens for t in a.request_tokens),
            sum(t > config.trigger_tokens for t in b.request_tokens),
            _int,
        ),
        (
            "Summary message in a request, tokens, median",
            _median(a.summary_in_request),
            _median(b.summary_in_request),
            _int,
        ),
        (
            "… of which the ctxgraph ledger, tokens, median",
            _median(a.ledger_in_request),
            math.nan,
            _int,
        ),
        (
            "Main-model input tokens, total",
            sum(a.request_tokens),
            sum(b.request_tokens),
            _int,
        ),
        (
            "Summary-model input tokens, total",
            a.summary_input_tokens,
            b.summary_input_tokens,
            _int,
        ),
        (
            "Memory-model input tokens, total",
            a.memory_input_tokens,
            b.memory_input_tokens,
            _int,
        ),
        (
            "Input tokens per turn, all model calls",
            a.input_per_turn,
            b.input_per_turn,
            _int,
        ),
        (
            "Overhead per main-model call, ms (median of run means)",
            ours.overhead(),
            peer.overhead(),
            _ms,
        ),
        (
            "Overhead per main-model call, ms (p95 of turns, median of runs)",
            ours.overhead_p95(),
            peer.overhead_p95(),
            _ms,
        ),
        (
            "Scripted-model time per main-model call, ms (excluded)",
            _median([r.model_per_call for r in ours.runs]),
            _median([r.model_per_call for r in peer.runs]),
            _ms,
        ),
        (
            "Wall time per run, s (median)",
            _median([r.wall_total for r in ours.runs]),
            _median([r.wall_total for r in peer.runs]),
            lambda v: f"{v:.2f}",
        ),
    ]
    tool_tokens = [count_text(text) for text in session.results.values()]
    said = (
        f' Every user message ends with a constraint ("{STANDING_CONSTRAINT}", worded a '
        f"little differently each time); {len(session.constraints)} other constraints are "
        "added along the way, and some are repeated."
        if config.constraints
        else ""
    )
    lines = [
        "## Compaction benchmark",
        "",
        f"Session: {len(session.turns)} user turns (seed {session.seed}), "
        f"{session.tool_turns} with a tool call; tool results "
        f"{min(tool_tokens, default=0):,}–{max(tool_tokens, default=0):,} tokens "
        f"(median {_median(tool_tokens):,.0f})." + said,
        f"Both systems: trigger {config.trigger_tokens:,} tokens or "
        f"{config.trigger_messages} messages, keep {config.keep_messages} messages; "
        f"peer token counter: {config.peer_token_counter}; other ctxgraph settings: "
        + (
            ", ".join(f"{name}={value!r}" for name, value in config.ctxgraph_overrides)
            or "defaults"
        )
        + ".",
        f"ctxgraph's long-term memory: {_memory_line(config)}.",
        f"Repetitions: {config.repeats}, interleaved turn by turn after "
        f"{config.warmup_turns} warm-up turns;"
        f" {backend_label(config.backend, config.database_uri)}.",
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        + ", ".join(f"{name} {_version(name)}" for name in _PACKAGES)
        + ".",
        "",
        f"| Metric | ctxgraph | {PEER_LABEL} | ctxgraph / peer |",
        "|---|---:|---:|---:|",
    ]
    for label, mine, theirs, show in rows:
        lines.append(f"| {label} | {show(mine)} | {show(theirs)} | {_ratio(mine, theirs)} |")
    lines += ["", "Overhead per main-model call by repetition (ms):", ""]
    lines += ["| Repetition | ctxgraph | peer | ctxgraph / peer |", "|---:|---:|---:|---:|"]
    for mine_run, peer_run in zip(ours.runs, peer.runs, strict=True):
        lines.append(
            f"| {mine_run.repeat + 1} | {_ms(mine_run.overhead_mean)} | "
            f"{_ms(peer_run.overhead_mean)} | "
            f"{_ratio(mine_run.overhead_mean, peer_run.overhead_mean)} |"
        )
    lines += ["", "Record size by turn (tokens):", ""]
    lines += [
        "| After turn | ctxgraph record in state | ctxgraph latest archive version's summary "
        "| peer summary message |",
        "|---:|---:|---:|---:|",
    ]
    for mine_size, peer_size in zip(a.records, b.records, strict=True):
        lines.append(
            f"| {mine_size.turn:,} | {mine_size.state:,} | {mine_size.archive:,} "
            f"| {peer_size.state:,} |"
        )
    overhead_ok = ours.overhead() <= peer.overhead()
    largest = max(a.request_tokens)
    most = max(a.request_messages)
    size_ok = largest < config.trigger_tokens and most < config.trigger_messages
    input_ratio = a.input_per_turn / b.input_per_turn if b.input_per_turn else math.inf
    input_ok = input_ratio <= INPUT_RATIO_TARGET
    reference, last = a.records[0], a.records[-1]
    growth = _growth(reference.state, last.state)
    archive_growth = _growth(reference.archive, last.archive)
    record_ok = max(growth, archive_growth) <= RECORD_GROWTH_TARGET
    lines += [
        "",
        "Ratios (ctxgraph / peer):",
        f"- overhead per main-model call: {_ratio(ours.overhead(), peer.overhead())}",
        f"- largest request: {_ratio(largest, max(b.request_tokens))}",
        f"- median request: {_ratio(_median(a.request_tokens), _median(b.request_tokens))}",
        f"- p95 request: "
        f"{_ratio(percentile(a.request_tokens, 0.95), percentile(b.request_tokens, 0.95))}",
        "",
        f"{'PASS' if overhead_ok else 'FAIL'} overhead per main-model call: ctxgraph "
        f"{_ms(ours.overhead())} ms {'<=' if overhead_ok else '>'} peer "
        f"{_ms(peer.overhead())} ms",
        f"{'PASS' if size_ok else 'FAIL'} largest request: ctxgraph {largest:,} tokens and "
        f"{most:,} messages; triggers {config.trigger_tokens:,} tokens and "
        f"{config.trigger_messages:,} messages (it must stay below both)",
        f"{'PASS' if input_ok else 'FAIL'} input tokens per turn, all model calls: ctxgraph "
        f"{a.input_per_turn:,.0f} / peer {b.input_per_turn:,.0f} = {input_ratio:.2f}x "
        f"(target <= {INPUT_RATIO_TARGET:.1f}x, goal {INPUT_RATIO_GOAL:.1f}x)",
        f"{'PASS' if record_ok else 'FAIL'} record size: at turn {last.turn:,} the record in "
        f"state is {last.state:,} tokens, {growth:.2f}x turn {reference.turn:,}'s "
        f"{reference.state:,}; the latest archive version's summary is {last.archive:,}, "
        f"{archive_growth:.2f}x {reference.archive:,} (target <= {RECORD_GROWTH_TARGET:.1f}x)",
    ]
    lines += [
        "",
        "Notes:",
        "- Request tokens: exact cl100k count of each main-model request's messages plus the "
        f"tool schemas bound to it (ctxgraph {a.tool_schema_tokens:,} tokens for "
        f"{a.tool_count} tools, read_history included; peer {b.tool_schema_tokens:,} tokens "
        f"for {b.tool_count}). Token figures come from repetition 1 and are "
        + (
            "identical in every repetition."
            if ours.deterministic and peer.deterministic
            else "NOT identical across repetitions (unexpected)."
        ),
        "- Overhead: wall time of each turn minus the time spent inside the scripted main, "
        "summary and memory models, divided by the turn's main-model calls.",
        "- The peer's trigger counts the state messages only (not its system prompt or tool "
        "schemas) and it does not check the size of the compacted request.",
    ]
    if a.skipped:
        lines.append(
            f"- ctxgraph refused {a.skipped} compaction attempt(s) and left the messages as "
            "they were (its log says why, e.g. the compacted request would still fire a "
            "trigger); each refusal in a row makes the next attempt keep fewer messages."
        )
    if a.summary_failures:
        lines.append(
            f"- ctxgraph's summary model was rejected {a.summary_failures} time(s); those "
            "calls fell back to the main model and count as summary calls, not main requests."
        )
    return "\n".join(lines)


def _memory_line(config: BenchConfig) -> str:
    if not config.memory:
        return "off (memory_extraction='off', memory_mode='off': no memory nodes)"
    return (
        "on (memory_mode='auto', memory_extraction='inline'; the scripted memory model "
        "finds no facts)"
    )


def _growth(before: int, after: int) -> float:
    """``after / before``; 1.0 when both are empty, infinite when only ``before`` is."""
    if before == 0:
        return 1.0 if after == 0 else math.inf
    return after / before


_PACKAGES = ("langgraph", "langchain", "langchain-core", "langgraph-checkpoint-postgres")


# --------------------------------------------------------------------------- command line


def parse_args(argv: Sequence[str] | None) -> BenchConfig:
    defaults = BenchConfig()
    parser = argparse.ArgumentParser(
        prog="python -m bench.compaction_bench",
        description="Compare ctxgraph's compaction with create_agent + SummarizationMiddleware.",
    )
    parser.add_argument("--turns", type=int, default=defaults.turns, help="user turns")
    parser.add_argument("--repeats", type=int, default=defaults.repeats, help="repetitions")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="session seed")
    parser.add_argument("--trigger-tokens", type=int, default=defaults.trigger_tokens)
    parser.add_argument("--trigger-messages", type=int, default=defaults.trigger_messages)
    parser.add_argument("--keep", type=int, default=defaults.keep_messages, help="kept messages")
    parser.add_argument(
        "--warmup", type=int, default=defaults.warmup_turns, help="untimed warm-up turns"
    )
    parser.add_argument(
        "--peer-token-counter",
        choices=("exact", "approximate"),
        default=defaults.peer_token_counter,
        help="exact: the peer counts with ctxgraph's cl100k counter (default); "
        "approximate: the middleware's own default estimate",
    )
    parser.add_argument(
        "--constraint-every-turn",
        action="store_true",
        help="end every user message with a constraint (a user repeating 不要改收货地址), "
        "and add or repeat other constraints now and then",
    )
    parser.add_argument(
        "--memory",
        choices=("off", "on"),
        default="off",
        help="off: ctxgraph without long-term memory (default, compaction alone); on: "
        "memory_mode 'auto' and inline extraction, with a memory model that finds no facts",
    )
    add_backend_arguments(parser)
    parser.add_argument(
        "--ctxgraph-setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra ctxgraph Settings field (JSON value), e.g. ledger_max_identifiers=40; "
        "repeatable; none by default",
    )
    from bench.compaction_latency import LATENCY_OPTIONS, add_latency_arguments

    latency = parser.add_argument_group(
        "turn latency of background compaction",
        "--latency runs bench.compaction_latency instead, with the options below and "
        "--repeats, --seed, --trigger-messages (default 32), --keep (default 4), --backend "
        "and --database-uri",
    )
    latency.add_argument(
        "--latency",
        action="store_true",
        help="compare the turn latency of inline, background and no compaction",
    )
    add_latency_arguments(latency, defaults=False)
    short = parser.add_argument_group(
        "short messages at a message trigger",
        "--short-messages runs bench.compaction_short instead, with --turns (default 40), "
        "--repeats, --main-delay (0.6), --summary-delay (1.5), --backend and --database-uri",
    )
    short.add_argument(
        "--short-messages",
        action="store_true",
        help="turn latency of background and inline compaction when the record is larger "
        "than the short messages it folds",
    )
    args = parser.parse_args(argv)
    given = [name for name in LATENCY_OPTIONS if hasattr(args, name)]
    if given:
        options = ", ".join("--" + name.replace("_", "-") for name in given)
        parser.error(f"{options}: only with --latency")
    if args.latency:
        parser.error("spell --latency out in full: it runs bench.compaction_latency")
    if args.short_messages:
        parser.error("spell --short-messages out in full: it runs bench.compaction_short")
    if args.turns < 1 or args.repeats < 1 or args.warmup < 0:
        parser.error("--turns and --repeats must be at least 1, --warmup at least 0")
    overrides: list[tuple[str, Any]] = []
    for item in args.ctxgraph_setting:
        name, equals, raw = item.partition("=")
        if not equals or not name.strip():
            parser.error(f"--ctxgraph-setting needs NAME=VALUE, got {item!r}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        overrides.append((name.strip(), tuple(value) if isinstance(value, list) else value))
    return BenchConfig(
        turns=args.turns,
        repeats=args.repeats,
        seed=args.seed,
        trigger_tokens=args.trigger_tokens,
        trigger_messages=args.trigger_messages,
        keep_messages=args.keep,
        warmup_turns=min(args.warmup, args.turns),
        peer_token_counter=args.peer_token_counter,
        database_uri=args.database_uri,
        ctxgraph_overrides=tuple(overrides),
        constraints=args.constraint_every_turn,
        memory=args.memory == "on",
        backend=args.backend,
    )


def main(argv: Sequence[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    if "--latency" in given:
        from bench import compaction_latency

        return compaction_latency.main(argv)
    if "--short-messages" in given:
        from bench import compaction_short

        return compaction_short.main(argv)
    config = parse_args(argv)
    session = generate_session(config.turns, config.seed, constraints=config.constraints)
    results = run_bench(config, session)
    print(report(results, config, session))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
