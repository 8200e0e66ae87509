"""Subagent benchmark: a research session with and without delegation to a subagent.

One deterministic session of ``--tasks`` research questions (20 by default) runs twice
through ctxgraph with the same settings (defaults, memory off, in-memory saver and Store)
and scripted models that answer from the messages alone:

- without delegation, the main agent researches each question itself: it calls ``search``
  ``--searches`` times (3 by default; each result is about ``--doc-tokens`` tokens of
  pseudo-documents derived from the query, 3,000 by default), then answers the user with a
  short summary (about 150 tokens);
- with delegation, the main agent hands each question to a ``researcher`` subagent with
  one ``task`` call; the subagent (its own model, seeing only its system prompt and the
  task) makes the same searches and reports in about 400 tokens; the main agent then
  answers the user with the same short summary.

For the main agent (the parent) it prints, side by side: its model calls, its largest
request and its input tokens over the session (each request's messages counted with
``TokenCounter``; the tool schemas bound to a request are not counted, their size is shown
on a row of its own), and, for the delegation run, the subagents' input tokens and the
total. Compactions are what ctxgraph does at its default triggers, in both runs. Wall
times are medians over ``--repeat`` runs of each mode (the token figures are the first
run's; every run is identical in tokens).

Run ``python -m bench.subagent_bench`` (or ``python bench/subagent_bench.py``); options
``--tasks``, ``--searches``, ``--doc-tokens``, ``--repeat`` and ``--quick`` (4 tasks,
800-token documents, 1 run).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import build_graph
from ctxgraph.nodes.compaction.summarizer import SUMMARY_SYSTEM
from ctxgraph.nodes.parts import SubagentsPart
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_replies import demo_summary
from ctxgraph.state.messages import content_text
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.subagents import SubagentSpec
from ctxgraph.state.tokens import TokenCounter, count_text

ANSWER_TOKENS = 150
"""Tokens of the main agent's answer to each question, in both modes."""

REPORT_TOKENS = 400
"""Tokens of the researcher subagent's report."""

QUESTION_PREFIX = "Research question "
RESEARCHER = "researcher"
RESEARCHER_PROMPT = (
    "You are a research subagent. You see one research question and nothing else. Search "
    "as needed, then answer with a self-contained report of the findings and their sources."
)
RESEARCHER_DESCRIPTION = (
    "Researches one question with the search tool and returns a condensed report."
)

_TOPICS = (
    "vector clocks in distributed databases", "write-ahead logging in SQLite",
    "consistent hashing for cache clusters", "garbage collection pauses in the JVM",
    "Raft leader election timeouts", "B-tree versus LSM-tree storage engines",
    "TCP congestion control with BBR", "bloom filter false-positive rates",
    "copy-on-write snapshots in ZFS", "backpressure in stream processors",
    "MVCC isolation anomalies", "CRDT counters for offline apps",
    "rate limiting with token buckets", "zero-downtime schema migrations",
    "tail latency under load balancing", "memory allocators for small objects",
    "TLS session resumption", "query planning with join reordering",
    "idempotency keys in payment APIs", "sharding strategies for time series",
)  # fmt: skip
_ANGLES = (
    "overview and definitions", "benchmarks and measurements", "failure modes and incidents",
    "implementations in open-source systems", "configuration guidance", "recent research",
)  # fmt: skip
_WORDS = (
    "system", "latency", "throughput", "replica", "node", "cluster", "request", "write",
    "read", "log", "index", "page", "buffer", "cache", "queue", "lock", "transaction",
    "version", "snapshot", "partition", "leader", "follower", "timeout", "retry", "client",
    "server", "protocol", "message", "batch", "segment", "compaction", "checkpoint",
    "measured", "observed", "reported", "configured", "reduced", "increased", "bounded",
    "under", "during", "after", "before", "with", "without", "because", "while", "when",
    "the", "a", "each", "every", "most", "few", "high", "low", "stable", "variable",
    "p99", "median", "workload", "benchmark", "production", "deployment", "kernel", "disk",
    "network", "memory", "CPU", "thread", "process", "schema", "table", "key", "value",
)  # fmt: skip


