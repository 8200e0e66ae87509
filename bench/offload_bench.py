"""Offloading benchmark: a session whose tools return 5k-60k-token results, with and without.

One seeded session of ``--turns`` user turns (100 by default). Every turn the scripted
main model calls ``fetch_log``, which returns a log of 5,000 to 60,000 tokens (its size is
drawn per turn), and then answers. The same session runs twice through ctxgraph with the
same settings, once with tool-result offloading (``offload_tokens``, default 20,000) and
once with it off (``offload_tokens=0``), and the command prints, side by side:

- the largest and the median main-model request, in tokens (messages plus tool schemas);
- the main-model input tokens per user turn, and the summary-model input per turn;
- compactions committed;
- artifacts written and their bytes (the Store's copy of what was offloaded);
- wall time.

Both runs use a 200,000-token input window and a 150,000-token compaction trigger, so the
run without offloading can still hold one 60,000-token result. Run
``python -m bench.offload_bench [--turns 100] [--backend memory|postgres]``.
"""

from __future__ import annotations

import argparse
import atexit
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from bench.session import ctxgraph_summary_responder
from ctxgraph.graph import build_graph
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.tokens import TokenCounter, count_text
from ctxgraph.store.artifacts import ArtifactStore

WINDOW = 200_000
TRIGGER = 150_000
SMALLEST, LARGEST = 5_000, 60_000
SERVICES = ("billing", "search", "checkout", "auth", "inventory", "shipping")
LEVELS = ("INFO", "INFO", "INFO", "WARN", "ERROR", "DEBUG")


def log_text(turn: int, target: int) -> str:
    """A deterministic service log of about ``target`` tokens (exact count not needed)."""
    rng = random.Random(f"log:{turn}")
    lines: list[str] = []
    tokens = 0
    while tokens < target:
        line = (
            f"2026-11-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:"
            f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z "
            f"{rng.choice(LEVELS)} {rng.choice(SERVICES)} "
            f"request_id=req-{rng.getrandbits(40):010x} "
            f"latency_ms={rng.randint(1, 4000)} status={rng.choice((200, 200, 201, 404, 500))} "
            f"path=/v1/{rng.choice(SERVICES)}/{rng.randint(1, 99999)}"
        )
        lines.append(line)
        tokens += count_text(line) + 1
    return "\n".join(lines)


@dataclass(frozen=True)
class Plan:
    """The session: the target size of each turn's tool result."""

    sizes: tuple[int, ...]
    seed: int


def make_plan(turns: int, seed: int) -> Plan:
    """Draw each turn's result size between 5,000 and 60,000 tokens."""
    rng = random.Random(seed)
    return Plan(tuple(rng.randint(SMALLEST, LARGEST) for _ in range(turns)), seed)


def fetch_log_tool(plan: Plan) -> BaseTool:
    """The session's one tool: the log of a turn."""

    def fetch_log(turn: int) -> str:
        """Fetch the service log of one user turn."""
        return log_text(turn, plan.sizes[turn])

    return StructuredTool.from_function(fetch_log, name="fetch_log")


def main_responder(messages: list[BaseMessage]) -> AIMessage:
    """Call ``fetch_log`` for a new user turn; answer once its result is back."""
    last = messages[-1]
    if isinstance(last, HumanMessage):
        turn = int(str(last.content).split("#", 1)[1].split()[0])
        call = {"name": "fetch_log", "args": {"turn": turn}, "id": f"call-{turn}"}
        return AIMessage(content="", tool_calls=[call])
    if isinstance(last, ToolMessage):
        head = str(last.content)[:120].replace("\n", " ")
        return AIMessage(content=f"Checked the log ({len(str(last.content))} chars): {head}")
    return AIMessage(content="Done.")


@dataclass
class RunResult:
    """What one run measured."""

    label: str
    request_tokens: list[int]
    summary_input_tokens: int
    compactions: int
    artifacts: int
    artifact_bytes: int
    seconds: float


