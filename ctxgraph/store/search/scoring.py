"""Lexical ranking of facts: tokenizer, BM25 index and the time/confidence rerank."""

from __future__ import annotations

import math
import re
import threading
import unicodedata
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, Literal

from ctxgraph.store.search.bm25 import Bm25Index

__all__ = [
    "CONFIDENCE_WEIGHT",
    "DECAY_GRACE_DAYS",
    "DECAY_RATE",
    "FUSED_TIME_FACTOR_FLOOR",
    "TIME_FACTOR_FLOOR",
    "AgeFrom",
    "Bm25Index",
    "age_days",
    "days_between",
    "final_score",
    "fused_time_factor",
    "relevance_scores",
    "score_at_age",
    "time_factor",
    "tokenize",
    "utc_micros",
]

DECAY_GRACE_DAYS = 30
"""Facts younger than this many whole days keep their full text relevance."""

DECAY_RATE = 0.01
"""Per-day exponential decay of text relevance after the grace period."""

TIME_FACTOR_FLOOR = 0.5
"""Lowest value of T(d): age may halve a fact's text relevance, never bury it.

The unbounded factor leaves a one-year-old fact about 4% of its relevance, so a weak match
from last week outranks the memory a query is plainly about. With the floor, an older fact
loses to a newer one only if the newer one has more than half its relevance (give or take
the confidence term, at most 0.2). The floor is reached after about 99 days.
"""

FUSED_TIME_FACTOR_FLOOR = 0.75
"""Lowest age factor in hybrid mode (an embedding model configured).

There every candidate has some relevance (its normalised similarity, up to half the
fused score), so a floor of 0.5 would let a new fact of middling similarity pass an old
fact that matches clearly better. At 0.75 an older fact loses only to one with more than
three quarters of its fused relevance: age reorders near-ties, it never buries a match.
"""

CONFIDENCE_WEIGHT = 0.2
"""Weight of a fact's confidence in the final score."""

AgeFrom = Literal["created", "confirmed"]

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_WORD = re.compile(r"[^\W_]+(?:['.\-][^\W_]+)*")

# Function words that match almost every fact and say nothing about any of them.
_CHINESE_STOP_TEXT = (
    "的 了 在 是 我 你 他 她 它 我们 你们 他们 她们 和 与 及 也 都 就 很 吗 呢 吧 啊 呀 哦 哈 嗯 "
    "这 那 这个 那个 有 没 没有 不 个 一 一个 上 下 中 里 去 来 到 说 要 会 能 可以 什么 怎么 "
    "还 又 着 过 得 地 把 被 让 给 对 从 向 为 以 之 其 或 但 而 等 如果 因为 所以 就是 还是 "
    "一下 时候 自己 觉得 知道 感觉 非常 真的 一些 这些 那些 已经 然后 现在 用户"
)
_ENGLISH_STOP_TEXT = (
    "a an the and or but if of to in on at by for with from as is are was were be been being "
    "it its this that these those i me my you your he him his she her we us our they them "
    "their do does did doing have has had having not no so than too very can will just "
    "what which who whom when where why how all any each more most other some such only "
    "own same into over about again further then once here there would should could user "
    "users"
)
STOP_WORDS = frozenset(_CHINESE_STOP_TEXT.split()) | frozenset(_ENGLISH_STOP_TEXT.split())
"""Tokens dropped from facts and queries alike."""

_jieba_lock = threading.Lock()
_jieba: Any = None


def _segmenter() -> Any:
    """jieba, imported and its bundled dictionary loaded on first use (never the network).

    Only Chinese text needs it, so importing this module stays cheap.
    """
    global _jieba
    if _jieba is None:
        with _jieba_lock:
            if _jieba is None:
                import jieba

                jieba.setLogLevel(60)
                jieba.initialize()
                _jieba = jieba
    return _jieba


def _english_word(word: str) -> str:
    """Casefold and strip a plural or possessive ending, so 'prefers' matches 'prefer'."""
    word = word.casefold()
    if word.endswith("'s"):
        word = word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss") and word.isalpha():
        word = word[:-1]
    return word


