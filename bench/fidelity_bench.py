"""Fidelity benchmark: do planted facts survive compaction, in the request or the archive?

A seeded long session plants probes in its first turns, then fills the thread with
dialogue (MADial-Bench zh user lines, read at run time from ``../shared/data`` relative to
the repository or from ``$CTXGRAPH_MADIAL_DIR``; a seeded synthetic filler when absent).
The probes, by category:

- recall: the user's goal and a standing constraint;
- artifact: a file path and a ticket identifier;
- continuation: the pending next step;
- decision: a decision together with its reason;
- ledger: a side effect with an idempotency key, and a call that failed.

ctxgraph runs offline with the scripted demo models (``demo_models()``; the main model
also calls the two ledger tools when a probe turn asks for them) and low triggers, once as
its own graph (``build_graph``) and once as ``create_agent`` with ``ctxgraph_middleware``
(the same models, tools, settings and system prompt), which must score alike. After
every compaction, and on through the "decay rounds" after the fifth, each probe is scored:
``request`` (every needle occurs in the request the main model receives), ``archive``
(each needle is found by ``ThreadArchive.search_messages``, as ``read_history`` would) or
``lost``. It prints a table per category, the tokens per main-model request and the number
of archived records whose summary is ``degraded``.

With ``CTXGRAPH_MODEL`` set, ctxgraph also runs with that environment's summary model,
side by side with LangChain's ``create_agent`` + ``SummarizationMiddleware`` given the
same summary model (LangChain is a dev extra); offline that column is skipped with a note.

``--shared-prose`` adds three columns offline: ctxgraph (its graph and its middleware) and
that peer given the same scripted summary model, the cost benchmark's shared prose
(``bench.cost_summary``), so they differ only in what ctxgraph adds (the ledger and the
archive). ``--json PATH``
writes each column's totals (the cost benchmark reads them with ``--fidelity-json``).

Run ``python -m bench.fidelity_bench [--compactions 8] [--seed 7] [--quick]
[--shared-prose] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from bench.common import median, package_version
from ctxgraph.graph import build_graph
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_model import demo_models
from ctxgraph.state.demo_replies import demo_chat_reply
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.tokens import TokenCounter
from ctxgraph.store.persistence.archive import ThreadArchive

Outcome = Literal["request", "archive", "lost", "not yet planted"]
OUTCOMES: tuple[Outcome, ...] = ("request", "archive", "lost", "not yet planted")
CATEGORIES = ("recall", "artifact", "continuation", "decision", "ledger")
DECAY_AFTER = 5
"""Compactions after the fifth are the decay rounds."""
DATA_ENV = "CTXGRAPH_MADIAL_DIR"
DIALOGUE_FILE = "MADial-Bench-zh-dialogue.json"
TABLE_HEADER = "| compaction | probe | ctxgraph (scripted) |"
"""The first row of every category table (more columns follow when they run)."""


# --------------------------------------------------------------------------- the session


@dataclass(frozen=True)
class Probe:
    """A planted fact: its category, a label, the strings that must all survive, and the
    index of the user turn (in ``PLANTED``) that plants it."""

    category: str
    label: str
    needles: tuple[str, ...]
    turn: int


PROBES = (
    Probe("recall", "goal", ("PostgreSQL 16",), 0),
    Probe("recall", "constraint", ("prod-db-7",), 1),
    Probe("artifact", "file path", ("src/billing/ledger_sync.py",), 2),
    Probe("artifact", "identifier", ("INV-2026-0042",), 2),
    Probe("decision", "decision + reason", ("Redis Streams", "ops already runs Redis"), 3),
    Probe("ledger", "side effect + idempotency key", ("create_refund", "idem-7f3a9c"), 4),
    Probe("ledger", "failed call", ("send_invoice", "SMTP 550"), 5),
    Probe("continuation", "next step", ("backfill for shard-3",), 6),
)

PLANTED = (
    "My goal for this session: migrate the billing service to PostgreSQL 16.",
    "Never touch the production database prod-db-7.",
    "The code lives in src/billing/ledger_sync.py and the ticket is INV-2026-0042.",
    "Decision: we use Redis Streams instead of Kafka, because ops already runs Redis.",
    "Please refund order ORD-5531 with idempotency key idem-7f3a9c. [[create_refund]]",
    "Now send the invoice for ORD-5531 to billing@example.com. [[send_invoice]]",
    "The next step after this: run the backfill for shard-3 tonight.",
)


def data_dir() -> Path | None:
    """Where MADial-Bench zh lives: ``$CTXGRAPH_MADIAL_DIR`` or ``../shared/data/madial_zh``."""
    given = os.environ.get(DATA_ENV)
    folder = (
        Path(given)
        if given
        else Path(__file__).resolve().parents[1].parent / "shared" / "data" / "madial_zh"
    )
    return folder if (folder / DIALOGUE_FILE).is_file() else None


def madial_lines(folder: Path) -> list[str]:
    """The user lines of every MADial-Bench zh dialogue, in file order."""
    lines: list[str] = []
    with (folder / DIALOGUE_FILE).open(encoding="utf-8") as handle:
        for raw in handle:
            if not raw.strip():
                continue
            for line in json.loads(raw).get("dialogue", []):
                speaker, _, said = line.strip().partition(":")
                if speaker.startswith("<") and speaker != "<Assistant>" and said:
                    lines.append(said.strip().strip('"'))
    return [line for line in lines if len(line) >= 6]


_SYNTHETIC = ("今天", "周末", "朋友", "天气", "电影", "跑步", "晚饭", "旅行", "书", "音乐")


def filler(count: int, seed: int) -> tuple[list[str], str]:
    """``count`` filler user lines and where they came from."""
    rng = random.Random(seed)
    folder = data_dir()
    if folder is not None:
        lines = madial_lines(folder)
        if lines:
            start = rng.randrange(len(lines))
            picked = [lines[(start + i) % len(lines)] for i in range(count)]
            return picked, f"MADial-Bench zh user lines ({folder})"
    picked = [
        f"我{rng.choice(_SYNTHETIC)}想聊聊{rng.choice(_SYNTHETIC)}，还有{rng.choice(_SYNTHETIC)}的事。"
        for _ in range(count)
    ]
    return picked, "seeded synthetic filler (MADial-Bench zh not found)"


# --------------------------------------------------------------------------- models, tools


def _create_refund(order: str, idempotency_key: str) -> str:
    return f"refund created for {order} (idempotency key {idempotency_key})"


def _send_invoice(order: str, to: str) -> str:
    raise ToolException(f"SMTP 550: mailbox {to} unavailable")


def probe_tools() -> list[BaseTool]:
    """A side-effecting tool that succeeds and one that fails (its error goes to the model)."""
    return [
        StructuredTool.from_function(
            _create_refund, name="create_refund", description="Refund an order (side effect)."
        ),
        StructuredTool.from_function(
            _send_invoice,
            name="send_invoice",
            description="Email an invoice (side effect).",
            handle_tool_error=True,
        ),
    ]


_CALLS: dict[str, dict[str, str]] = {
    "create_refund": {"order": "ORD-5531", "idempotency_key": "idem-7f3a9c"},
    "send_invoice": {"order": "ORD-5531", "to": "billing@example.com"},
}


def main_reply(messages: list[BaseMessage], tools: frozenset[str]) -> AIMessage:
    """The demo chat reply, except that a probe turn's ``[[tool]]`` mark calls that tool."""
    last = messages[-1] if messages else None
    if isinstance(last, HumanMessage):
        for name, args in _CALLS.items():
            if f"[[{name}]]" in last.text and name in tools:
                call = {"name": name, "args": dict(args), "id": f"call_{name}"}
                return AIMessage(content="", tool_calls=[call])
    return demo_chat_reply(messages, tools)


