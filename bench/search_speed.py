"""Search-speed benchmark: ``memory_search`` and ``load_memory`` latency as one user's facts grow.

For each size N, N seeded facts (about 70% Chinese, 30% English, words drawn from a Zipf
distribution over jieba's dictionary and a common English vocabulary) are imported into one
user namespace on Postgres, then it measures:

- the import itself (``MemoryRepository.add_facts``, batches of 500; not a target);
- the cold index build: the first search after the per-process index cache and the
  tokenizer memo are cleared (re-reads the namespace and tokenizes every fact);
- steady-state latency, index warm, with varied queries: ``MemoryRepository.search``
  (top_k=5) and the ``memory_search`` tool function (limit=5, JSON result included);
- ``load_memory`` (``MemoryLoader.load``, auto mode) and the size of its rendered view;
- the index refresh: the next search after one ``add_fact`` (median of a few repeats).

The target is a repository-search p50 of at most 5 ms at 10,000 facts; the process exits 1
when it is missed. Postgres is ``DATABASE_URI`` when set, else an embedded server in a
temporary folder removed at exit.

Run ``python -m bench.search_speed [--sizes 1000,10000,50000] [--queries 200] [--seed 7]``.
"""

from __future__ import annotations

import argparse
import atexit
import math
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any

import jieba
from langchain_core.messages import HumanMessage
from langgraph.prebuilt import ToolRuntime
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore

from ctxgraph.nodes.memory.load import MEMORY_VIEW_KEY, MemoryLoader
from ctxgraph.nodes.memory.search_tool import MemorySearch
from ctxgraph.state import Context, Settings
from ctxgraph.state.tokens import count_text
from ctxgraph.store.memory.exchange import BATCH
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.memory.rules import Category, normalize_text
from ctxgraph.store.persistence.connection import open_persistence
from ctxgraph.store.search import scoring as search_module
from ctxgraph.store.search.index import fact_index_cache
from ctxgraph.store.search.scoring import STOP_WORDS, tokenize

TARGET_SIZE = 10_000
TARGET_P50_MS = 5.0
"""Repository search p50 at ``TARGET_SIZE`` facts must be at most this many milliseconds."""

TOP_K = 5
LOAD_CALLS = 50
REFRESH_REPEATS = 15
WARMUP_QUERIES = 20

CHINESE_SHARE = 0.70
CHINESE_CHARS = (8, 40)
ENGLISH_WORDS = (6, 20)
CHINESE_VOCABULARY = 20_000
ZIPF_EXPONENT = 1.0
QUERY_WORDS = (1, 4)
PHRASE_QUERY_SHARE = 0.30
CATEGORY_WEIGHTS: tuple[tuple[Category, float], ...] = (
    ("context", 0.55),
    ("preference", 0.40),
    ("correction", 0.05),
)
CONFIDENCE = (0.70, 1.00)

_CJK_WORD = re.compile(r"^[\u4e00-\u9fff]{2,}$")

# Common English words, roughly most frequent first (the Zipf rank); stop words included,
# as in real text, and skipped when a query is sampled.
_ENGLISH_TEXT = """
the of and to a in is i that it for you was with on as have be at not this but by from
they we my his or an are would all she there their which one so what about out if up
when more can who will time no just like them me some than people into year your good
could other new use work how our first day also now well way want because any these give
most after make back only over think see know get go say team project work week meeting
data report code review customer manager prefer always never usually often sometimes
morning evening weekend monday friday email call message chat document spreadsheet slide
python java rust typescript sql database server cloud deploy release test bug issue fix
feature design plan budget invoice order payment refund shipment warehouse carrier price
contract client partner vendor office remote home travel flight hotel train city country
language english chinese german french spanish japanese answer question summary detail
short long simple clear formal casual tone style format table list bullet paragraph
number chart graph metric dashboard quarter month deadline schedule calendar reminder
task goal priority risk decision approval policy rule security privacy account password
login access permission role admin user group department finance marketing sales support
engineering product research legal hiring interview training onboarding mentor lead
senior junior colleague friend family child wife husband parent dog cat coffee tea lunch
dinner vegetarian allergy gym running cycling music book movie game hobby holiday birthday
doctor health sleep early late quiet focus break note idea draft version branch merge
commit pipeline build cache index search query model prompt token memory context agent
tool api endpoint latency performance scale cluster node container kubernetes docker linux
windows mac laptop phone screen keyboard mouse printer network vpn storage backup archive
upload download file folder export import backlog sprint standup retro roadmap milestone
launch beta customer survey feedback support ticket escalation incident outage alert
monitor log trace audit compliance tax region europe asia america berlin london tokyo
shanghai beijing singapore paris madrid toronto sydney prefers uses likes needs works
manages owns leads writes reads reviews plans tracks asks expects avoids keeps sends
"""
ENGLISH_VOCABULARY: tuple[str, ...] = tuple(dict.fromkeys(_ENGLISH_TEXT.split()))


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class BenchConfig:
    """What to run."""

    sizes: tuple[int, ...] = (1_000, 10_000, 50_000)
    queries: int = 200
    seed: int = 7


