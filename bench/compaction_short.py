"""Short messages at a message trigger: background compaction must not make a turn wait.

The case a small local model met: every message is a few words, so the compaction record
(ledger and summary) is larger in tokens than the messages it folds. ctxgraph used to
refuse such a compaction after paying for its summary ("the request would not shrink"),
and in background mode to discard the job's result, so the turns at the trigger waited
for inline summaries that were thrown away too. Now the size check follows the trigger
that fired (the message trigger bounds the message count), and no summary is asked for
whose result the check would refuse.

One session of ``--turns`` short user turns (40 by default; "Where is order B-0012?")
runs through ctxgraph in background mode and, for contrast, inline mode, each on a new
thread, after two untimed warm-up turns: ``trigger_messages=20``, ``keep_messages=4``,
``background_fraction`` 0.7 (the default), memory off. The scripted main model sleeps
``--main-delay`` seconds per call (0.6 by default) and answers in one short sentence; the
scripted summary model sleeps ``--summary-delay`` (1.5 by default). A background job
starts when the request reaches 14 messages, three turns before the trigger, so with
these delays its result is stored before the trigger's turn. A turn's latency is the wall
time of its ``graph.stream`` call. The summary model notes which thread each call ran in,
so the report counts summary calls made inline (the turn waited for them) apart from those
of background jobs, and the ``compaction.*`` events say how many results were applied,
discarded or skipped.

The report gives, per mode, the median over repetitions of: the turns' median and max
latency and their ratio, compactions, summary calls inline and in jobs, and job results
applied and discarded. The target: in background mode no turn is slower than 1.5 times
the median turn, in every repetition.

Run ``python -m bench.compaction_bench --short-messages [--turns 40] [--repeats 3]
[--main-delay 0.6] [--summary-delay 1.5] [--backend memory]`` (or ``python -m
bench.compaction_short`` with the same options); the embedded Postgres is the default
backend.
"""

from __future__ import annotations

import argparse
import gc
import logging
import math
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from bench.common import Backend, add_backend_arguments, backend_label, open_backend
from bench.common import median as _median
from bench.compaction_latency import (
    BACKGROUND,
    INLINE,
    JOB_DRAIN_S,
    WARMUP_TURNS,
    EventLog,
    LatencyConfig,
    Thread,
    Turn,
    event_log,
    is_summary_request,
    machine_line,
    summary_answer,
)
from ctxgraph.graph import build_graph
from ctxgraph.nodes.compaction.background import wait_for_jobs
from ctxgraph.state import Models, Settings
from ctxgraph.state.messages import content_text
from ctxgraph.state.scripted_model import ScriptedChatModel

MODES = (BACKGROUND, INLINE)

MAX_OVER_MEDIAN_TARGET = 1.5
"""Largest accepted ratio of background mode's slowest turn to its median turn."""

JOB_THREAD = "ctxgraph-compaction-"
"""Background jobs run in threads named ``ctxgraph-compaction-<thread id>``."""

_ASKS = (
    "Where is order {id}?",
    "Has {id} shipped yet?",
    "Cancel {id}, please.",
    "Is {id} paid?",
    "Ship {id} to my office.",
    "Any news on {id}?",
    "Check {id} again.",
    "Hold {id} until Monday.",
)


@dataclass(frozen=True)
class ShortConfig:
    """What to run."""

    turns: int = 40
    repeats: int = 3
    main_delay: float = 0.6
    """Seconds the scripted main model sleeps per call."""
    summary_delay: float = 1.5
    """Seconds the scripted summary model sleeps per call."""
    trigger_messages: int = 20
    keep_messages: int = 4
    backend: Literal["postgres", "memory"] = "postgres"
    database_uri: str | None = None

    @property
    def latency(self) -> LatencyConfig:
        """The latency benchmark's configuration with this one's trigger, keep and delays."""
        return LatencyConfig(
            turns=self.turns,
            repeats=self.repeats,
            main_delay=self.main_delay,
            summary_delay=self.summary_delay,
            trigger_messages=self.trigger_messages,
            keep_messages=self.keep_messages,
            background_fraction=Settings().background_fraction,
            backend=self.backend,
            database_uri=self.database_uri,
        )


def user_message(turn: int) -> str:
    """User turn ``turn``'s message: a few words about one order."""
    order = f"{'ABCDEFGH'[turn % 8]}-{turn:04d}"
    return _ASKS[turn % len(_ASKS)].format(id=order)


def short_answer(messages: Sequence[BaseMessage]) -> AIMessage:
    """One short sentence about the latest user message."""
    asked = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
    return AIMessage(content=f"Done: {content_text(asked) if asked is not None else 'noted'}")