# --------------------------------------------------------------------------- scoring


@dataclass
class Score:
    """One system's probe outcomes after each compaction, and what it cost."""

    system: str
    rows: list[dict[str, Outcome]] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    degraded: int = 0
    records: int = 0
    turns: int = 0
    note: str = ""


def score_probe(
    probe: Probe, request: str, search: Callable[[str], bool] | None, turns: int
) -> Outcome:
    """``request`` if every needle is in the request, ``archive`` if search finds each.

    ``turns`` is how many user turns have been sent, the one being scored included: a
    probe whose turn has not finished yet (its tool call may still be ahead) is not lost.
    """
    if probe.turn >= turns - 1:
        return "not yet planted"
    if all(needle in request for needle in probe.needles):
        return "request"
    if search is not None and all(search(needle) for needle in probe.needles):
        return "archive"
    return "lost"


def request_text(messages: Sequence[BaseMessage]) -> str:
    """The text of a request, tool calls included (their names and arguments)."""
    parts: list[str] = []
    for message in messages:
        parts.append(message.text)
        for call in getattr(message, "tool_calls", None) or []:
            parts.append(f"{call['name']} {json.dumps(call['args'], ensure_ascii=False)}")
    return "\n".join(parts)


@dataclass(frozen=True)
class BenchConfig:
    """What to run."""

    compactions: int = 8
    seed: int = 7
    trigger_messages: int = 16
    keep_messages: int = 4
    max_turns: int = 400


