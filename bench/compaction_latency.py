"""Turn latency with background compaction: inline, background and no compaction side by side.

One seeded session of ``--latency-turns`` user turns (60 by default) runs through ctxgraph
three ways in one process:

- ``inline`` (``compaction_mode="inline"``, the default): the turn that reaches the
  trigger waits for the summary model;
- ``background`` (``compaction_mode="background"``): a summary job starts in a daemon
  thread once the request reaches ``background_fraction`` of the trigger, and its stored
  result is applied, without a summary call, by the first turn that finds it ready; the
  turn that reaches the trigger waits for a running job up to ``background_wait_s`` (10 s
  by default), then compacts inline;
- ``no compaction``: triggers so high that nothing compacts, the baseline of a turn that
  does no compaction work at all.

Each turn is one user message (60–100 words, varied, the same for a seed) and one answer
of the main model without tool calls. The scripted main model sleeps ``--main-delay``
seconds per call (0.5 by default) and the scripted summary model ``--summary-delay`` (2.0
by default); both answer from the messages alone. Long-term memory is off
(``memory_extraction="off"``, ``memory_mode="off"``).

The compacting modes share a 32-message trigger and keep 4 messages; the token trigger
(18,000 by default) is never reached. Each turn adds two messages, so inline mode compacts
every 13 turns, 4 times in 60 turns. Background mode uses ``background_fraction=0.65``: its
job starts when the request reaches 20 messages, 6 turns (6 x 0.5 s = 3 s of main-model
time) before the trigger, so the 2 s summary call has a second to spare. Its result is
stored during the fourth turn's model call and applied by the next turn, 4 turns after the
start, at 28 messages; the job folded 14 or 15 messages, so the next request has 16, and
the next job starts 3 turns after the apply, again 6 turns before the trigger. Background
mode thus applies a job every 7 turns, 7 times in 60 turns, and starts an eighth that is
still running when the session ends. The default fraction, 0.7, would leave 5 turns (2.5
s). A smaller trigger gives the job less room: with 24 messages and a fraction of 0.5, the
first job starts 6 turns ahead, but from the second on each job starts right after the
previous result is applied, at 16 messages, and is ready only 4 turns (2 s) later, just
when the trigger fires, so whether the trigger's turn waits depends on a few milliseconds.
The same 4-to-1 ratio of the delays (``--main-delay 0.05 --summary-delay 0.2``) gives the
same schedule in a tenth of the time.

Each repetition runs the three modes one after the other, each on a new LangGraph thread,
in an order rotated from one repetition to the next. They are not interleaved turn by turn:
a background job would then run during the other modes' turns and get more time than the
session gives it. Before each mode's timed turns, two untimed warm-up turns run on another
thread; after them, and after the timed turns, the process waits (off the clock) for any
background job still running. A turn's latency is the wall time of its ``graph.stream``
call; the compaction events it streams (``compaction.started``, ``compaction.applied``) and
the thread's compaction version before and after it tell whether a job started in it and
whether a compaction was committed in it, and if so whether from a job or inline. Figures
are medians over ``--repeats`` repetitions (3 by default).

Run ``python -m bench.compaction_bench --latency [--latency-turns 60] [--repeats 3]
[--main-delay 0.5] [--summary-delay 2.0] [--backend memory] [--json PATH]`` (or
``python -m bench.compaction_latency`` with the same options); the embedded Postgres is
the default backend.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import math
import os
import platform
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from bench.common import Backend, add_backend_arguments, backend_label, open_backend, percentile
from bench.common import median as _median
from bench.common import package_version as _version
from ctxgraph.graph import build_graph
from ctxgraph.nodes.compaction.background import wait_for_jobs
from ctxgraph.nodes.compaction.summarizer import SUMMARY_SYSTEM
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_replies import demo_summary
from ctxgraph.state.messages import content_text
from ctxgraph.state.scripted_model import ScriptedChatModel

INLINE = "inline"
BACKGROUND = "background"
NONE = "no compaction"
MODES = (INLINE, BACKGROUND, NONE)

P95_RATIO_TARGET = 1.1
"""Largest accepted ratio of background mode's p95 turn latency to the no-compaction p95."""

WARMUP_TURNS = 2
"""Untimed turns each mode runs on a thread of its own before its timed run."""

JOB_DRAIN_S = 60.0
"""Longest wait, off the clock, for background jobs still running after a mode's turns."""

