"""An Okapi BM25 index over tokenized documents that can be updated in place."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Arrays = tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]

__all__ = ["Bm25Index"]


class Bm25Index:
    """BM25 over documents keyed by id; ``add`` and ``remove`` touch only their terms.

    Postings are kept per term as ``{slot: term frequency}`` and turned into numpy arrays
    when a query first needs them, so a query costs a few vector operations per query
    term. Length normalization and idf are computed at query time, which keeps updates
    local. Removed documents leave a free slot until the index is more than half empty,
    when it is packed again. numpy is imported by the first query, not with the module.
    """

    def __init__(
        self,
        documents: Mapping[str, Sequence[str]] | None = None,
        *,
        k1: float = 1.2,
        b: float = 0.75,
    ) -> None:
        if k1 <= 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25 needs k1 > 0 and 0 <= b <= 1, got k1={k1!r}, b={b!r}")
        self._k1 = k1
        self._b = b
        self._reset()
        for doc_id, tokens in (documents or {}).items():
            self.add(doc_id, tokens)

    def _reset(self) -> None:
        self._ids: list[str | None] = []
        self._slots: dict[str, int] = {}
        self._terms: list[Counter[str]] = []
        self._lengths: list[int] = []
        self._total_length = 0
        self._postings: dict[str, dict[int, int]] = {}
        self._arrays: dict[str, Arrays] = {}
        self._length_array: npt.NDArray[np.float64] | None = None

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._slots

    def add(self, doc_id: str, tokens: Sequence[str]) -> None:
        """Index ``tokens`` under ``doc_id``, replacing what was indexed there before."""
        if doc_id in self._slots:
            self.remove(doc_id)
        slot = len(self._ids)
        counts = Counter(tokens)
        self._ids.append(doc_id)
        self._slots[doc_id] = slot
        self._terms.append(counts)
        self._lengths.append(len(tokens))
        self._total_length += len(tokens)
        for term, count in counts.items():
            self._postings.setdefault(term, {})[slot] = count
        self._changed(counts)

    def remove(self, doc_id: str) -> None:
        """Forget ``doc_id``; unknown ids are ignored."""
        slot = self._slots.pop(doc_id, None)
        if slot is None:
            return
        counts = self._terms[slot]
        for term in counts:
            postings = self._postings[term]
            del postings[slot]
            if not postings:
                del self._postings[term]
        self._total_length -= self._lengths[slot]
        self._ids[slot] = None
        self._terms[slot] = Counter()
        self._lengths[slot] = 0
        self._changed(counts)
        if len(self._slots) * 2 < len(self._ids):
            self._pack()

    def update(self, added: Mapping[str, Sequence[str]], removed: Iterable[str]) -> None:
        """Remove ``removed`` and (re-)index ``added``."""
        for doc_id in removed:
            self.remove(doc_id)
        for doc_id, tokens in added.items():
            self.add(doc_id, tokens)

    def _changed(self, terms: Iterable[str]) -> None:
        for term in terms:
            self._arrays.pop(term, None)
        self._length_array = None

    def _pack(self) -> None:
        live = [(doc_id, self._terms[slot]) for doc_id, slot in self._slots.items()]
        self._reset()
        for doc_id, counts in live:
            self.add(doc_id, list(counts.elements()))

    def _term_arrays(self, term: str) -> Arrays | None:
        import numpy as np

        arrays = self._arrays.get(term)
        if arrays is None:
            postings = self._postings.get(term)
            if not postings:
                return None
            slots = np.fromiter(postings.keys(), dtype=np.intp, count=len(postings))
            counts = np.fromiter(postings.values(), dtype=np.float64, count=len(postings))
            arrays = self._arrays[term] = (slots, counts)
        return arrays

    def _totals(self, query: Sequence[str]) -> npt.NDArray[np.float64]:
        import numpy as np

        totals = np.zeros(len(self._ids), dtype=np.float64)
        documents = len(self._slots)
        if not documents:
            return totals
        if self._length_array is None:
            self._length_array = np.asarray(self._lengths, dtype=np.float64)
        average = self._total_length / documents
        k1, b = self._k1, self._b
        for term, repeats in Counter(query).items():
            arrays = self._term_arrays(term)
            if arrays is None:
                continue
            slots, counts = arrays
            idf = math.log(1 + (documents - len(slots) + 0.5) / (len(slots) + 0.5))
            norm = k1 * (1 - b + b * self._length_array[slots] / average) if average else k1
            totals[slots] += idf * repeats * counts * (k1 + 1) / (counts + norm)
        return totals

    def scores(self, query: Sequence[str]) -> dict[str, float]:
        """BM25 relevance (positive, higher is better) of every document matching ``query``."""
        import numpy as np

        totals = self._totals(query)
        return {self._id(int(slot)): float(totals[slot]) for slot in np.flatnonzero(totals)}

    def _id(self, slot: int) -> str:
        doc_id = self._ids[slot]
        assert doc_id is not None, "a removed slot never scores"
        return doc_id

    def search(
        self, query: Sequence[str], limit: int, *, ties: bool = False
    ) -> list[tuple[str, float]]:
        """The best ``limit`` matches as ``(id, raw_bm25)``, raw scores negative (FTS5 sign).

        Equal scores are ordered by id, so results do not depend on insertion order. With
        ``ties``, documents tied with the last one are kept too, so a rerank can choose
        among them by something other than the id.
        """
        if limit <= 0 or not self._slots:
            return []
        import numpy as np

        totals = self._totals(query)
        matched = np.flatnonzero(totals)
        if len(matched) > limit:
            # Keep every document tied with the limit-th score, then order exactly.
            cutoff = np.partition(totals[matched], len(matched) - limit)[len(matched) - limit]
            matched = matched[totals[matched] >= cutoff]
        best = sorted((-float(totals[slot]), self._id(int(slot))) for slot in matched)
        if not ties:
            best = best[:limit]
        return [(doc_id, raw) for raw, doc_id in best]