@dataclass(frozen=True)
class Zipf:
    """Words with Zipf weights (rank r drawn with probability ∝ 1 / r^s)."""

    words: tuple[str, ...]
    cum_weights: tuple[float, ...]

    @classmethod
    def of(cls, words: Sequence[str], exponent: float = ZIPF_EXPONENT) -> Zipf:
        weights = (1.0 / (rank + 1) ** exponent for rank in range(len(words)))
        return cls(tuple(words), tuple(accumulate(weights)))

    def draw(self, rng: random.Random, count: int = 1) -> list[str]:
        return rng.choices(self.words, cum_weights=self.cum_weights, k=count)

    def draw_searchable(self, rng: random.Random) -> str:
        """One word that is not a stop word (queries are keywords)."""
        while True:
            word = self.draw(rng)[0]
            if word.casefold() not in STOP_WORDS:
                return word


def chinese_vocabulary(limit: int = CHINESE_VOCABULARY) -> tuple[str, ...]:
    """The ``limit`` most frequent all-Chinese words of 2+ characters in jieba's dictionary."""
    entries: list[tuple[int, str]] = []
    with jieba.get_dict_file() as handle:
        for raw in handle:
            parts = raw.decode("utf-8").split()
            if len(parts) >= 2 and _CJK_WORD.match(parts[0]):
                entries.append((int(parts[1]), parts[0]))
    entries.sort(key=lambda entry: (-entry[0], entry[1]))
    return tuple(word for _, word in entries[:limit])


@dataclass(frozen=True)
class Vocabulary:
    """The two Zipf vocabularies facts and queries are drawn from."""

    chinese: Zipf
    english: Zipf

    @classmethod
    def load(cls) -> Vocabulary:
        return cls(Zipf.of(chinese_vocabulary()), Zipf.of(ENGLISH_VOCABULARY))


def chinese_fact(rng: random.Random, vocab: Vocabulary) -> str:
    low, high = CHINESE_CHARS
    while True:
        target = rng.randint(low, high)
        text = ""
        while len(text) < target:
            text += vocab.chinese.draw(rng)[0]
        if low <= len(text) <= high:
            return text


def english_fact(rng: random.Random, vocab: Vocabulary) -> str:
    words = vocab.english.draw(rng, rng.randint(*ENGLISH_WORDS))
    sentence = " ".join(words)
    return sentence[0].upper() + sentence[1:] + "."


def one_fact(rng: random.Random, vocab: Vocabulary) -> str:
    make = chinese_fact if rng.random() < CHINESE_SHARE else english_fact
    return make(rng, vocab)


def unique_facts(rng: random.Random, vocab: Vocabulary, count: int, seen: set[str]) -> list[str]:
    """``count`` new facts, resampling any whose key text is already in ``seen``."""
    facts: list[str] = []
    while len(facts) < count:
        text = one_fact(rng, vocab)
        identity = normalize_text(text).casefold()
        if identity not in seen:
            seen.add(identity)
            facts.append(text)
    return facts


def keyword_query(rng: random.Random, vocab: Vocabulary) -> str:
    zipf = vocab.chinese if rng.random() < CHINESE_SHARE else vocab.english
    return " ".join(zipf.draw_searchable(rng) for _ in range(rng.randint(*QUERY_WORDS)))