NEVER_TOKENS = 1_000_000_000
NEVER_MESSAGES = 1_000_000
"""The no-compaction mode's triggers: no session here comes near them."""


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class LatencyConfig:
    """What to run."""

    turns: int = 60
    repeats: int = 3
    seed: int = 7
    main_delay: float = 0.5
    """Seconds the scripted main model sleeps per call."""
    summary_delay: float = 2.0
    """Seconds the scripted summary model sleeps per call."""
    trigger_messages: int = 32
    keep_messages: int = 4
    background_fraction: float = 0.65
    backend: Literal["postgres", "memory"] = "postgres"
    database_uri: str | None = None
    json_path: str | None = None

    def settings(self, mode: str) -> Settings:
        """ctxgraph's settings for ``mode``: memory off, the shared trigger and keep."""
        values: dict[str, Any] = {
            "memory_extraction": "off",
            "memory_mode": "off",
            "trigger_messages": self.trigger_messages,
            "keep_messages": self.keep_messages,
        }
        if mode == BACKGROUND:
            values |= {
                "compaction_mode": "background",
                "background_fraction": self.background_fraction,
            }
        elif mode == NONE:
            values |= {"trigger_tokens": NEVER_TOKENS, "trigger_messages": NEVER_MESSAGES}
        return Settings(**values)


# --------------------------------------------------------------------------- the session


_SUBJECTS = (
    "the warehouse team", "our supplier in Porto", "the night shift", "the finance office",
    "the new dispatcher", "the regional manager", "the packaging line", "the customer desk",
    "the delivery drivers", "the quality inspector", "the inventory system", "the loading dock",
)  # fmt: skip
_ACTIONS = (
    "asked about", "wants to review", "is still waiting for", "has questions on",
    "would like a draft of", "sent comments about", "plans to discuss", "is worried about",
    "suggested changes to", "needs an update on", "agreed to look at", "found a gap in",
)  # fmt: skip
_OBJECTS = (
    "the weekly pick schedule", "the spring catalogue", "the pallet labels",
    "the returns process", "the holiday staffing plan", "the carrier contracts",
    "the storage layout", "the forecast for next quarter", "the shelf audit",
    "the cold-room checklist", "the safety briefing", "the route plan for the north area",
)  # fmt: skip
_DETAILS = (
    "The last version was sent around on Monday and a few people replied with notes.",
    "Most of the figures look fine, but two of the columns were copied from an old sheet.",
    "It would help to have a short list of what changed since the previous round.",
    "Please keep the tone friendly, since the readers are mostly new to the topic.",
    "We talked about it in the morning meeting and nobody objected to the idea.",
    "The numbers from last month are in the shared folder under the planning heading.",
    "A few of the older entries are probably out of date and can be dropped.",
    "I think a table would be easier to read than the long paragraphs we had before.",
    "There is some pressure to finish this before the end of the month.",
    "The team in the other building has a similar document that we could borrow from.",
    "Some of the wording came from the supplier and sounds a bit stiff.",
    "Let us try to keep it to one page if we can, with the details in an appendix.",
    "Two people asked whether the same plan applies to the weekend shifts as well.",
    "The first section is in good shape; the middle part needs the most work.",
)  # fmt: skip


def user_message(seed: int, turn: int) -> str:
    """User turn ``turn``'s message: 60–100 words, the same for a seed and a turn."""
    rng = random.Random(f"latency:{seed}:{turn}")
    target = rng.randint(60, 100)
    opening = f"{rng.choice(_SUBJECTS).capitalize()} {rng.choice(_ACTIONS)} {rng.choice(_OBJECTS)}."
    words = opening.split()
    details = list(_DETAILS)
    rng.shuffle(details)
    for sentence in details:
        if len(words) >= target:
            break
        words.extend(sentence.split())
    extra = rng.sample(_DETAILS, len(_DETAILS))
    while len(words) < target:
        words.extend(extra.pop().split())
    text = " ".join(words[:target]).rstrip(",;")
    return text if text.endswith(".") else text + "."


def is_summary_request(messages: Sequence[BaseMessage]) -> bool:
    """A ctxgraph summary call: its first message is the summary system prompt."""
    return bool(messages) and content_text(messages[0]) == SUMMARY_SYSTEM


