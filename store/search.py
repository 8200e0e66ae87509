"""Lexical ranking of facts: tokenizer, BM25 index and the time/confidence rerank."""

from __future__ import annotations

import math
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import Literal

import jieba
import numpy as np
import numpy.typing as npt

__all__ = [
    "CONFIDENCE_WEIGHT",
    "DECAY_GRACE_DAYS",
    "DECAY_RATE",
    "AgeFrom",
    "Bm25Index",
    "age_days",
    "final_score",
    "relevance_scores",
    "time_factor",
    "tokenize",
]

DECAY_GRACE_DAYS = 30
"""Facts younger than this many whole days keep their full text relevance."""

DECAY_RATE = 0.01
"""Per-day exponential decay of text relevance after the grace period."""

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
_jieba_ready = False


def _ensure_jieba() -> None:
    """Load jieba's bundled dictionary once per process; it never touches the network."""
    global _jieba_ready
    if _jieba_ready:
        return
    with _jieba_lock:
        if not _jieba_ready:
            jieba.setLogLevel(60)
            jieba.initialize()
            _jieba_ready = True


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
        _ensure_jieba()
        tokens.extend(w for w in jieba.cut_for_search(run.group()) if w not in STOP_WORDS)
        position = run.end()
    tokens.extend(_words(text[position:]))
    return tuple(tokens)


def _words(text: str) -> Iterable[str]:
    for match in _WORD.finditer(text):
        word = _english_word(match.group())
        if word and word not in STOP_WORDS:
            yield word


def _utc(moment: datetime | str) -> datetime:
    value = datetime.fromisoformat(moment) if isinstance(moment, str) else moment
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def age_days(moment: datetime | str, now: datetime | None = None) -> int:
    """Whole days from ``moment`` to ``now`` (default: the current time), never negative."""
    current = _utc(now) if now is not None else datetime.now(UTC)
    return max(0, (current - _utc(moment)).days)


def time_factor(days: int) -> float:
    """T(d): 1 within the grace period, then ``exp(-0.01 (d - 30))``."""
    if days < DECAY_GRACE_DAYS:
        return 1.0
    return math.exp(-DECAY_RATE * (days - DECAY_GRACE_DAYS))


def final_score(
    raw_bm25: float, confidence: float, created_at: datetime | str, now: datetime | None = None
) -> float:
    """``-raw_bm25 * T(d) + 0.2 * confidence``; ``raw_bm25`` is negative for a match.

    ``raw_bm25`` follows SQLite FTS5's sign (lower is better), so ``-raw_bm25`` is the
    relevance R. Only relevance decays with age; confidence does not.
    """
    return -raw_bm25 * time_factor(age_days(created_at, now)) + CONFIDENCE_WEIGHT * confidence


class Bm25Index:
    """An immutable Okapi BM25 index over tokenized documents, keyed by id.

    Each term's postings are two arrays (documents, weights), so a query costs one vector
    addition per query term and a partial sort of the matches.
    """

    def __init__(
        self, documents: Mapping[str, Sequence[str]], *, k1: float = 1.2, b: float = 0.75
    ) -> None:
        if k1 <= 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25 needs k1 > 0 and 0 <= b <= 1, got k1={k1!r}, b={b!r}")
        self.ids: list[str] = list(documents)
        lengths = [len(documents[i]) for i in self.ids]
        average = (sum(lengths) / len(lengths)) if lengths else 0.0
        docs: dict[str, list[int]] = {}
        weights: dict[str, list[float]] = {}
        for doc, doc_id in enumerate(self.ids):
            norm = k1 * (1 - b + b * lengths[doc] / average) if average else k1
            for term, count in Counter(documents[doc_id]).items():
                docs.setdefault(term, []).append(doc)
                weights.setdefault(term, []).append(count * (k1 + 1) / (count + norm))
        total = len(self.ids)
        self._postings: dict[str, tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]] = {}
        for term, term_docs in docs.items():
            idf = math.log(1 + (total - len(term_docs) + 0.5) / (len(term_docs) + 0.5))
            self._postings[term] = (
                np.asarray(term_docs, dtype=np.intp),
                np.asarray(weights[term], dtype=np.float64) * idf,
            )

    def __len__(self) -> int:
        return len(self.ids)

    def _totals(self, query: Sequence[str]) -> npt.NDArray[np.float64]:
        totals = np.zeros(len(self.ids), dtype=np.float64)
        for term, count in Counter(query).items():
            postings = self._postings.get(term)
            if postings is not None:
                totals[postings[0]] += postings[1] * count
        return totals

    def scores(self, query: Sequence[str]) -> dict[int, float]:
        """BM25 relevance (positive, higher is better) of every document matching ``query``."""
        totals = self._totals(query)
        return {int(doc): float(totals[doc]) for doc in np.flatnonzero(totals)}

    def search(self, query: Sequence[str], limit: int) -> list[tuple[str, float]]:
        """The best ``limit`` matches as ``(id, raw_bm25)``, raw scores negative (FTS5 sign).

        Equal scores are ordered by id, so results do not depend on insertion order.
        """
        if limit <= 0 or not self.ids:
            return []
        totals = self._totals(query)
        matched = np.flatnonzero(totals)
        if len(matched) > limit:
            # Keep every document tied with the limit-th score, then order exactly.
            cutoff = np.partition(totals[matched], len(matched) - limit)[len(matched) - limit]
            matched = matched[totals[matched] >= cutoff]
        best = sorted((-float(totals[d]), self.ids[d]) for d in matched)[:limit]
        return [(doc_id, raw) for raw, doc_id in best]


def relevance_scores(query: str, texts: Sequence[str]) -> list[float]:
    """BM25 relevance of ``query`` to each of ``texts`` (0.0 where nothing matches)."""
    index = Bm25Index({str(i): tokenize(text) for i, text in enumerate(texts)})
    totals = index.scores(tokenize(query))
    return [totals.get(i, 0.0) for i in range(len(texts))]