# --------------------------------------------------------------------------- the session


def topic(task: int) -> str:
    """The subject of research question ``task`` (cycled, numbered beyond the list)."""
    base = _TOPICS[task % len(_TOPICS)]
    round_ = task // len(_TOPICS)
    return base if round_ == 0 else f"{base} (part {round_ + 1})"


def question(task: int) -> str:
    """The user's message for question ``task``; its prefix names the task."""
    return (
        f"{QUESTION_PREFIX}{task}: what is known about {topic(task)}? Look at the sources "
        "and give me a short summary with the main findings."
    )


def task_of(text: str) -> int:
    """The task number a question or task description carries."""
    return int(text.split(QUESTION_PREFIX, 1)[1].split(":", 1)[0])


def query(task: int, search: int) -> str:
    """The query of search ``search`` for question ``task``."""
    return f"{topic(task)}: {_ANGLES[search % len(_ANGLES)]}"


def call_id(task: int, search: int) -> str:
    """The id of a search call: it names the task and the search, so replies need no history."""
    return f"t{task}-s{search}"


def parse_call_id(value: str) -> tuple[int, int]:
    """The task and search numbers of a ``call_id``."""
    task, search = value.removeprefix("t").split("-s")
    return int(task), int(search)


def sentence(rng: random.Random, subject: str) -> str:
    """One pseudo-English sentence that mentions ``subject``."""
    words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 18))]
    words.insert(rng.randint(0, len(words)), subject)
    text = " ".join(words)
    return text[0].upper() + text[1:] + "."


def prose(seed: str, subject: str, tokens: int) -> str:
    """Deterministic text of about ``tokens`` tokens (sentences added until reached)."""
    rng = random.Random(zlib.crc32(seed.encode("utf-8")))
    parts: list[str] = []
    total = 0
    while total < tokens:
        line = sentence(rng, subject)
        parts.append(line)
        total += count_text(line) + 1
    return " ".join(parts)


def search_result(text: str, doc_tokens: int) -> str:
    """Pseudo-documents of about ``doc_tokens`` tokens for ``text``, the same for one query."""
    rng = random.Random(zlib.crc32(text.encode("utf-8")))
    documents: list[str] = []
    total = 0
    number = 0
    while total < doc_tokens:
        number += 1
        slug = "-".join(text.lower().replace(":", "").split()[:4])
        size = min(rng.randint(150, 350), max(doc_tokens - total, 40))
        body = prose(f"{text}#{number}", text.split(":")[0], size)
        document = (
            f"[{number}] {text} ({rng.randint(2015, 2025)})\n"
            f"source: https://docs.example.org/{slug}/{rng.getrandbits(32):08x}\n{body}"
        )
        documents.append(document)
        total += count_text(document) + 2
    return "\n\n".join(documents)


@dataclass
class SearchTool:
    """The ``search`` tool of one run, counting its calls."""

    doc_tokens: int
    calls: int = 0

    def tool(self) -> BaseTool:
        def search(query: str) -> str:
            """Search the document collection; returns the matching documents in full."""
            self.calls += 1
            return search_result(query, self.doc_tokens)

        return StructuredTool.from_function(search, name="search")


def answer(task: int) -> AIMessage:
    """The main agent's short answer to question ``task`` (the same in both modes)."""
    body = prose(f"answer-{task}", topic(task), ANSWER_TOKENS)
    return AIMessage(content=f"Summary for question {task}: {body}")


def search_call(task: int, search: int) -> AIMessage:
    """An answer that makes search ``search`` of question ``task``."""
    args = {"query": query(task, search)}
    return AIMessage(
        content="",
        tool_calls=[
            {"name": "search", "args": args, "id": call_id(task, search), "type": "tool_call"}
        ],
    )


def is_summary_request(messages: Sequence[BaseMessage]) -> bool:
    """A ctxgraph summary call (it goes to the main model when the summary model fails)."""
    return bool(messages) and content_text(messages[0]) == SUMMARY_SYSTEM