def phrase_query(rng: random.Random, fact: str) -> str:
    """A sub-phrase of ``fact``: 2-8 characters of Chinese, or 2-4 consecutive words."""
    if fact.isascii():
        words = fact.rstrip(".").split()
        size = min(len(words), rng.randint(2, 4))
        start = rng.randint(0, len(words) - size)
        return " ".join(words[start : start + size])
    size = min(len(fact), rng.randint(2, 8))
    start = rng.randint(0, len(fact) - size)
    return fact[start : start + size]


def queries(rng: random.Random, vocab: Vocabulary, facts: Sequence[str], count: int) -> list[str]:
    """Keyword queries from the same distributions, and sub-phrases of stored facts."""
    return [
        phrase_query(rng, rng.choice(facts))
        if rng.random() < PHRASE_QUERY_SHARE
        else keyword_query(rng, vocab)
        for _ in range(count)
    ]


def fact_groups(
    rng: random.Random, facts: Sequence[str]
) -> dict[tuple[Category, float], list[str]]:
    """Facts grouped by (category, confidence), as ``add_facts`` takes one of each per call."""
    names = [name for name, _ in CATEGORY_WEIGHTS]
    weights = [weight for _, weight in CATEGORY_WEIGHTS]
    groups: dict[tuple[Category, float], list[str]] = {}
    for fact in facts:
        category = rng.choices(names, weights=weights)[0]
        confidence = round(rng.uniform(*CONFIDENCE), 2)
        groups.setdefault((category, confidence), []).append(fact)
    return groups


# --------------------------------------------------------------------------- measurement


