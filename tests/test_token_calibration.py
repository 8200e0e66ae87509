"""Token calibration: request sizes as the provider bills them, from ``usage_metadata``.

Each answer that reports ``input_tokens`` updates the thread's ``token_calibration``
(reported per locally counted token, smoothed and bounded), and every request size the
triggers compare is the local count times that factor. Without reports, or with a
caller's ``token_counter``, sizes are the local counts as before.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.outputs import ChatResult
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from ctxgraph import Context, CtxGraph, Models, Settings
from ctxgraph.graph import Graph
from ctxgraph.state.calibration import (
    MAX_FACTOR,
    MIN_FACTOR,
    MIN_SAMPLE_TOKENS,
    SMOOTHING,
    calibrated,
    factor_of,
)
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.tokens import MessageCount, TokenCounter
from tests.support.requests import request_builder
from tests.support.scripted import demo_summarizer, main_requests

CONTEXT = Context(user_id="calibration-user")
CONFIG: Any = {"configurable": {"thread_id": "calibrated"}}
WORDS = " ".join(f"word{i}" for i in range(120))

# Local requests grow by about 257 tokens a turn: about 288, 545, 802, 1059, 1316 (no tool
# schemas: a fresh thread binds no built-in tool). Counted locally none reaches 1_400;
# billed at 1.4 times, the fourth (about 1_483) does.
SETTINGS = Settings(
    memory_extraction="off", trigger_tokens=1_400, keep_messages=2, summary_max_tokens=1_000
)


class BillingModel(ScriptedChatModel):
    """Answers "noted." and reports ``ratio`` times the local count of what it received."""

    ratio: float | None = 1.4

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        result = super()._generate(messages, stop, run_manager, **kwargs)
        reply = result.generations[0].message
        if self.ratio is not None and isinstance(reply, AIMessage):
            counter = TokenCounter()
            local = counter.count_messages(messages) + counter.count_tools(kwargs.get("tools", []))
            reported = round(self.ratio * local)
            reply.usage_metadata = {
                "input_tokens": reported,
                "output_tokens": 1,
                "total_tokens": reported + 1,
            }
        return result


def noted(_messages: list[BaseMessage]) -> AIMessage:
    return AIMessage(content="noted.")


def make_graph(
    main: ScriptedChatModel,
    *,
    checkpointer: BaseCheckpointSaver[str] | None = None,
    store: BaseStore | None = None,
    token_counter: MessageCount | None = None,
    settings: Settings = SETTINGS,
) -> Graph:
    root = CtxGraph(
        Models(main=main, summary=demo_summarizer()), settings, token_counter=token_counter
    )
    return root.agent(checkpointer=checkpointer or InMemorySaver(), store=store or InMemoryStore())


def turn(graph: Graph, n: int) -> dict[str, Any]:
    graph.invoke({"messages": [HumanMessage(f"turn {n}: {WORDS}")]}, CONFIG, context=CONTEXT)
    return dict(graph.get_state(CONFIG).values)


def compacted_at(graph: Graph, turns: int) -> int | None:
    """The first of ``turns`` turns after which the thread has a summary."""
    for n in range(1, turns + 1):
        if turn(graph, n).get("summary"):
            return n
    return None


# -- the factor -----------------------------------------------------------------------------


def test_the_first_sample_sets_the_factor_and_later_ones_move_it_by_the_smoothing() -> None:
    first = calibrated(None, "m", 1_000, 1_400)
    assert first == {"model": "m", "factor": 1.4, "samples": 1}
    second = calibrated(first, "m", 1_000, 2_400)
    assert second is not None and second["samples"] == 2
    assert second["factor"] == pytest.approx(1.4 + SMOOTHING * (2.4 - 1.4))
    # Another model starts afresh, and only its own factor applies.
    assert calibrated(second, "other", 1_000, 900) == {
        "model": "other",
        "factor": 0.9,
        "samples": 1,
    }
    assert factor_of(second, "other") == 1.0
    assert factor_of(None, "m") == 1.0


def test_the_factor_is_bounded_and_tiny_requests_are_ignored() -> None:
    assert calibrated(None, "m", 1_000, 50_000) == {
        "model": "m",
        "factor": MAX_FACTOR,
        "samples": 1,
    }
    assert calibrated(None, "m", 1_000, 10) == {"model": "m", "factor": MIN_FACTOR, "samples": 1}
    assert calibrated(None, "m", MIN_SAMPLE_TOKENS - 1, 5_000) is None
    # A stored factor out of bounds (an edited checkpoint) is clamped when read.
    assert factor_of({"model": "m", "factor": 40.0, "samples": 1}, "m") == MAX_FACTOR

    main = BillingModel(responder=noted, ratio=10.0)
    state = turn(make_graph(main), 1)
    assert state["token_calibration"] == {"model": "scripted", "factor": MAX_FACTOR, "samples": 1}


# -- the graph ------------------------------------------------------------------------------


def test_reported_usage_fires_the_trigger_at_the_billed_size() -> None:
    main = BillingModel(responder=noted)
    graph = make_graph(main)
    assert compacted_at(graph, 4) == 4
    calibration = graph.get_state(CONFIG).values["token_calibration"]
    assert calibration["model"] == "scripted"
    assert calibration["factor"] == pytest.approx(1.4, abs=0.01)
    assert calibration["samples"] == 4
    # Counted locally, the same turns never reach the trigger (see the next test); the
    # last request before the compaction was billed below it.
    third = main_requests(main)[2]
    assert round(1.4 * TokenCounter().count_messages(third)) < SETTINGS.trigger_tokens


def test_a_model_that_reports_nothing_keeps_local_counts() -> None:
    main = BillingModel(responder=noted, ratio=None)
    graph = make_graph(main)
    assert compacted_at(graph, 5) is None
    assert "token_calibration" not in graph.get_state(CONFIG).values


def test_a_callers_token_counter_is_not_calibrated() -> None:
    main = BillingModel(responder=noted)
    graph = make_graph(main, token_counter=count_tokens_approximately)
    state = turn(graph, 1)
    assert "token_calibration" not in state
    builder = request_builder([], TokenCounter(count=count_tokens_approximately), model="scripted")
    assert builder.calibration_model is None
    assert builder.factor({"messages": [], "token_calibration": state_of(2.0)}) == 1.0


def state_of(factor: float) -> Any:
    return {"model": "scripted", "factor": factor, "samples": 3}


def test_the_builder_measures_requests_times_the_factor() -> None:
    builder = request_builder([], TokenCounter(), model="scripted")
    messages: list[Any] = [HumanMessage(WORDS, id="h1")]
    local = builder.measure_state({"messages": messages}, SETTINGS).tokens
    calibrated_state: Any = {"messages": messages, "token_calibration": state_of(2.0)}
    assert builder.measure_state(calibrated_state, SETTINGS).tokens == 2 * local
    request = builder.build(calibrated_state, SETTINGS)
    assert builder.measure(request).tokens == 2 * local
    assert builder.local_tokens(request) == local
    assert builder.measure(list(request)).tokens == local  # a plain list: local counts
    # Without the model's name, nothing is calibrated.
    assert request_builder([], TokenCounter()).measure_state(calibrated_state, SETTINGS).tokens == (
        local
    )


def test_the_factor_persists_across_a_rebuild_with_the_same_checkpointer() -> None:
    checkpointer = InMemorySaver()
    store = InMemoryStore()
    first = make_graph(BillingModel(responder=noted), checkpointer=checkpointer, store=store)
    for n in (1, 2, 3):
        assert not turn(first, n).get("summary")
    saved = first.get_state(CONFIG).values["token_calibration"]
    assert saved["samples"] == 3

    main = BillingModel(responder=noted)
    rebuilt = make_graph(main, checkpointer=checkpointer, store=store)
    assert rebuilt.get_state(CONFIG).values["token_calibration"] == saved
    # The rebuilt graph's first turn already measures at the billed size and compacts.
    assert turn(rebuilt, 4).get("summary")
    assert rebuilt.get_state(CONFIG).values["token_calibration"]["samples"] == 4