def summary_responder(messages: list[BaseMessage]) -> AIMessage:
    """The summary model: the deterministic demo summary of its prompt."""
    return demo_summary(content_text(messages[-1]))


def solo_responder(searches: int) -> Callable[[list[BaseMessage]], AIMessage]:
    """The main agent without delegation: ``searches`` searches per question, then answers.

    It reads only the last message (a question, or a search result whose call id names the
    task and the search), so compaction cannot confuse it.
    """

    def respond(messages: list[BaseMessage]) -> AIMessage:
        if is_summary_request(messages):
            return summary_responder(messages)
        last = messages[-1]
        if isinstance(last, HumanMessage):
            return search_call(task_of(content_text(last)), 0)
        if isinstance(last, ToolMessage) and last.name == "search":
            task, search = parse_call_id(last.tool_call_id)
            if search + 1 < searches:
                return search_call(task, search + 1)
            return answer(task)
        raise AssertionError(f"unexpected last message: {last.type} {content_text(last)[:80]!r}")

    return respond


def delegating_responder(messages: list[BaseMessage]) -> AIMessage:
    """The main agent with delegation: one ``task`` call per question, then the answer."""
    if is_summary_request(messages):
        return summary_responder(messages)
    last = messages[-1]
    if isinstance(last, HumanMessage):
        task = task_of(content_text(last))
        args = {
            "description": f"{QUESTION_PREFIX}{task}: find what is known about {topic(task)}. "
            "Search the document collection from several angles.",
            "subagent_type": RESEARCHER,
            "expected_output": "The main findings with their sources, in a few paragraphs.",
        }
        call = {"name": "task", "args": args, "id": f"t{task}-task", "type": "tool_call"}
        return AIMessage(content="", tool_calls=[call])
    if isinstance(last, ToolMessage) and last.name == "task":
        return answer(int(last.tool_call_id.removeprefix("t").split("-")[0]))
    raise AssertionError(f"unexpected last message: {last.type} {content_text(last)[:80]!r}")


def researcher_responder(searches: int) -> Callable[[list[BaseMessage]], AIMessage]:
    """The subagent: ``searches`` searches for its one question, then a report."""

    def respond(messages: list[BaseMessage]) -> AIMessage:
        task = task_of(content_text(messages[1]))
        done = sum(1 for m in messages if isinstance(m, ToolMessage) and m.name == "search")
        if done < searches:
            return search_call(task, done)
        sources = ", ".join(query(task, s) for s in range(searches))
        body = prose(f"report-{task}", topic(task), REPORT_TOKENS)
        return AIMessage(content=f"Report on question {task} (sources: {sources}).\n{body}")

    return respond


# --------------------------------------------------------------------------- one run


@dataclass
class RunResult:
    """What one run of one mode measured."""

    mode: str
    parent_tokens: list[int]
    parent_schema_tokens: int
    child_tokens: list[int]
    summary_tokens: list[int]
    compactions: int
    searches: int
    tasks_completed: int
    task_statuses: list[str]
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)


def schema_tokens(tools: list[dict[str, Any]]) -> int:
    """Tokens of the tool schemas bound to one request (JSON, as a provider gets them)."""
    return count_text(json.dumps(tools, ensure_ascii=False, sort_keys=True)) if tools else 0