def main_responder(delay: float) -> Callable[[list[BaseMessage]], AIMessage]:
    """The main model: sleeps ``delay`` s, then answers (a summary call as the summary model)."""

    def respond(messages: list[BaseMessage]) -> AIMessage:
        time.sleep(delay)
        return summary_answer(messages) if is_summary_request(messages) else short_answer(messages)

    return respond


class RefusalLog(EventLog):
    """``EventLog``, with the refusal line (``compaction skipped, ...``) counted apart.

    ``compaction.skipped`` (no summary asked for) is followed by that line too, so the
    refusals after a summary call are ``refused - skipped``.
    """

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("compaction skipped"):
            self.counts["refused"] = self.counts.get("refused", 0) + 1
            return
        super().emit(record)


@contextmanager
def refusal_log() -> Iterator[EventLog]:
    """``event_log()`` counting with a ``RefusalLog``."""
    with event_log() as plain:
        logger = logging.getLogger("ctxgraph.compaction")
        logger.removeHandler(plain)
        counting = RefusalLog()
        logger.addHandler(counting)
        try:
            yield counting
        finally:
            logger.removeHandler(counting)


class SummaryCalls:
    """The summary model: sleeps, answers with the demo summary, notes where it ran."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.threads: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, messages: list[BaseMessage]) -> AIMessage:
        with self._lock:
            self.threads.append(threading.current_thread().name)
        time.sleep(self.delay)
        return summary_answer(messages)

    @property
    def in_job(self) -> int:
        """Calls made by background jobs."""
        return sum(name.startswith(JOB_THREAD) for name in self.threads)

    @property
    def inline(self) -> int:
        """Calls made in a step: the turn waited for them."""
        return len(self.threads) - self.in_job


@dataclass
class ShortRun:
    """One mode's run in one repetition."""

    mode: str
    repeat: int
    turns: list[Turn]
    compactions: int
    inline_calls: int
    job_calls: int
    events: dict[str, int] = field(default_factory=dict)

    def figures(self) -> dict[str, float]:
        """The figures the report quotes (medians over repetitions are taken of these)."""
        latencies = [t.seconds for t in self.turns]
        p50, slowest = _median(latencies), max(latencies, default=math.nan)
        return {
            "p50": p50,
            "max": slowest,
            "max_over_p50": slowest / p50 if p50 else math.nan,
            "compactions": self.compactions,
            "inline_calls": self.inline_calls,
            "job_calls": self.job_calls,
            "applied": self.events.get("applied", 0),
            "discarded": self.events.get("discarded", 0),
            "refused": self.events.get("refused", 0) - self.events.get("skipped", 0),
            "skipped": self.events.get("skipped", 0),
        }


def open_thread(
    mode: str, config: ShortConfig, persistence: Backend, thread_id: str
) -> tuple[Thread, SummaryCalls]:
    """A fresh graph for ``mode`` with fresh scripted models, on the shared backend."""
    main = ScriptedChatModel(responder=main_responder(config.main_delay), model_name="bench-main")
    calls = SummaryCalls(config.summary_delay)
    summary = ScriptedChatModel(responder=calls, model_name="bench-summary")
    graph = build_graph(
        checkpointer=persistence.checkpointer,
        store=persistence.store,
        models=Models(main=main, summary=summary),
        settings=config.latency.settings(mode),
    )
    return Thread(mode, graph, main, summary, thread_id), calls


def run_short(config: ShortConfig) -> list[ShortRun]:
    """Run both modes ``config.repeats`` times, one after the other."""
    nonce = uuid.uuid4().hex[:8]
    results: list[ShortRun] = []
    with open_backend(config.backend, config.database_uri) as persistence, refusal_log() as log:
        try:
            for repeat in range(config.repeats):
                for mode in MODES:
                    label = mode.replace(" ", "-")
                    warm, _ = open_thread(
                        mode, config, persistence, f"sh-{nonce}-{label}-w{repeat}"
                    )
                    for turn in range(WARMUP_TURNS):
                        warm.turn(user_message(1_000 + turn))
                    wait_for_jobs(JOB_DRAIN_S)
                    thread, calls = open_thread(
                        mode, config, persistence, f"sh-{nonce}-{label}-r{repeat}"
                    )
                    gc.collect()
                    log.reset()
                    turns = [thread.turn(user_message(n)) for n in range(config.turns)]
                    wait_for_jobs(JOB_DRAIN_S)
                    results.append(
                        ShortRun(
                            mode=mode,
                            repeat=repeat,
                            turns=turns,
                            compactions=thread.version(),
                            inline_calls=calls.inline,
                            job_calls=calls.in_job,
                            events=dict(log.counts),
                        )
                    )
        finally:
            wait_for_jobs(JOB_DRAIN_S)
    return results