def summary_answer(messages: Sequence[BaseMessage]) -> AIMessage:
    """A valid summary answer, built from the summary prompt (the last message)."""
    return demo_summary(content_text(messages[-1]))


def chat_answer(messages: Sequence[BaseMessage]) -> AIMessage:
    """The main model's answer to the latest user message, without tool calls."""
    asked = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
    first = content_text(asked).split(". ")[0] if asked is not None else "your message"
    return AIMessage(
        content=f"Understood: {first}. I have noted the details and will take them into "
        "account in the next draft; tell me if anything else should change before then."
    )


def main_responder(delay: float) -> Callable[[list[BaseMessage]], AIMessage]:
    """The main model: sleeps ``delay`` s, then answers (a summary call as the summary model)."""

    def respond(messages: list[BaseMessage]) -> AIMessage:
        time.sleep(delay)
        return summary_answer(messages) if is_summary_request(messages) else chat_answer(messages)

    return respond


def summary_responder(delay: float) -> Callable[[list[BaseMessage]], AIMessage]:
    """The summary model: sleeps ``delay`` s, then answers with the demo summary."""

    def respond(messages: list[BaseMessage]) -> AIMessage:
        time.sleep(delay)
        return summary_answer(messages)

    return respond


# --------------------------------------------------------------------------- measurement