QUICK = BenchConfig(compactions=3, trigger_messages=10, keep_messages=4)
"""``--quick``: three compactions at a low trigger."""


def turns(config: BenchConfig) -> tuple[list[str], str]:
    """The session's user turns: the planted probes, then filler."""
    lines, source = filler(config.max_turns, config.seed)
    return [*PLANTED, *lines], source


def run_ctxgraph(
    texts: Sequence[str],
    config: BenchConfig,
    summary: BaseChatModel | None,
    label: str,
    *,
    middleware: bool = False,
) -> Score:
    """ctxgraph on an in-memory saver and store, scored after each compaction.

    With ``middleware``, the same models, tools and settings run as ``create_agent`` with
    ``ctxgraph_middleware`` (ctxgraph's system prompt as the agent's) instead of
    ``build_graph``.
    """
    models = demo_models()
    main = ScriptedChatModel(tool_responder=main_reply, model_name="bench-main")
    store = InMemoryStore()
    chosen = Models(main=main, summary=summary or models.summary, memory=models.memory)
    settings = Settings(
        trigger_messages=config.trigger_messages,
        keep_messages=config.keep_messages,
        trigger_tokens=100_000,
        memory_extraction="off",
        memory_mode="off",
    )
    graph: Any
    if middleware:
        from langchain.agents import create_agent

        from ctxgraph.middleware import ctxgraph_middleware

        graph = create_agent(
            model=main,
            tools=probe_tools(),
            system_prompt=settings.system_prompt,
            middleware=ctxgraph_middleware(models=chosen, settings=settings),
            checkpointer=InMemorySaver(),
            store=store,
            context_schema=Context,
        )
    else:
        graph = build_graph(
            models=chosen,
            tools=probe_tools(),
            settings=settings,
            checkpointer=InMemorySaver(),
            store=store,
        )
    thread = f"fidelity-{uuid.uuid4().hex[:8]}"
    run_config: Any = {"configurable": {"thread_id": thread}}
    archive = ThreadArchive(store, thread)
    counter = TokenCounter()
    score = Score(label)
    version = 0
    for text in texts:
        before = len(main.requests)
        turn: Any = {"messages": [("user", text)]}
        graph.invoke(turn, run_config, context=Context(user_id="b"))
        score.turns += 1
        new = main.requests[before:]
        score.tokens.extend(counter.count_messages(m) for m in new)
        state = graph.get_state(run_config).values
        now = int((state.get("compaction") or {}).get("version", 0))
        if now > version and new:
            version = now
            seen = request_text(new[0])

            def found(needle: str) -> bool:
                return bool(archive.search_messages(needle, 1))

            score.rows.append({p.label: score_probe(p, seen, found, score.turns) for p in PROBES})
            if len(score.rows) >= config.compactions:
                break
    records = archive.records()
    score.records = len(records)
    score.degraded = sum(1 for r in records if (r.get("summary") or {}).get("degraded"))
    return score