def run(mode: str, tasks: int, searches: int, doc_tokens: int, repeat: int) -> RunResult:
    """Run the session once in ``mode`` ("solo" or "delegate") on a fresh saver and Store."""
    search = SearchTool(doc_tokens)
    tools = [search.tool()]
    summary = ScriptedChatModel(responder=summary_responder, model_name="bench-summary")
    child: ScriptedChatModel | None = None
    subagents: list[SubagentSpec] = []
    if mode == "solo":
        main = ScriptedChatModel(responder=solo_responder(searches), model_name="bench-main")
    else:
        main = ScriptedChatModel(responder=delegating_responder, model_name="bench-main")
        child = ScriptedChatModel(
            responder=researcher_responder(searches), model_name="bench-researcher"
        )
        subagents = [
            SubagentSpec(
                name=RESEARCHER,
                description=RESEARCHER_DESCRIPTION,
                system_prompt=RESEARCHER_PROMPT,
                tools=tuple(tools),
                model=child,
            )
        ]
    graph = build_graph(
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
        models=Models(main=main, summary=summary),
        tools=tools,
        settings=Settings(memory_mode="off", memory_extraction="off"),
        parts=[SubagentsPart(subagents)],
    )
    config: Any = {"configurable": {"thread_id": f"subagent-bench-{mode}-{repeat}"}}
    context = Context(user_id="bench")
    started = time.perf_counter()
    for task in range(tasks):
        graph.invoke({"messages": [HumanMessage(question(task))]}, config, context=context)
    seconds = time.perf_counter() - started

    counter = TokenCounter()
    parent = [r for r in main.requests if not is_summary_request(r)]
    fallbacks = [r for r in main.requests if is_summary_request(r)]
    parent_schemas = [
        tools
        for request, tools in zip(main.requests, main.tool_requests, strict=True)
        if not is_summary_request(request)
    ]
    # Each task result is the last message of the parent request that answers it.
    results = [r[-1] for r in parent if isinstance(r[-1], ToolMessage) and r[-1].name == "task"]
    statuses = [str(m.additional_kwargs.get("subagent", {}).get("status")) for m in results]
    state = graph.get_state(config).values
    return RunResult(
        mode=mode,
        parent_tokens=[counter.count_messages(r) for r in parent],
        parent_schema_tokens=max((schema_tokens(t) for t in parent_schemas), default=0),
        child_tokens=[counter.count_messages(r) for r in (child.requests if child else [])],
        summary_tokens=[counter.count_messages(r) for r in [*summary.requests, *fallbacks]],
        compactions=int((state.get("compaction") or {}).get("version", 0)),
        searches=search.calls,
        tasks_completed=statuses.count("completed"),
        task_statuses=statuses,
        seconds=seconds,
    )


# --------------------------------------------------------------------------- report


def _ratio(with_: float, without: float) -> str:
    return f"{with_ / without:.2f}" if with_ and without else "—"


def _row(name: str, without: float | None, with_: float | None, ratio: bool = True) -> str:
    def cell(value: float | None) -> str:
        return "—" if value is None else f"{value:,.0f}"

    shown = _ratio(with_ or 0, without or 0) if ratio else "—"
    return f"| {name} | {cell(without)} | {cell(with_)} | {shown} |"