def _ms(value: float) -> str:
    return "—" if math.isnan(value) else f"{value * 1000:,.0f}"


def _count(value: float) -> str:
    if math.isnan(value):
        return "—"
    return f"{value:,.0f}" if value == int(value) else f"{value:,.1f}"


def _ratio(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.2f}"


ROWS: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("Turn latency median, ms", "p50", _ms),
    ("Turn latency max, ms", "max", _ms),
    ("Max / median", "max_over_p50", _ratio),
    ("Compactions committed", "compactions", _count),
    ("Summary calls inline (a turn waited)", "inline_calls", _count),
    ("Summary calls in background jobs", "job_calls", _count),
    ("Job results applied", "applied", _count),
    ("Job results discarded", "discarded", _count),
    ("Compactions refused after their summary call", "refused", _count),
    ("Compactions skipped before a summary call", "skipped", _count),
)


def summarize(results: Sequence[ShortRun]) -> dict[str, dict[str, float]]:
    """Per mode, the median over repetitions of each figure."""
    table: dict[str, dict[str, float]] = {}
    for mode in MODES:
        runs = [r.figures() for r in results if r.mode == mode]
        if runs:
            table[mode] = {key: _median([run[key] for run in runs]) for key in runs[0]}
    return table


def report(results: Sequence[ShortRun], config: ShortConfig) -> str:
    """The Markdown report: settings, the table of medians and the target."""
    table = summarize(results)
    ratios = [r.figures()["max_over_p50"] for r in results if r.mode == BACKGROUND]
    passed = bool(ratios) and all(r <= MAX_OVER_MEDIAN_TARGET for r in ratios)
    each = ", ".join(_ratio(r) for r in ratios)
    lines = [
        "## Short messages at a message trigger: turn latency",
        "",
        f'Session: {config.turns} user turns of a few words ("{user_message(12)}"), one '
        f"short answer each, no tools; main model {config.main_delay:g} s per call, summary "
        f"model {config.summary_delay:g} s per call (scripted, sleeping).",
        f"Trigger {config.trigger_messages} messages, keep {config.keep_messages}; "
        f"background mode with background_fraction {Settings().background_fraction:g} (the "
        "default). Memory off.",
        f"Repetitions: {config.repeats}, {WARMUP_TURNS} untimed warm-up turns per mode; "
        f"{backend_label(config.backend, config.database_uri)}.",
        machine_line(),
        "",
        "Medians over repetitions:",
        "",
        "| Metric | " + " | ".join(MODES) + " |",
        "|---|" + "---:|" * len(MODES),
    ]
    for label, key, show in ROWS:
        lines.append(f"| {label} | " + " | ".join(show(table[m][key]) for m in MODES) + " |")
    lines += [
        "",
        f"{'PASS' if passed else 'FAIL'} background mode: slowest turn / median turn "
        f"{each or '—'} per repetition (target <= {MAX_OVER_MEDIAN_TARGET:.1f}x)",
    ]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> ShortConfig:
    """The configuration from the command line (``--short-messages`` is accepted and ignored)."""
    d = ShortConfig()
    parser = argparse.ArgumentParser(
        prog="python -m bench.compaction_bench --short-messages",
        description="Turn latency of background and inline compaction with short messages.",
    )
    parser.add_argument("--short-messages", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--turns", type=int, default=d.turns, help=f"user turns ({d.turns})")
    parser.add_argument("--repeats", type=int, default=d.repeats, help=f"({d.repeats})")
    parser.add_argument(
        "--main-delay",
        type=float,
        default=d.main_delay,
        help=f"seconds per main-model call (default {d.main_delay:g})",
    )
    parser.add_argument(
        "--summary-delay",
        type=float,
        default=d.summary_delay,
        help=f"seconds per summary-model call (default {d.summary_delay:g})",
    )
    add_backend_arguments(parser)
    args = parser.parse_args(argv)
    if args.turns < 1 or args.repeats < 1:
        parser.error("--turns and --repeats must be at least 1")
    if args.main_delay < 0 or args.summary_delay < 0:
        parser.error("--main-delay and --summary-delay must be 0 or more")
    return ShortConfig(
        turns=args.turns,
        repeats=args.repeats,
        main_delay=args.main_delay,
        summary_delay=args.summary_delay,
        backend=args.backend,
        database_uri=args.database_uri,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print its report."""
    config = parse_args(argv)
    print(report(run_short(config), config))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