def run_peer(texts: Sequence[str], config: BenchConfig, summary: BaseChatModel) -> Score:
    """``create_agent`` + ``SummarizationMiddleware``; it has no archive to search."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import SummarizationMiddleware

    main = ScriptedChatModel(tool_responder=main_reply, model_name="bench-main")
    agent = create_agent(
        model=main,
        tools=probe_tools(),
        system_prompt=Settings().system_prompt,
        middleware=[
            SummarizationMiddleware(
                model=summary,
                trigger=("messages", config.trigger_messages),
                keep=("messages", config.keep_messages),
            )
        ],
        checkpointer=InMemorySaver(),
    )
    run_config: Any = {"configurable": {"thread_id": "peer"}}
    counter = TokenCounter()
    score = Score("create_agent + SummarizationMiddleware")
    last = ""
    for text in texts:
        before = len(main.requests)
        turn: Any = {"messages": [("user", text)]}
        agent.invoke(turn, run_config)
        score.turns += 1
        new = main.requests[before:]
        score.tokens.extend(counter.count_messages(m) for m in new)
        summary_text = _peer_summary(new[0]) if new else ""
        if summary_text and summary_text != last:  # the middleware summarized this turn
            last = summary_text
            seen = request_text(new[0])
            score.rows.append({p.label: score_probe(p, seen, None, score.turns) for p in PROBES})
            if len(score.rows) >= config.compactions:
                break
    return score


SCRIPTED = "ctxgraph (scripted)"
SCRIPTED_MIDDLEWARE = "create_agent + ctxgraph middleware (scripted)"
SHARED_CTXGRAPH = "ctxgraph (shared prose)"
SHARED_MIDDLEWARE = "create_agent + ctxgraph middleware (shared prose)"
SHARED_PEER = "create_agent + SummarizationMiddleware (shared prose)"


def scripted_scores(config: BenchConfig) -> list[Score]:
    """ctxgraph's graph and ``create_agent`` with ctxgraph's middleware, the demo models."""
    texts, _ = turns(config)
    return [
        run_ctxgraph(texts, config, None, SCRIPTED),
        run_ctxgraph(texts, config, None, SCRIPTED_MIDDLEWARE, middleware=True),
    ]


def shared_prose_scores(config: BenchConfig) -> list[Score]:
    """ctxgraph (its graph and its middleware) and the peer, each given the cost
    benchmark's shared-prose summary model."""
    from bench.cost_summary import summary_responder

    def prose() -> ScriptedChatModel:
        return ScriptedChatModel(responder=summary_responder, model_name="bench-summary")

    texts, _ = turns(config)
    peer = run_peer(texts, config, prose())
    peer.system = SHARED_PEER
    return [
        run_ctxgraph(texts, config, prose(), SHARED_CTXGRAPH),
        run_ctxgraph(texts, config, prose(), SHARED_MIDDLEWARE, middleware=True),
        peer,
    ]


def totals(score: Score) -> dict[str, int]:
    """A column's totals: turns, compactions scored and each outcome over all rounds."""
    counted = {o: sum(1 for r in score.rows for v in r.values() if v == o) for o in OUTCOMES}
    return {"turns": score.turns, "compactions": len(score.rows), **counted}


def _peer_summary(messages: Sequence[BaseMessage]) -> str:
    """The id and text of the middleware's summary message in a request, or empty."""
    for message in messages:
        if message.additional_kwargs.get("lc_source") == "summarization":
            return f"{message.id}:{message.text}"
    return ""


# --------------------------------------------------------------------------- report


def _cell(score: Score | None, row: int, label: str) -> str:
    if score is None:
        return "skipped"
    if row >= len(score.rows):
        return "—"
    return score.rows[row][label]