def report(
    solo: RunResult,
    delegate: RunResult,
    solo_times: list[float],
    delegate_times: list[float],
    args: argparse.Namespace,
) -> str:
    """The side-by-side table and the lines that read it."""
    solo_total = sum(solo.parent_tokens)
    parent_total = sum(delegate.parent_tokens)
    child_total = sum(delegate.child_tokens)
    solo_max = max(solo.parent_tokens)
    parent_max = max(delegate.parent_tokens)
    solo_wall = statistics.median(solo_times)
    delegate_wall = statistics.median(delegate_times)
    everything = parent_total + child_total + sum(delegate.summary_tokens)
    lines = [
        "## Subagent benchmark",
        "",
        f"Session: {args.tasks} research questions; each takes {args.searches} searches of "
        f"about {args.doc_tokens:,} tokens each, then a ~{ANSWER_TOKENS}-token answer (with "
        f"delegation, one task call to the '{RESEARCHER}' subagent, whose report is "
        f"~{REPORT_TOKENS} tokens). ctxgraph default settings, memory off, in-memory saver "
        f"and Store; wall time: median of {args.repeat} run(s) per mode.",
        "Request tokens are the messages of each request (TokenCounter); tool schemas are "
        "not counted (see their row).",
        "",
        "| Metric | without delegation | with delegation | with / without |",
        "|---|---:|---:|---:|",
        _row("Parent model calls", len(solo.parent_tokens), len(delegate.parent_tokens)),
        _row("Parent largest request, tokens", solo_max, parent_max),
        _row(
            "Parent median request, tokens",
            statistics.median(solo.parent_tokens),
            statistics.median(delegate.parent_tokens),
        ),
        _row("Parent input tokens, total", solo_total, parent_total),
        _row(
            "Parent tool schemas per request, tokens (not counted above)",
            solo.parent_schema_tokens,
            delegate.parent_schema_tokens,
        ),
        _row("Subagent model calls", None, len(delegate.child_tokens), ratio=False),
        _row(
            "Subagent largest request, tokens",
            None,
            max(delegate.child_tokens, default=0),
            ratio=False,
        ),
        _row("Subagent input tokens, total", None, child_total, ratio=False),
        _row("Parent + subagent input tokens, total", solo_total, parent_total + child_total),
        _row("Summary-model calls", len(solo.summary_tokens), len(delegate.summary_tokens)),
        _row("Summary-model input tokens", sum(solo.summary_tokens), sum(delegate.summary_tokens)),
        _row(
            "All model input tokens (parent + subagents + summary)",
            solo_total + sum(solo.summary_tokens),
            everything,
        ),
        _row("Compactions committed", solo.compactions, delegate.compactions),
        _row("Searches run", solo.searches, delegate.searches),
        f"| Subagent tasks completed | — | {delegate.tasks_completed} of {args.tasks} | — |",
        f"| Wall time, s (median) | {solo_wall:.2f} | {delegate_wall:.2f} | "
        f"{_ratio(delegate_wall, solo_wall)} |",
        "",
    ]

    def times(value: float, base: float) -> str:
        return f"{value / base:.2f}x" if base else "—"

    def lower(value: float, base: float) -> str:
        return "lowers" if value < base else "does not lower"

    grand = parent_total + child_total
    solo_all = solo_total + sum(solo.summary_tokens)
    lines.append(
        f"With delegation, the parent's largest request is {times(parent_max, solo_max)} "
        f"the one without ({parent_max:,} vs {solo_max:,} tokens) and its input over the "
        f"session {times(parent_total, solo_total)} ({parent_total:,} vs {solo_total:,}); "
        f"compactions: {delegate.compactions} with delegation, {solo.compactions} without."
    )
    lines.append(
        f"With the subagents' {child_total:,} input tokens added, the delegation run reads "
        f"{grand:,} tokens, {times(grand, solo_total)} the run without delegation; with the "
        f"summary model's input added to both, {times(everything, solo_all)} ({everything:,} "
        f"vs {solo_all:,}). Delegation {lower(parent_max, solo_max)} the parent's largest "
        f"request and {lower(everything, solo_all)} the session's total input here."
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the session without and with delegation and print the table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", type=int, default=None, help="research questions (20)")
    parser.add_argument("--searches", type=int, default=3, help="searches per question")
    parser.add_argument(
        "--doc-tokens", type=int, default=None, help="tokens of one search result (3000)"
    )
    parser.add_argument("--repeat", type=int, default=None, help="runs per mode (3)")
    parser.add_argument(
        "--quick", action="store_true", help="4 questions, 800-token results, 1 run"
    )
    args = parser.parse_args(argv)
    defaults = (4, 800, 1) if args.quick else (20, 3_000, 3)
    for name, default in zip(("tasks", "doc_tokens", "repeat"), defaults, strict=True):
        if getattr(args, name) is None:
            setattr(args, name, default)
    if min(args.tasks, args.searches, args.doc_tokens, args.repeat) < 1:
        parser.error("--tasks, --searches, --doc-tokens and --repeat must be at least 1")

    results: dict[str, list[RunResult]] = {"solo": [], "delegate": []}
    for repeat in range(args.repeat):
        for mode in ("solo", "delegate"):
            results[mode].append(run(mode, args.tasks, args.searches, args.doc_tokens, repeat))
    solo, delegate = results["solo"][0], results["delegate"][0]
    print(
        report(
            solo,
            delegate,
            [r.seconds for r in results["solo"]],
            [r.seconds for r in results["delegate"]],
            args,
        )
    )
    if delegate.tasks_completed != args.tasks:
        print(f"FAIL subagent tasks: statuses {delegate.task_statuses}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