class EventLog(logging.Handler):
    """Counts compaction log lines from every thread (job threads log without streaming)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.counts: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("compaction."):
            name = message.split(" ", 1)[0].removeprefix("compaction.")
        elif message.startswith("no job result after waiting"):
            name = "fell_back_inline"
        elif message.startswith("compaction skipped"):
            name = "skipped"
        else:
            return
        self.counts[name] = self.counts.get(name, 0) + 1

    def reset(self) -> None:
        self.counts = {}


@contextmanager
def event_log() -> Iterator[EventLog]:
    """Attach an ``EventLog`` to ``ctxgraph.compaction`` at INFO, and keep it off stderr."""
    handler = EventLog()
    logger = logging.getLogger("ctxgraph.compaction")
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


@dataclass(frozen=True)
class Turn:
    """One timed turn: its wall time and what compaction did in it."""

    seconds: float
    committed: bool
    """A compaction was committed in this turn (the thread's version went up)."""
    applied: bool
    """A background job's result was applied in this turn."""
    started: bool
    """A background job was started in this turn."""


@dataclass
class RunResult:
    """One mode's run in one repetition."""

    mode: str
    repeat: int
    turns: list[Turn]
    compactions: int
    summary_calls: int
    main_calls: int
    events: dict[str, int] = field(default_factory=dict)

    @property
    def latencies(self) -> list[float]:
        return [t.seconds for t in self.turns]

    @property
    def compacting(self) -> list[float]:
        """Latencies of the turns in which a compaction was committed."""
        return [t.seconds for t in self.turns if t.committed]

    @property
    def starting(self) -> list[float]:
        """Latencies of the turns in which a background job was started."""
        return [t.seconds for t in self.turns if t.started]

    @property
    def from_job(self) -> int:
        return sum(t.applied for t in self.turns)

    @property
    def inline(self) -> int:
        return sum(t.committed and not t.applied for t in self.turns)

    @property
    def jobs_started(self) -> int:
        return sum(t.started for t in self.turns)

    @property
    def unapplied(self) -> int:
        """Jobs started whose result was never applied (e.g. one still pending at the end)."""
        return self.jobs_started - self.from_job

    def figures(self) -> dict[str, float]:
        """The figures the report quotes (medians over repetitions are taken of these)."""
        lat, comp = self.latencies, self.compacting
        return {
            "turns": len(self.turns),
            "compactions": self.compactions,
            "from_job": self.from_job,
            "inline": self.inline,
            "jobs_started": self.jobs_started,
            "unapplied": self.unapplied,
            "summary_calls": self.summary_calls,
            "p50": _median(lat),
            "p95": percentile(lat, 0.95),
            "max": max(lat, default=math.nan),
            "mean": statistics.fmean(lat) if lat else math.nan,
            "compacting_p50": _median(comp),
            "compacting_max": max(comp, default=math.nan),
            "starting_p50": _median(self.starting),
            "starting_max": max(self.starting, default=math.nan),
        }


@dataclass
class Thread:
    """One mode's graph on one thread, with its scripted models."""

    mode: str
    graph: Any
    main: ScriptedChatModel
    summary: ScriptedChatModel
    thread_id: str

    @property
    def config(self) -> dict[str, Any]:
        return {"configurable": {"thread_id": self.thread_id}}

    def version(self) -> int:
        """The thread's committed compaction version (0 before the first compaction)."""
        values = self.graph.get_state(self.config).values
        return int((values.get("compaction") or {}).get("version", 0) or 0)

    def summary_calls(self) -> int:
        """Summary calls so far, including any that fell back to the main model."""
        fallbacks = sum(1 for request in self.main.requests if is_summary_request(request))
        return len(self.summary.requests) + fallbacks

    def turn(self, text: str) -> Turn:
        """Send one user message; time the stream, then (off the clock) read the version."""
        before = self.version()
        names: list[str] = []
        payload: Any = {"messages": [("user", text)]}
        # Collect the young generations off the clock, so that another mode's garbage is
        # not collected while this turn is timed.
        gc.collect(1)
        start = time.perf_counter()
        for chunk in self.graph.stream(
            payload, self.config, context=Context(user_id="bench"), stream_mode="custom"
        ):
            if isinstance(chunk, dict) and isinstance(chunk.get("event"), str):
                names.append(chunk["event"])
        seconds = time.perf_counter() - start
        return Turn(
            seconds=seconds,
            committed=self.version() > before,
            applied="compaction.applied" in names,
            started="compaction.started" in names,
        )


def open_thread(mode: str, config: LatencyConfig, persistence: Backend, thread_id: str) -> Thread:
    """A fresh graph for ``mode`` with fresh scripted models, on the shared backend."""
    main = ScriptedChatModel(responder=main_responder(config.main_delay), model_name="bench-main")
    summary = ScriptedChatModel(
        responder=summary_responder(config.summary_delay), model_name="bench-summary"
    )
    graph = build_graph(
        checkpointer=persistence.checkpointer,
        store=persistence.store,
        models=Models(main=main, summary=summary),
        settings=config.settings(mode),
    )
    return Thread(mode, graph, main, summary, thread_id)


# --------------------------------------------------------------------------- running


def run_latency(config: LatencyConfig) -> list[RunResult]:
    """Run every mode ``config.repeats`` times, one after the other, in a rotating order."""
    texts = [user_message(config.seed, turn) for turn in range(config.turns)]
    nonce = uuid.uuid4().hex[:8]
    results: list[RunResult] = []
    with open_backend(config.backend, config.database_uri) as persistence, event_log() as log:
        try:
            for repeat in range(config.repeats):
                shift = repeat % len(MODES)
                for mode in MODES[shift:] + MODES[:shift]:
                    label = mode.replace(" ", "-")
                    warm = open_thread(mode, config, persistence, f"lat-{nonce}-{label}-w{repeat}")
                    for turn in range(WARMUP_TURNS):
                        warm.turn(user_message(config.seed + 1, turn))
                    wait_for_jobs(JOB_DRAIN_S)
                    thread = open_thread(
                        mode, config, persistence, f"lat-{nonce}-{label}-r{repeat}"
                    )
                    gc.collect()
                    log.reset()
                    turns = [thread.turn(text) for text in texts]
                    wait_for_jobs(JOB_DRAIN_S)
                    main_calls = sum(1 for r in thread.main.requests if not is_summary_request(r))
                    results.append(
                        RunResult(
                            mode=mode,
                            repeat=repeat,
                            turns=turns,
                            compactions=thread.version(),
                            summary_calls=thread.summary_calls(),
                            main_calls=main_calls,
                            events=dict(log.counts),
                        )
                    )
        finally:
            # Jobs write to the Store: let them end before it is closed.
            wait_for_jobs(JOB_DRAIN_S)
    return results


# --------------------------------------------------------------------------- report


def _ms(value: float) -> str:
    return "—" if math.isnan(value) else f"{value * 1000:,.0f}"


def _count(value: float) -> str:
    if math.isnan(value):
        return "—"
    return f"{value:,.0f}" if value == int(value) else f"{value:,.1f}"


def _ratio(value: float, base: float) -> float:
    if base == 0 or math.isnan(value) or math.isnan(base):
        return math.nan
    return value / base


_PACKAGES = ("ctxgraph", "langgraph", "langchain-core", "langgraph-checkpoint-postgres")


def machine_line() -> str:
    """Platform, CPU count, Python and the versions of the packages that matter here."""
    packages = ", ".join(f"{name} {_version(name)}" for name in _PACKAGES)
    return (
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs; Python "
        f"{platform.python_version()}; {packages}."
    )


def summarize(results: Sequence[RunResult]) -> dict[str, dict[str, float]]:
    """Per mode, the median over repetitions of each figure."""
    table: dict[str, dict[str, float]] = {}
    for mode in MODES:
        runs = [r.figures() for r in results if r.mode == mode]
        if runs:
            table[mode] = {key: _median([run[key] for run in runs]) for key in runs[0]}
    return table


def ratios(table: dict[str, dict[str, float]]) -> dict[str, float]:
    """The ratios the report quotes, from the medians over repetitions."""
    bg, inline, none = table[BACKGROUND], table[INLINE], table[NONE]
    return {
        "background_p95_over_none_p95": _ratio(bg["p95"], none["p95"]),
        "inline_p95_over_none_p95": _ratio(inline["p95"], none["p95"]),
        "background_max_over_inline_max": _ratio(bg["max"], inline["max"]),
    }


def per_repeat_ratios(results: Sequence[RunResult]) -> list[float]:
    """Background p95 / no-compaction p95 in each repetition."""
    out: list[float] = []
    for repeat in sorted({r.repeat for r in results}):
        runs = {r.mode: r.figures() for r in results if r.repeat == repeat}
        out.append(_ratio(runs[BACKGROUND]["p95"], runs[NONE]["p95"]))
    return out


ROWS: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("Turns", "turns", _count),
    ("Compactions committed", "compactions", _count),
    ("… applied from a background job", "from_job", _count),
    ("… compacted inline", "inline", _count),
    ("Background jobs started", "jobs_started", _count),
    ("… not applied by the last turn", "unapplied", _count),
    ("Summary-model calls", "summary_calls", _count),
    ("Turn latency p50, ms", "p50", _ms),
    ("Turn latency p95, ms", "p95", _ms),
    ("Turn latency max, ms", "max", _ms),
    ("Turn latency mean, ms", "mean", _ms),
    ("Compacting turns, latency p50, ms", "compacting_p50", _ms),
    ("Compacting turns, latency max, ms", "compacting_max", _ms),
    ("Job-starting turns, latency p50, ms", "starting_p50", _ms),
    ("Job-starting turns, latency max, ms", "starting_max", _ms),
)