def report(scores: Sequence[Score | None], names: Sequence[str], source: str, note: str) -> str:
    """Markdown: a table per category, then tokens per request and degraded records."""
    out = [
        "# Fidelity benchmark",
        "",
        f"Filler: {source}. langchain-core {package_version('langchain-core')}, "
        f"langgraph {package_version('langgraph')}, Python {sys.version.split()[0]}.",
        "Outcomes: request (in the main model's request), archive (found by "
        "ThreadArchive.search_messages, as read_history would), lost; 'not yet planted' "
        "when the compaction came before the probe's turn.",
    ]
    if note:
        out.append(note)
    rows = max((len(s.rows) for s in scores if s is not None), default=0)
    header = "| compaction | probe | " + " | ".join(names) + " |"
    for category in CATEGORIES:
        out += ["", f"## {category}", "", header, "|" + "---|" * (2 + len(names))]
        for row in range(rows):
            tag = f"{row + 1}" + (" (decay)" if row + 1 > DECAY_AFTER else "")
            for probe in (p for p in PROBES if p.category == category):
                cells = " | ".join(_cell(s, row, probe.label) for s in scores)
                out.append(f"| {tag} | {probe.label} | {cells} |")
    out += ["", "## Totals", "", "| | " + " | ".join(names) + " |", "|" + "---|" * (1 + len(names))]

    def line(title: str, value: Callable[[Score], str]) -> None:
        cells = " | ".join(value(s) if s is not None else "skipped" for s in scores)
        out.append(f"| {title} | {cells} |")

    line("Turns run", lambda s: str(s.turns))
    line("Compactions scored", lambda s: str(len(s.rows)))
    line("Tokens per main-model request, median", lambda s: f"{median(s.tokens):,.0f}")
    line("Tokens per main-model request, max", lambda s: f"{max(s.tokens, default=0):,}")

    def tally(outcome: Outcome) -> Callable[[Score], str]:
        return lambda s: str(sum(1 for r in s.rows for v in r.values() if v == outcome))

    for outcome in OUTCOMES:
        line(f"Probe scores '{outcome}' (all rounds)", tally(outcome))
    line("Degraded records / archived records", lambda s: f"{s.degraded} / {s.records}")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print its report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compactions", type=int, default=8)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="3 compactions, low triggers")
    parser.add_argument(
        "--shared-prose",
        action="store_true",
        help="add ctxgraph and the peer with the cost benchmark's shared summary prose",
    )
    parser.add_argument("--json", default=None, metavar="PATH", help="write each column's totals")
    args = parser.parse_args(argv)
    config = BenchConfig(compactions=args.compactions, seed=args.seed)
    if args.quick:
        config = replace(QUICK, seed=args.seed)
    logging.getLogger("ctxgraph").setLevel(logging.ERROR)
    texts, source = turns(config)
    scores: list[Score | None] = list(scripted_scores(config))
    names = [SCRIPTED, SCRIPTED_MIDDLEWARE]
    note = ""
    if os.environ.get("CTXGRAPH_MODEL"):
        summary = Models.from_env(os.environ).summary_model
        scores.append(run_ctxgraph(texts, config, summary, "ctxgraph (env summary)"))
        names.append("ctxgraph (env summary)")
        try:
            peer: Score | None = run_peer(texts, config, summary)
        except ImportError:
            peer, note = None, "The peer column is skipped: langchain (a dev extra) is missing."
        scores.append(peer)
        names.append("create_agent + SummarizationMiddleware")
    else:
        note = (
            "Offline: the env-summary and create_agent + SummarizationMiddleware columns are "
            "skipped (set CTXGRAPH_MODEL to run them with that summary model)."
        )
    if args.shared_prose:
        for score in shared_prose_scores(config):
            scores.append(score)
            names.append(score.system)
    print(report(scores, names, source, note))
    if args.json:
        found = {s.system: totals(s) for s in scores if s is not None}
        Path(args.json).write_text(json.dumps(found, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
