"""create_agent with ctxgraph's middleware keeps what ctxgraph's own graph keeps.

The fidelity benchmark's quick mode runs both hosts on the same session, models and
settings: every probe has the same outcome after every compaction, and none is lost.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bench.fidelity_bench import (
    QUICK,
    SCRIPTED,
    SCRIPTED_MIDDLEWARE,
    SHARED_CTXGRAPH,
    SHARED_MIDDLEWARE,
    BenchConfig,
    Score,
    scripted_scores,
    shared_prose_scores,
    totals,
)


def _by_system(scores: list[Score]) -> dict[str, Score]:
    return {score.system: score for score in scores}


@pytest.mark.parametrize(
    ("run", "graph", "middleware"),
    [
        (scripted_scores, SCRIPTED, SCRIPTED_MIDDLEWARE),
        (shared_prose_scores, SHARED_CTXGRAPH, SHARED_MIDDLEWARE),
    ],
    ids=["demo summaries", "shared prose"],
)
def test_the_middleware_keeps_every_probe_the_graph_keeps(
    run: Callable[[BenchConfig], list[Score]], graph: str, middleware: str
) -> None:
    scores = _by_system(run(QUICK))
    ours, theirs = scores[graph], scores[middleware]
    assert len(ours.rows) == QUICK.compactions
    # The per-probe outcome table of every compaction, and what the requests cost.
    assert theirs.rows == ours.rows
    assert theirs.tokens == ours.tokens
    assert totals(theirs) == totals(ours)
    assert (theirs.records, theirs.degraded) == (ours.records, ours.degraded)
    assert totals(theirs)["lost"] == 0
    assert totals(theirs)["request"] > 0
