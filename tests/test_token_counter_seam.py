"""``CtxGraph(token_counter=...)``: the caller's tokenizer makes every window decision.

``TokenCounter(count=fn)`` counts each message as ``fn([message])`` (cached per id) and a
plain text as ``fn`` of a human message holding it, less an empty one's framing. A graph
built with a counter measures its requests (the compaction triggers), the memory budget,
the result offloading and the ``memory_search`` cap with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph import Context, CtxGraph, Models, Settings
from ctxgraph.graph.builder import compaction_node
from ctxgraph.nodes.memory.render import FACTS_HEADING, render_memory, render_view
from ctxgraph.nodes.memory.search_tool import visible_results
from ctxgraph.nodes.offload.args import long_arguments
from ctxgraph.nodes.offload.inputs import large_inputs
from ctxgraph.nodes.offload.refs import OFFLOAD_KEY
from ctxgraph.nodes.offload.results import over_threshold
from ctxgraph.state.demo_model import demo_models
from ctxgraph.state.messages import ORIGIN_KEY, content_text
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.tokens import REPLY_PRIMING, TokenCounter, count_text
from ctxgraph.store.memory.repository import MemoryRepository

CONTEXT = Context(user_id="counter-user")


class Chars:
    """A tokenizer counting one token per character of content, plus two per message."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, messages: Sequence[BaseMessage]) -> int:
        self.calls += 1
        return sum(len(content_text(m)) + 2 for m in messages)


# -- the counter ---------------------------------------------------------------------------


def test_a_counter_over_a_function_counts_each_message_with_it_and_caches_by_id() -> None:
    chars = Chars()
    counter = TokenCounter(count=chars)
    assert not counter.tiktoken and TokenCounter().tiktoken
    hello = HumanMessage("hello", id="h1")
    assert counter.count_message(hello) == 7
    assert counter.count_message(hello) == 7
    assert chars.calls == 1  # cached under the id
    assert counter.count_message(HumanMessage("hello there", id="h1")) == 13  # recounted
    # A request is the sum of its messages: no reply priming is added to the caller's count.
    assert counter.count_messages([hello, AIMessage("ok", id="a1")]) == 11
    assert TokenCounter().count_messages([hello]) == TokenCounter().count_message(hello) + (
        REPLY_PRIMING
    )
    # A text is the count of a message holding it, less an empty message's framing.
    assert counter.count_text("twelve chars") == 12
    assert counter.count_text("") == 0

    @tool
    def lookup(order_id: str) -> str:
        """Look up an order."""
        return order_id

    assert counter.count_tools([lookup]) > count_text("lookup")  # the schema's characters


def test_a_counter_must_be_callable_and_return_whole_tokens() -> None:
    with pytest.raises(TypeError, match="token_counter must be a callable"):
        TokenCounter(count=42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"whole number of tokens, got 2\.5"):
        TokenCounter(count=lambda messages: 2.5).count_message(HumanMessage("x"))  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="token_counter must be a callable"):
        CtxGraph(demo_models(), token_counter="tiktoken")  # type: ignore[arg-type]


def test_langchains_approximate_counter_plugs_in() -> None:
    counter = TokenCounter(count=count_tokens_approximately)
    text = "word " * 400
    assert counter.count_message(HumanMessage(text, id="m")) == count_tokens_approximately(
        [HumanMessage(text)]
    )
    assert abs(counter.count_text(text) - len(text) / 4) <= 2


# -- the graph's decisions -----------------------------------------------------------------


def test_the_compaction_triggers_count_with_the_callers_counter() -> None:
    def heavy(messages: Sequence[BaseMessage]) -> int:
        return 1_000 * len(messages)  # every message costs a thousand tokens

    settings = Settings(trigger_tokens=6_000, keep_messages=2, memory_extraction="off")

    def run(**extra: Any) -> dict[str, Any]:
        root = CtxGraph(demo_models(), settings, **extra)
        graph = root.agent(checkpointer=InMemorySaver(), store=InMemoryStore())
        config = {"configurable": {"thread_id": "t"}}
        for text in ["I like tea.", "What is 2 + 2?", "What is 3 + 3?", "What is 4 + 4?"]:
            graph.invoke({"messages": [("user", text)]}, config, context=CONTEXT)
        return graph.get_state(config).values

    assert (run().get("compaction") or {}).get("version", 0) == 0  # tiktoken: it all fits
    compacted = run(token_counter=heavy)
    assert compacted["compaction"]["version"] >= 1
    # The node `ctxgraph threads compact` uses measures with the same counter.
    node = compaction_node(models=demo_models(), settings=settings, token_counter=heavy)
    size = node.planner.measure(compacted, settings)
    assert size.tokens % 1_000 == 0