def tokenize(text: str) -> list[str]:
    """Index terms of ``text``: jieba search-mode words for Chinese, normalized words otherwise.

    Both facts and queries go through this, so "中文" matches "用户偏好用中文解释技术问题".
    Results are memoized per text, so re-ranking known facts does not re-run jieba.
    """
    return list(_terms(text))


@lru_cache(maxsize=65_536)
def _terms(text: str) -> tuple[str, ...]:
    text = unicodedata.normalize("NFKC", text)
    tokens: list[str] = []
    position = 0
    for run in _CJK.finditer(text):
        tokens.extend(_words(text[position : run.start()]))
        words = _segmenter().cut_for_search(run.group())
        tokens.extend(w for w in words if w not in STOP_WORDS)
        position = run.end()
    tokens.extend(_words(text[position:]))
    return tuple(tokens)


def _words(text: str) -> Iterable[str]:
    for match in _WORD.finditer(text):
        raw = match.group().casefold()
        word = _english_word(raw)
        # The stop list holds whole words: "this" must not survive as "thi".
        if word and raw not in STOP_WORDS and word not in STOP_WORDS:
            yield word


def _utc(moment: datetime | str) -> datetime:
    value = datetime.fromisoformat(moment) if isinstance(moment, str) else moment
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def age_days(moment: datetime | str, now: datetime | None = None) -> int:
    """Whole days from ``moment`` to ``now`` (default: the current time), never negative."""
    current = _utc(now) if now is not None else datetime.now(UTC)
    return max(0, (current - _utc(moment)).days)


def time_factor(days: int, floor: float = TIME_FACTOR_FLOOR) -> float:
    """T(d): 1 within the grace period, then ``max(floor, exp(-0.01 (d - 30)))``."""
    if days < DECAY_GRACE_DAYS:
        return 1.0
    return max(floor, math.exp(-DECAY_RATE * (days - DECAY_GRACE_DAYS)))


def fused_time_factor(days: int) -> float:
    """T(d) in hybrid mode: as :func:`time_factor`, bounded to 0.75..1."""
    return time_factor(days, FUSED_TIME_FACTOR_FLOOR)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DAY = timedelta(days=1)


def utc_micros(moment: datetime | str) -> int:
    """Exact microseconds since the epoch of ``moment`` (a naive time is read as UTC)."""
    if isinstance(moment, str):
        return _iso_micros(moment)
    return (_utc(moment) - _EPOCH) // timedelta(microseconds=1)


@lru_cache(maxsize=65_536)
def _iso_micros(text: str) -> int:
    return (_utc(text) - _EPOCH) // timedelta(microseconds=1)


def days_between(earlier_micros: int, later_micros: int) -> int:
    """Whole days from one ``utc_micros`` value to another, never negative (as ``age_days``)."""
    return max(0, (later_micros - earlier_micros) // (_DAY // timedelta(microseconds=1)))


def score_at_age(raw_bm25: float, confidence: float, days: int, *, fused: bool = False) -> float:
    """``final_score`` of a fact ``days`` whole days old.

    ``fused``: ``raw_bm25`` is a hybrid score (``store.search.hybrid.fuse``), whose age
    factor is :func:`fused_time_factor`.
    """
    factor = fused_time_factor(days) if fused else time_factor(days)
    return -raw_bm25 * factor + CONFIDENCE_WEIGHT * confidence


def final_score(
    raw_bm25: float, confidence: float, created_at: datetime | str, now: datetime | None = None
) -> float:
    """``-raw_bm25 * T(d) + 0.2 * confidence``; ``raw_bm25`` is negative for a match.

    ``raw_bm25`` follows SQLite FTS5's sign (lower is better), so ``-raw_bm25`` is the
    relevance R. Only relevance decays with age, and at most by half (``time_factor``):
    age reorders facts of similar relevance, it does not bury a clearly better match.
    Confidence does not decay.
    """
    return score_at_age(raw_bm25, confidence, age_days(created_at, now))


def relevance_scores(query: str, texts: Sequence[str]) -> list[float]:
    """BM25 relevance of ``query`` to each of ``texts`` (0.0 where nothing matches)."""
    index = Bm25Index({str(i): tokenize(text) for i, text in enumerate(texts)})
    totals = index.scores(tokenize(query))
    return [totals.get(str(i), 0.0) for i in range(len(texts))]