def report(results: Sequence[RunResult], config: LatencyConfig) -> str:
    """The Markdown report: settings, the table of medians, the ratios and the target."""
    table = summarize(results)
    found = ratios(table)
    lines = [
        "## Background compaction: turn latency",
        "",
        f"Session: {config.turns} user turns of 60–100 words (seed {config.seed}), one "
        f"answer each, no tools; main model {config.main_delay:g} s per call, summary model "
        f"{config.summary_delay:g} s per call (scripted, sleeping).",
        f"Compacting modes: trigger {config.trigger_messages} messages, keep "
        f"{config.keep_messages}; background_fraction {config.background_fraction:g}, "
        f"background_wait_s {Settings().background_wait_s:g}. No compaction: triggers "
        f"{NEVER_TOKENS:,} tokens and {NEVER_MESSAGES:,} messages. Memory off.",
        f"Repetitions: {config.repeats}, the modes one after the other in a rotating "
        f"order, {WARMUP_TURNS} untimed warm-up turns each;"
        f" {backend_label(config.backend, config.database_uri)}.",
        machine_line(),
        "",
        "Medians over repetitions:",
        "",
        "| Metric | " + " | ".join(MODES) + " |",
        "|---|" + "---:|" * len(MODES),
    ]
    for label, key, show in ROWS:
        cells = [show(table[mode][key]) for mode in MODES]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    bg_ratio = found["background_p95_over_none_p95"]
    passed = not math.isnan(bg_ratio) and bg_ratio <= P95_RATIO_TARGET
    each = ", ".join(f"{value:.2f}" for value in per_repeat_ratios(results))
    lines += [
        "",
        "Ratios (of the medians):",
        f"- background p95 / no-compaction p95: {bg_ratio:.2f} (per repetition: {each})",
        f"- inline p95 / no-compaction p95: {found['inline_p95_over_none_p95']:.2f}",
        f"- background max / inline max: {found['background_max_over_inline_max']:.2f}",
        "",
        f"{'PASS' if passed else 'FAIL'} background p95 turn latency: "
        f"{_ms(table[BACKGROUND]['p95'])} ms = {bg_ratio:.2f}x no compaction's "
        f"{_ms(table[NONE]['p95'])} ms (target <= {P95_RATIO_TARGET:.1f}x)",
    ]
    return "\n".join(lines)