def test_a_tool_result_is_offloaded_by_the_callers_count() -> None:
    @tool
    def status() -> str:
        """Report the service status."""
        return "all green " * 30  # 300 characters, about 60 tiktoken tokens

    def graph_with(**extra: Any) -> Any:
        main = ScriptedChatModel(
            script=[AIMessage("", tool_calls=[{"name": "status", "args": {}, "id": "s1"}]), "ok"]
        )
        root = CtxGraph(
            Models(main=main),
            Settings(memory_extraction="off", offload_tokens=200),
            tools=[status],
            **extra,
        )
        return root.agent(checkpointer=InMemorySaver(), store=InMemoryStore())

    def result(graph: Any) -> ToolMessage:
        values = graph.invoke(
            {"messages": [("user", "status?")]},
            {"configurable": {"thread_id": "o"}},
            context=CONTEXT,
        )
        return next(m for m in values["messages"] if isinstance(m, ToolMessage))

    assert OFFLOAD_KEY not in result(graph_with()).additional_kwargs
    offloaded = result(graph_with(token_counter=Chars()))
    assert offloaded.additional_kwargs[OFFLOAD_KEY]["tokens"] == 300
    assert over_threshold("x" * 10, 5, TokenCounter(count=Chars())) == 10
    assert over_threshold("x" * 10, 5) is None  # ten bytes: never over five tiktoken tokens


def test_the_memory_budget_and_the_search_cap_count_with_the_callers_counter() -> None:
    store = InMemoryStore()
    repo = MemoryRepository(store)
    for n in range(12):
        repo.add_fact(CONTEXT, f"Keeps notebook number {n} on the shelf by the window", key=f"n{n}")
    facts = repo.memory_candidates(CONTEXT, "notebook")
    counter = TokenCounter(count=Chars())
    options: dict[str, Any] = {"mode": "auto", "budget": 400, "correction_budget": 100}
    tiktoken_view = render_view(None, facts, **options)
    chars_view = render_view(None, facts, counter=counter, **options)
    assert tiktoken_view == render_memory(None, facts, ranked=True, **options)
    assert len(chars_view) <= 400 < len(tiktoken_view)
    assert counter.count_text(chars_view) <= 400

    main = ScriptedChatModel(script=["done"])
    graph = CtxGraph(
        Models(main=main),
        Settings(memory_extraction="off", memory_budget=400),
        token_counter=Chars(),
    ).agent(checkpointer=InMemorySaver(), store=store)
    graph.invoke(
        {"messages": [("user", "notebook")]}, {"configurable": {"thread_id": "m"}}, context=CONTEXT
    )
    view = next(m for m in main.requests[0] if m.additional_kwargs.get(ORIGIN_KEY) == "memory")
    assert view.content == chars_view
    assert FACTS_HEADING in chars_view

    few = visible_results(repo.search(CONTEXT, "notebook", top_k=10), 300, counter)
    many = visible_results(repo.search(CONTEXT, "notebook", top_k=10), 300)
    assert len(few) <= 300 < len(many)


def test_input_and_argument_offloading_can_count_with_the_callers_counter() -> None:
    counter = TokenCounter(count=Chars())
    settings = Settings(offload_input_tokens=1_000, offload_args_min_tokens=500)
    text = "short words " * 100  # 1,200 characters, about 200 tiktoken tokens
    user = HumanMessage(text, id="u1")
    assert large_inputs([user], settings, 100_000) == []
    (found,) = large_inputs([user], settings, 100_000, counter=counter)
    assert found.tokens == 1_200
    call = AIMessage("", id="a1", tool_calls=[{"name": "save", "args": {"text": text}, "id": "c1"}])
    assert long_arguments([call], settings) == []
    (argument,) = long_arguments([call], settings, counter=counter)
    assert argument.tokens == 1_200