def run(
    label: str, plan: Plan, offload_tokens: int, checkpointer: Any, store: BaseStore
) -> RunResult:
    """Replay the session once and measure it."""
    main = ScriptedChatModel(responder=main_responder, model_name="bench-main")
    summary = ScriptedChatModel(responder=ctxgraph_summary_responder, model_name="bench-sum")
    settings = Settings(
        context_window=WINDOW,
        trigger_tokens=TRIGGER,
        offload_tokens=offload_tokens,
        memory_extraction="off",
        memory_mode="off",
    )
    graph = build_graph(
        checkpointer=checkpointer,
        store=store,
        models=Models(main=main, summary=summary),
        tools=[fetch_log_tool(plan)],
        settings=settings,
    )
    thread = f"offload-{label}-{plan.seed}-{time.time_ns()}"
    config: Any = {"configurable": {"thread_id": thread}}
    context = Context(user_id="bench")
    started = time.perf_counter()
    for turn in range(len(plan.sizes)):
        graph.invoke(
            {"messages": [("user", f"Check turn #{turn} please.")]}, config, context=context
        )
    seconds = time.perf_counter() - started
    counter = TokenCounter()
    schemas = [
        sum(count_text(json.dumps(tool, ensure_ascii=False)) for tool in tools)
        for tools in main.tool_requests
    ]
    tokens = [
        counter.count_messages(request) + schema
        for request, schema in zip(main.requests, schemas, strict=True)
    ]
    summary_tokens = sum(counter.count_messages(request) for request in summary.requests)
    artifacts = ArtifactStore(store, thread).list()
    size = sum(artifact.size_bytes for artifact in artifacts)
    state = graph.get_state(config).values
    compactions = int((state.get("compaction") or {}).get("version", 0))
    return RunResult(label, tokens, summary_tokens, compactions, len(artifacts), size, seconds)


@contextmanager
def persistence(backend: str) -> Iterator[tuple[Any, BaseStore]]:
    """A checkpointer and Store: in memory, or an embedded Postgres in a temporary folder."""
    if backend == "memory":
        yield InMemorySaver(), InMemoryStore()
        return
    from ctxgraph.store.persistence.connection import open_persistence
    from ctxgraph.store.persistence.embedded import embedded_uri

    home = Path(tempfile.mkdtemp(prefix="ctxgraph-offload-bench-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    with open_persistence(embedded_uri(home / "home")) as opened:
        yield opened.checkpointer, opened.store


def _row(name: str, a: float, b: float, unit: str = "") -> str:
    ratio = f"{a / b:.2f}" if b else "—"
    return f"| {name} | {a:,.0f}{unit} | {b:,.0f}{unit} | {ratio} |"


def report(plan: Plan, on: RunResult, off: RunResult, backend: str) -> str:
    """The side-by-side table."""
    turns = len(plan.sizes)
    lines = [
        "## Offloading benchmark",
        "",
        f"Session: {turns} user turns (seed {plan.seed}); every turn calls fetch_log, whose "
        f"result is {min(plan.sizes):,}–{max(plan.sizes):,} tokens (median "
        f"{statistics.median(plan.sizes):,.0f}). Window {WINDOW:,}, trigger {TRIGGER:,}; "
        f"backend: {backend}.",
        "",
        "| Metric | offloading on | offloading off | on / off |",
        "|---|---:|---:|---:|",
        _row("Main-model requests", len(on.request_tokens), len(off.request_tokens)),
        _row("Largest request, tokens", max(on.request_tokens), max(off.request_tokens)),
        _row(
            "Median request, tokens",
            statistics.median(on.request_tokens),
            statistics.median(off.request_tokens),
        ),
        _row(
            "Main-model input tokens per turn",
            sum(on.request_tokens) / turns,
            sum(off.request_tokens) / turns,
        ),
        _row(
            "Summary-model input tokens per turn",
            on.summary_input_tokens / turns,
            off.summary_input_tokens / turns,
        ),
        _row("Compactions committed", on.compactions, off.compactions),
        _row("Artifacts written", on.artifacts, off.artifacts),
        _row("Artifact bytes", on.artifact_bytes, off.artifact_bytes),
        f"| Wall time, s | {on.seconds:.1f} | {off.seconds:.1f} | {on.seconds / off.seconds:.2f} |",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the session with and without offloading and print the table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--turns", type=int, default=100, help="user turns")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--offload-tokens", type=int, default=20_000)
    parser.add_argument("--backend", choices=("memory", "postgres"), default="memory")
    args = parser.parse_args(argv)
    if args.turns < 1 or args.offload_tokens < 1:
        parser.error("--turns and --offload-tokens must be at least 1")
    plan = make_plan(args.turns, args.seed)
    with persistence(args.backend) as (checkpointer, store):
        on = run("on", plan, args.offload_tokens, checkpointer, store)
        off = run("off", plan, 0, checkpointer, store)
    print(report(plan, on, off, args.backend))
    return 0


if __name__ == "__main__":
    sys.exit(main())