def timed_ms(call: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = call()
    return (time.perf_counter() - started) * 1000, result


def p95(values: Sequence[float]) -> float:
    """Nearest-rank 95th percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


@dataclass(frozen=True)
class Latencies:
    """Milliseconds per call, and how many calls found something."""

    ms: tuple[float, ...]
    hits: int

    @property
    def p50(self) -> float:
        return statistics.median(self.ms)

    @property
    def p95(self) -> float:
        return p95(self.ms)


@dataclass(frozen=True)
class SizeResult:
    """Everything measured at one size."""

    size: int
    user_id: str
    import_s: float
    cold_build_ms: float
    repository: Latencies
    tool: Latencies
    load: Latencies
    view_tokens: tuple[int, ...]
    refresh_ms: tuple[float, ...]


def import_facts(
    repository: MemoryRepository,
    context: Context,
    groups: dict[tuple[Category, float], list[str]],
) -> float:
    """Seconds to bulk-import every group."""
    started = time.perf_counter()
    for (category, confidence), contents in groups.items():
        repository.add_facts(context, contents, category=category, confidence=confidence)
    return time.perf_counter() - started


def cold_build_ms(repository: MemoryRepository, context: Context, query: str) -> float:
    """The first search after the index cache and the tokenizer memo are cleared."""
    fact_index_cache.clear()
    search_module._terms.cache_clear()
    ms, _ = timed_ms(lambda: repository.search(context, query, top_k=TOP_K))
    return ms


def repository_latencies(
    repository: MemoryRepository, context: Context, texts: Sequence[str]
) -> Latencies:
    ms: list[float] = []
    hits = 0
    for text in texts:
        elapsed, found = timed_ms(lambda t=text: repository.search(context, t, top_k=TOP_K))
        ms.append(elapsed)
        hits += bool(found)
    return Latencies(tuple(ms), hits)


def tool_runtime(store: BaseStore, context: Context) -> ToolRuntime[Context, dict[str, Any]]:
    """What the tool node would inject; ``MemorySearch`` reads only ``store`` and ``context``."""
    return ToolRuntime(
        state={},
        context=context,
        config={},
        stream_writer=lambda _chunk: None,
        tool_call_id="bench",
        store=store,
    )


def tool_latencies(
    store: BaseStore, context: Context, settings: Settings, texts: Sequence[str]
) -> Latencies:
    searcher = MemorySearch(settings)
    runtime = tool_runtime(store, context)
    ms: list[float] = []
    hits = 0
    for text in texts:
        elapsed, found = timed_ms(lambda t=text: searcher.search(t, runtime, limit=TOP_K))
        ms.append(elapsed)
        hits += found != "[]"
    return Latencies(tuple(ms), hits)


def load_latencies(
    store: BaseStore, context: Context, settings: Settings, texts: Sequence[str]
) -> tuple[Latencies, tuple[int, ...]]:
    """``load_memory`` times and the token count of each rendered view."""
    loader = MemoryLoader(settings)
    runtime = Runtime(context=context, store=store)
    ms: list[float] = []
    tokens: list[int] = []
    for text in texts:
        state = {"messages": [HumanMessage(content=text)]}
        elapsed, update = timed_ms(lambda s=state: loader.load(s, runtime))
        ms.append(elapsed)
        tokens.append(count_text(update[MEMORY_VIEW_KEY]))
    return Latencies(tuple(ms), sum(1 for t in tokens if t)), tuple(tokens)


def refresh_ms(
    repository: MemoryRepository, context: Context, new_facts: Sequence[str], query: str
) -> tuple[float, ...]:
    """For each new fact: ``add_fact``, then the time of the next search."""
    times: list[float] = []
    for fact in new_facts:
        repository.add_fact(context, fact, category="context", confidence=0.9)
        elapsed, _ = timed_ms(lambda: repository.search(context, query, top_k=TOP_K))
        times.append(elapsed)
    return tuple(times)


def user_id(size: int, shared: bool) -> str:
    """One user per size; on a shared database a run suffix keeps earlier runs apart."""
    return f"bench-{size}-{uuid.uuid4().hex[:8]}" if shared else f"bench-{size}"


def run_size(
    store: BaseStore, vocab: Vocabulary, size: int, config: BenchConfig, shared: bool
) -> SizeResult:
    """Import ``size`` facts for a new user and measure every path on them."""
    rng = random.Random(f"{config.seed}:{size}")
    seen: set[str] = set()
    facts = unique_facts(rng, vocab, size, seen)
    groups = fact_groups(rng, facts)
    extra = unique_facts(rng, vocab, REFRESH_REPEATS, seen)
    warmup, repo_queries, tool_queries, load_queries, refresh_queries = (
        queries(rng, vocab, facts, count)
        for count in (WARMUP_QUERIES, config.queries, config.queries, LOAD_CALLS, 1)
    )
    context = Context(user_id=user_id(size, shared))
    settings = Settings()
    repository = MemoryRepository(store)

    imported = import_facts(repository, context, groups)
    cold = cold_build_ms(repository, context, warmup[0])
    repository_latencies(repository, context, warmup)
    repo = repository_latencies(repository, context, repo_queries)
    tool = tool_latencies(store, context, settings, tool_queries)
    load, view_tokens = load_latencies(store, context, settings, load_queries)
    refresh = refresh_ms(repository, context, extra, refresh_queries[0])
    return SizeResult(size, context.user_id, imported, cold, repo, tool, load, view_tokens, refresh)


# --------------------------------------------------------------------------- report


def _ms(value: float) -> str:
    return f"{value:,.2f} ms"


def _latency_row(name: str, latencies: Latencies, note: str) -> str:
    return (
        f"| {name} | {_ms(latencies.p50)} | {_ms(latencies.p95)} | {len(latencies.ms)} | {note} |"
    )


def _found(latencies: Latencies) -> str:
    return f"{latencies.hits} of {len(latencies.ms)} found something"


def size_table(result: SizeResult, budget: int) -> list[str]:
    rate = result.size / result.import_s if result.import_s else 0.0
    refresh, tokens = result.refresh_ms, result.view_tokens
    return [
        f"## {result.size:,} facts (user {result.user_id})",
        "",
        "| Measurement | p50 | p95 | Calls | Notes |",
        "|---|---:|---:|---:|---|",
        _latency_row(
            f"memory_search, repository (top_k={TOP_K})",
            result.repository,
            _found(result.repository),
        ),
        _latency_row(
            f"memory_search, tool function (limit={TOP_K})", result.tool, _found(result.tool)
        ),
        _latency_row(
            "load_memory (auto mode)",
            result.load,
            f"view: median {statistics.median(tokens):,.0f} tokens, max {max(tokens):,} "
            f"of a {budget:,}-token budget ({'within' if max(tokens) <= budget else 'OVER'})",
        ),
        f"| Index cold build (first search, caches cleared) | {_ms(result.cold_build_ms)} "
        f"| - | 1 | re-reads and tokenizes {result.size:,} facts |",
        f"| Index refresh (next search after add_fact) | {_ms(statistics.median(refresh))} "
        f"| - | {len(refresh)} | median; max {_ms(max(refresh))} |",
        f"| Import (add_facts, batches of {BATCH}) | - | - | 1 "
        f"| {result.import_s:,.2f} s, {rate:,.0f} facts/s (not a target) |",
        "",
    ]


REFRESH_TARGETS_MS = {10_000: 2.0, 50_000: 5.0}
"""Median refresh (the next search after one write) at these sizes, at most these ms."""


def verdict(results: Sequence[SizeResult]) -> tuple[str, bool]:
    """The verdict lines, and whether the process should succeed."""
    lines: list[str] = []
    passed = True
    judged = [r for r in results if r.size == TARGET_SIZE]
    if not judged:
        lines.append(f"NOT JUDGED repository search p50: size {TARGET_SIZE:,} was not run")
    else:
        p50 = judged[0].repository.p50
        ok = p50 <= TARGET_P50_MS
        passed &= ok
        lines.append(
            f"{'PASS' if ok else 'MISS'} repository search p50 at {TARGET_SIZE:,} facts: "
            f"{p50:.2f} ms (target <= {TARGET_P50_MS:.0f} ms)"
        )
    for result in results:
        target = REFRESH_TARGETS_MS.get(result.size)
        if target is None:
            continue
        median = statistics.median(result.refresh_ms)
        ok = median <= target
        passed &= ok
        lines.append(
            f"{'PASS' if ok else 'MISS'} refresh after one write at {result.size:,} facts: "
            f"{median:.2f} ms median (target <= {target:.0f} ms)"
        )
    return "\n".join(lines), passed


def report(
    results: Sequence[SizeResult], config: BenchConfig, database: str, seconds: float
) -> tuple[str, bool]:
    budget = Settings().memory_budget
    lines = [
        f"# memory_search speed ({config.queries} queries per path, seed {config.seed})",
        "",
        f"Postgres: {database}. One user namespace per size; steady-state figures are "
        f"taken with the index warm, after {WARMUP_QUERIES} warm-up searches.",
        "",
    ]
    for result in results:
        lines.extend(size_table(result, budget))
    line, passed = verdict(results)
    lines += [line, f"Elapsed: {seconds:.1f} s"]
    return "\n".join(lines), passed


# --------------------------------------------------------------------------- entry point


@contextmanager
def postgres() -> Iterator[tuple[str, str]]:
    """``DATABASE_URI``, or an embedded Postgres in a temporary folder removed at exit."""
    configured = os.environ.get("DATABASE_URI", "").strip()
    if configured:
        yield configured, "DATABASE_URI"
        return
    from ctxgraph.store.persistence.embedded import embedded_uri

    home = Path(tempfile.mkdtemp(prefix="ctxgraph-bench-"))
    # Registered before the server starts, so it runs after the server's own stop at exit.
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    yield embedded_uri(home / "home"), "embedded, temporary folder"


def parse_args(argv: Sequence[str] | None) -> BenchConfig:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="1000,10000,50000", help="comma-separated fact counts")
    parser.add_argument("--queries", type=int, default=200, help="timed searches per path")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    try:
        sizes = tuple(int(part) for part in args.sizes.split(",") if part.strip())
    except ValueError:
        parser.error(f"--sizes needs comma-separated whole numbers, got {args.sizes!r}")
    if not sizes or min(sizes) < 1 or args.queries < 1:
        parser.error("--sizes and --queries must be at least 1")
    return BenchConfig(sizes=sizes, queries=args.queries, seed=args.seed)


def main(argv: Sequence[str] | None = None) -> int:
    """Run every size and print the report; exit code 1 when the target is missed."""
    config = parse_args(argv)
    started = time.perf_counter()
    vocab = Vocabulary.load()
    tokenize("预热 warm-up")  # load jieba's dictionary once, outside every measurement
    with postgres() as (uri, database), open_persistence(uri) as persistence:
        shared = database == "DATABASE_URI"
        results = []
        for size in config.sizes:
            results.append(run_size(persistence.store, vocab, size, config, shared))
            print(f"... {size:,} facts measured", file=sys.stderr, flush=True)
    text, passed = report(results, config, database, time.perf_counter() - started)
    print(text)
    sys.stdout.flush()
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
