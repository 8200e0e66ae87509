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

PATCH_LIMIT = 32
"""Above this many documents in one ``update``, the cached term arrays they touch are
dropped (the next query that needs one rebuilds it) instead of patched one by one."""


class Bm25Index:
    """BM25 over documents keyed by id; ``add`` and ``remove`` touch only their terms.

    Postings are kept per term as ``{slot: term frequency}`` and turned into numpy arrays
    when a query first needs them, so a query costs a few vector operations per query
    term. Length normalization and idf are computed at query time, which keeps updates
    local: a single change patches the cached arrays of its own terms and its slot of the
    document lengths, so the next query rebuilds nothing. Removed documents leave a free
    slot until the index is more than half empty, when it is packed again. numpy is
    imported by the first query, not with the module.
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
        self._bulk = False
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
        # Document length per slot, from the first query on; grown by doubling.
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
        self._patch(counts, slot, added=True)

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
        self._patch(counts, slot, added=False)
        if len(self._slots) * 2 < len(self._ids):
            self._pack()

    def update(self, added: Mapping[str, Sequence[str]], removed: Iterable[str]) -> None:
        """Remove ``removed`` and (re-)index ``added``."""
        removed = list(removed)
        self._bulk = len(added) + len(removed) > PATCH_LIMIT
        try:
            for doc_id in removed:
                self.remove(doc_id)
            for doc_id, tokens in added.items():
                self.add(doc_id, tokens)
        finally:
            self._bulk = False

    def _patch(self, counts: Counter[str], slot: int, *, added: bool) -> None:
        """Bring what queries cached up to date with ``slot`` being added or removed."""
        lengths = self._length_array
        if lengths is not None:
            if slot >= len(lengths):
                import numpy as np

                grown = np.zeros(max(2 * len(lengths), slot + 1), dtype=np.float64)
                grown[: len(lengths)] = lengths
                self._length_array = lengths = grown
            lengths[slot] = self._lengths[slot]
        cached = [term for term in counts if term in self._arrays]
        if not cached:
            return
        if self._bulk:
            for term in cached:
                del self._arrays[term]
            return
        import numpy as np

        for term in cached:
            slots, values = self._arrays[term]
            if term not in self._postings:
                del self._arrays[term]
            elif added:
                count = float(counts[term])
                self._arrays[term] = (np.append(slots, slot), np.append(values, count))
            else:
                keep = slots != slot
                self._arrays[term] = (slots[keep], values[keep])

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

    def scores_for(self, query: Sequence[str], ids: Iterable[str]) -> dict[str, float]:
        """BM25 relevance (positive; 0.0 when no term matches) of each indexed id of ``ids``.

        Exactly what :meth:`scores` would give those documents, computed from their own
        term counts: the cost is per id and query term, never a pass over the index.
        Unknown ids are left out.
        """
        slots = {doc_id: self._slots[doc_id] for doc_id in ids if doc_id in self._slots}
        if not slots:
            return {}
        documents = len(self._slots)
        average = self._total_length / documents
        k1, b = self._k1, self._b
        weights: list[tuple[str, float]] = []
        for term, repeats in Counter(query).items():
            postings = self._postings.get(term)
            if postings:
                idf = math.log(1 + (documents - len(postings) + 0.5) / (len(postings) + 0.5))
                weights.append((term, idf * repeats))
        found: dict[str, float] = {}
        for doc_id, slot in slots.items():
            counts, total = self._terms[slot], 0.0
            for term, weight in weights:
                count = counts.get(term)
                if count:
                    # The same operations, in the same order, as ``_totals``: equal floats.
                    norm = k1 * (1 - b + b * self._lengths[slot] / average) if average else k1
                    total += weight * count * (k1 + 1) / (count + norm)
            found[doc_id] = total
        return found

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