def write_json(path: str, results: Sequence[RunResult], config: LatencyConfig) -> None:
    """The configuration, the medians, the ratios and every run's turns, as JSON."""
    table = summarize(results)
    document = {
        "config": asdict(config),
        "machine": machine_line(),
        "medians": table,
        "ratios": ratios(table),
        "target": {"background_p95_over_none_p95": P95_RATIO_TARGET},
        "runs": [
            {
                "mode": r.mode,
                "repeat": r.repeat,
                "figures": r.figures(),
                "events": r.events,
                "turns": [asdict(t) for t in r.turns],
            }
            for r in results
        ],
    }
    Path(path).write_text(json.dumps(document, indent=2, allow_nan=True) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------- command line


LATENCY_OPTIONS = ("latency_turns", "main_delay", "summary_delay", "background_fraction", "json")
"""Destinations of the options ``add_latency_arguments`` adds."""


def add_latency_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, defaults: bool = True
) -> None:
    """Add this benchmark's own options; with ``defaults=False`` they stay unset unless given."""
    d = LatencyConfig()

    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument(
        "--latency-turns",
        type=int,
        default=default(d.turns),
        help=f"latency benchmark: user turns per run (default {d.turns})",
    )
    parser.add_argument(
        "--main-delay",
        type=float,
        default=default(d.main_delay),
        help=f"latency benchmark: seconds per main-model call (default {d.main_delay:g})",
    )
    parser.add_argument(
        "--summary-delay",
        type=float,
        default=default(d.summary_delay),
        help=f"latency benchmark: seconds per summary-model call (default {d.summary_delay:g})",
    )
    parser.add_argument(
        "--background-fraction",
        type=float,
        default=default(d.background_fraction),
        help="latency benchmark: background_fraction of the background mode "
        f"(default {d.background_fraction:g})",
    )
    parser.add_argument(
        "--json",
        default=default(None),
        metavar="PATH",
        help="latency benchmark: also write the figures and every turn as JSON to PATH",
    )


def parse_args(argv: Sequence[str] | None) -> LatencyConfig:
    """The configuration from the command line (``--latency`` is accepted and ignored)."""
    d = LatencyConfig()
    parser = argparse.ArgumentParser(
        prog="python -m bench.compaction_bench --latency",
        description="Turn latency of inline, background and no compaction, side by side.",
    )
    parser.add_argument("--latency", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=d.repeats, help="repetitions (3)")
    parser.add_argument("--seed", type=int, default=d.seed, help="session seed")
    parser.add_argument(
        "--trigger-messages",
        type=int,
        default=d.trigger_messages,
        help=f"message trigger of the compacting modes (default {d.trigger_messages})",
    )
    parser.add_argument(
        "--keep", type=int, default=d.keep_messages, help="kept messages (default 4)"
    )
    add_backend_arguments(parser)
    add_latency_arguments(parser)
    args = parser.parse_args(argv)
    if args.latency_turns < 1 or args.repeats < 1:
        parser.error("--latency-turns and --repeats must be at least 1")
    if args.main_delay < 0 or args.summary_delay < 0:
        parser.error("--main-delay and --summary-delay must be 0 or more")
    config = LatencyConfig(
        turns=args.latency_turns,
        repeats=args.repeats,
        seed=args.seed,
        main_delay=args.main_delay,
        summary_delay=args.summary_delay,
        trigger_messages=args.trigger_messages,
        keep_messages=args.keep,
        background_fraction=args.background_fraction,
        backend=args.backend,
        database_uri=args.database_uri,
        json_path=args.json,
    )
    try:
        for mode in MODES:
            config.settings(mode)
    except ValueError as error:
        parser.error(str(error))
    return config


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print its report (and write the JSON when asked)."""
    config = parse_args(argv)
    results = run_latency(config)
    print(report(results, config))
    if config.json_path:
        write_json(config.json_path, results, config)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
