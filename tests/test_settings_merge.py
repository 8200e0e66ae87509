"""Per-run settings merge onto the graph's: a run overrides only the fields it sets."""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import pickle
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from pydantic import TypeAdapter

from ctxgraph.graph import Graph, build_graph
from ctxgraph.graph.cli.memory import search_memory
from ctxgraph.nodes.model import RequestTooLargeError
from ctxgraph.nodes.settings import effective_settings
from ctxgraph.state import Context, Models, Settings, SettingsError
from ctxgraph.state.demo_replies import demo_memory
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.tokens import TokenCounter, count_text
from ctxgraph.store.memory.queue import MemoryQueue
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.memory.rules import Decision, FactCandidate, ProfileUpdate
from tests.support.scripted import demo_summarizer, is_summary_request

RUN_PROMPT = "Run prompt: answer in one line."
UNRELATED = Settings(system_prompt=RUN_PROMPT)
"""A run's override of a field no test below is about."""


def run_context(user: str = "u1", settings: Any = UNRELATED) -> Context:
    return Context(user_id=user, settings=settings)


def config(thread: str = "t1") -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


# -- 1. the merge itself --------------------------------------------------------------------

BASE = Settings(trigger_tokens=5_000, memory_mode="tool", system_prompt="Graph prompt.")


def test_fields_the_run_does_not_set_keep_the_graphs_values() -> None:
    merged = UNRELATED.merged_onto(BASE)
    assert merged.system_prompt == RUN_PROMPT
    assert merged.trigger_tokens == 5_000
    assert merged.memory_mode == "tool"
    assert merged == dataclasses.replace(BASE, system_prompt=RUN_PROMPT)


def test_setting_a_field_to_its_default_value_still_overrides() -> None:
    override = Settings(trigger_tokens=18_000)
    assert override == Settings()  # equal to the defaults ...
    assert override.explicit_fields == {"trigger_tokens"}
    merged = override.merged_onto(BASE)
    assert merged.trigger_tokens == 18_000  # ... and still given
    assert (merged.memory_mode, merged.system_prompt) == ("tool", "Graph prompt.")


def test_settings_given_nothing_change_nothing() -> None:
    assert Settings().explicit_fields == frozenset()
    assert Settings().merged_onto(BASE) is BASE
    assert effective_settings(Context(user_id="u1"), BASE) is BASE
    assert effective_settings(Context(user_id="u1", settings=Settings()), BASE) is BASE


def test_a_mapping_override_sets_only_its_keys() -> None:
    context = Context(user_id="u1", settings={"trigger_tokens": 18_000})  # as a server sends it
    assert context.settings is not None
    assert context.settings.explicit_fields == {"trigger_tokens"}
    merged = effective_settings(context, BASE)
    assert merged.trigger_tokens == 18_000
    assert (merged.memory_mode, merged.system_prompt) == ("tool", "Graph prompt.")
    # Context(**dict), as LangGraph coerces a server's context, takes the same path.
    served = Context(**{"user_id": "u1", "settings": {"system_prompt": RUN_PROMPT}})
    assert effective_settings(served, BASE).trigger_tokens == 5_000


def test_from_mapping_and_from_env_mark_what_they_were_given() -> None:
    assert Settings.from_mapping({"memory_mode": "off"}).explicit_fields == {"memory_mode"}
    environ = {"CTXGRAPH_TRIGGER_TOKENS": "18000", "CTXGRAPH_MEMORY_BUDGET": " "}
    assert Settings.from_env(environ).explicit_fields == {"trigger_tokens"}


def test_dataclasses_replace_gives_every_field() -> None:
    replaced = dataclasses.replace(Settings(), system_prompt=RUN_PROMPT)
    assert replaced.explicit_fields == {f.name for f in dataclasses.fields(Settings)}
    assert replaced.merged_onto(BASE).trigger_tokens == 18_000


def test_settings_without_a_record_count_the_fields_off_their_defaults() -> None:
    # Built without __init__, as pydantic does or an old pickle was: no record of names.
    validated = TypeAdapter(Settings).validate_python({"trigger_tokens": 5_000})
    assert validated.explicit_fields == {"trigger_tokens"}
    bare = copy.copy(Settings(system_prompt=RUN_PROMPT, trigger_tokens=18_000))
    del bare.__dict__["_explicit_fields"]
    assert bare.explicit_fields == {"system_prompt"}
    assert bare.merged_onto(BASE).trigger_tokens == 5_000


def test_the_merged_settings_record_both_sides() -> None:
    merged = UNRELATED.merged_onto(BASE)
    assert merged.explicit_fields == {"trigger_tokens", "memory_mode", "system_prompt"}


@pytest.mark.parametrize(
    "duplicate",
    [
        copy.copy,
        copy.deepcopy,
        *[
            (lambda s, p=protocol: pickle.loads(pickle.dumps(s, protocol=p)))
            for protocol in range(pickle.HIGHEST_PROTOCOL + 1)
        ],
    ],
    ids=["copy", "deepcopy", *[f"pickle{p}" for p in range(pickle.HIGHEST_PROTOCOL + 1)]],
)
def test_copies_and_pickles_keep_the_explicit_fields(duplicate: Callable[[Any], Any]) -> None:
    original = Settings(trigger_tokens=18_000, read_only_tools=("probe",))
    copied = duplicate(original)
    assert copied is not original
    assert copied == original
    assert copied.explicit_fields == {"trigger_tokens", "read_only_tools"}
    assert copied.merged_onto(BASE).trigger_tokens == 18_000
    assert copied.merged_onto(BASE).read_only_tools == ("probe",)
    # A Context holding them copies along.
    context = duplicate(Context(user_id="u1", settings=original))
    assert effective_settings(context, BASE).trigger_tokens == 18_000


def test_equality_hash_and_repr_are_field_based() -> None:
    given, defaulted = Settings(trigger_tokens=18_000), Settings()
    assert given == defaulted
    assert hash(given) == hash(defaulted)
    assert repr(given) == repr(defaulted)
    assert dataclasses.asdict(given) == dataclasses.asdict(defaulted)
    assert "explicit" not in repr(given)
    assert Settings(trigger_tokens=5_000) != defaulted
    assert {given, defaulted} == {defaulted}
    assert "_explicit_fields" not in {f.name for f in dataclasses.fields(Settings)}


def test_equal_overrides_with_different_given_fields_do_not_share_a_merge() -> None:
    given, defaulted = Settings(trigger_tokens=18_000), Settings()
    for _ in range(2):  # both orders, with the cache warm the second time
        assert defaulted.merged_onto(BASE).trigger_tokens == 5_000
        assert given.merged_onto(BASE).trigger_tokens == 18_000
    assert given.merged_onto(BASE).trigger_tokens == 18_000
    assert defaulted.merged_onto(BASE).trigger_tokens == 5_000


def test_merges_are_cached() -> None:
    first = Settings(system_prompt=RUN_PROMPT).merged_onto(BASE)
    again = Settings(system_prompt=RUN_PROMPT).merged_onto(BASE)  # an equal, new override
    assert again is first


def test_an_invalid_combination_names_the_run_the_graph_and_the_fields() -> None:
    base = Settings(trigger_tokens=4_000, summary_max_tokens=500)
    override = Settings(summary_max_tokens=4_500)  # valid on its own (trigger 18000)
    with pytest.raises(SettingsError) as raised:
        override.merged_onto(base)
    message = str(raised.value)
    assert "the run's settings" in message
    assert "graph's build-time settings" in message
    assert "which sets summary_max_tokens" in message
    assert "summary_max_tokens (4500) must be below trigger_tokens (4000)" in message
    with pytest.raises(SettingsError, match="combined with the graph's"):
        effective_settings(Context(user_id="u1", settings={"summary_max_tokens": 4_500}), base)


def test_an_invalid_combination_fails_the_run_before_any_model_call() -> None:
    main = ScriptedChatModel(script=["never"])
    graph = build_graph(
        models=Models(main=main),
        settings=Settings(trigger_tokens=4_000, summary_max_tokens=500, memory_extraction="off"),
    )
    context = Context(user_id="u1", settings={"summary_max_tokens": 4_500})
    with pytest.raises(SettingsError, match=r"which sets summary_max_tokens\) combined"):
        graph.invoke({"messages": [("user", "hi")]}, context=context)
    assert main.calls == 0


# -- 2. the graph honours build-time values a run does not override ---------------------------


def main_requests(model: ScriptedChatModel) -> list[list[BaseMessage]]:
    return [r for r in model.requests if not is_summary_request(r)]


def sizes(model: ScriptedChatModel) -> list[tuple[int, int]]:
    """(tokens with tool schemas, messages) of each main-model request."""
    counter = TokenCounter()
    found: list[tuple[int, int]] = []
    for messages, tools in zip(model.requests, model.tool_requests, strict=True):
        if not is_summary_request(messages):
            schemas = count_text(json.dumps(tools, ensure_ascii=False, sort_keys=True))
            found.append((counter.count_messages(messages) + schemas, len(messages)))
    return found


def user_text(n: int) -> str:
    """About 200 tokens of one user turn."""
    return f"Turn {n}: " + " ".join(
        f"the shipment of crate C-{n}-{i} left the dock" for i in range(16)
    )


# The messages trigger is the only low one; the tokens trigger the only low one; the
# fraction of a known window the only low one. A fresh thread binds no built-in tool; the
# first compaction binds read_history (about 130 tokens), so a fold must save more than it.
TRIGGERS = {
    "trigger_messages": {"trigger_messages": 6, "keep_messages": 2},
    "trigger_tokens": {
        "trigger_tokens": 1_500,
        "summary_max_tokens": 300,
        "ledger_max_tokens": 100,
        "keep_messages": 2,
    },
    "trigger_fraction": {"context_window": 3_000, "trigger_fraction": 0.5, "keep_messages": 2},
}


@pytest.mark.parametrize("built", list(TRIGGERS.values()), ids=list(TRIGGERS))
def test_build_time_triggers_compact_a_run_that_overrides_something_else(
    built: dict[str, Any],
) -> None:
    settings = Settings(memory_extraction="off", memory_mode="off", **built)
    main = ScriptedChatModel(responder=lambda messages: AIMessage("Noted."))
    summarizer = demo_summarizer()
    graph = build_graph(
        models=Models(main=main, summary=summarizer),
        settings=settings,
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
    )
    for n in range(1, 9):
        graph.invoke({"messages": [("user", user_text(n))]}, config(), context=run_context())

    assert all(request[0].content == RUN_PROMPT for request in main_requests(main))
    state = graph.get_state(config()).values
    assert state.get("compaction") is not None
    assert summarizer.calls >= 1
    assert len(state["messages"]) < 16  # folded; the default triggers would keep all 16
    # Every request the main model received stayed below the build-time triggers.
    token_limit = min(
        settings.trigger_tokens,
        int(settings.trigger_fraction * 3_000) if settings.trigger_fraction else 10**9,
    )
    assert max(tokens for tokens, _ in sizes(main)) < token_limit
    # A compaction that would not shrink the request is skipped, so a request may reach
    # the messages trigger once; the default (60) would let it grow to 16.
    assert max(count for _, count in sizes(main)) <= settings.trigger_messages


def test_build_time_context_window_refuses_a_run_that_overrides_something_else() -> None:
    model = ScriptedChatModel(script=["never"])
    # No tool schema is bound yet, and a long user message would be offloaded: the run's
    # system prompt is what does not fit.
    graph = build_graph(models=Models(main=model), settings=Settings(context_window=256))
    context = Context(user_id="u", settings={"system_prompt": "word " * 400})
    with pytest.raises(RequestTooLargeError, match=r"over the main model's input window of 256"):
        graph.invoke({"messages": [("user", "hi")]}, context=context)
    assert model.calls == 0


def memory_graph(main: ScriptedChatModel, store: InMemoryStore, **built: Any) -> Graph:
    memory = ScriptedChatModel(responder=lambda ms: demo_memory(str(ms[-1].content)))
    return build_graph(
        models=Models(main=main, memory=memory),
        settings=Settings(**built),
        checkpointer=InMemorySaver(),
        store=store,
    )


def profile_update(content: str) -> ProfileUpdate:
    return ProfileUpdate(
        section="work_context",
        content=content,
        scope="user",
        durability="durable",
        authority="descriptive",
        confidence=0.9,
        evidence_message_id="m1",
        evidence_text=content,
    )


def test_build_time_tool_mode_keeps_facts_out_of_the_view() -> None:
    store = InMemoryStore()
    main = ScriptedChatModel(script=["ok"])
    graph = memory_graph(main, store, memory_mode="tool", memory_extraction="off")
    context = run_context()
    repo = MemoryRepository(store)
    repo.add_fact(context, "Prefers green tea in the afternoon.", key="tea")
    repo.update_profile(context, profile_update("Maintains the billing service."))

    graph.invoke({"messages": [("user", "Which tea do I like?")]}, config(), context=context)

    view = graph.get_state(config()).values["memory_view"]
    assert "billing service" in view
    assert "green tea" not in view  # tool mode: facts are left to memory_search
    assert main.requests[0][0].content == RUN_PROMPT


def test_build_time_memory_budget_bounds_the_view() -> None:
    store = InMemoryStore()
    main = ScriptedChatModel(script=["ok"])
    graph = memory_graph(
        main, store, memory_budget=60, correction_budget=10, memory_extraction="off"
    )
    context = run_context()
    MemoryRepository(store).add_facts(
        context, [f"Drinks tea number {i} with a slice of lemon every morning." for i in range(12)]
    )

    graph.invoke({"messages": [("user", "tea?")]}, config(), context=context)

    view = graph.get_state(config()).values["memory_view"]
    assert "Drinks tea number" in view
    assert count_text(view) <= 60  # the default budget (2000) would hold all twelve facts


def test_build_time_deferred_extraction_queues_instead_of_extracting() -> None:
    store = InMemoryStore()
    graph = memory_graph(ScriptedChatModel(script=["ok"]), store, memory_extraction="deferred")
    context = run_context()

    graph.invoke({"messages": [("user", "I prefer tea over coffee.")]}, config(), context=context)

    assert MemoryRepository(store).list_facts(context) == []
    (pending,) = MemoryQueue(store).due(quiet_seconds=0)
    assert [row["content"] for row in pending.rows if row["role"] == "user"] == [
        "I prefer tea over coffee."
    ]


def test_build_time_confidence_threshold_keeps_unsure_facts_out() -> None:
    store = InMemoryStore()
    # The demo extractor is 0.8 sure of each fact: below this graph's threshold.
    graph = memory_graph(ScriptedChatModel(script=["ok"]), store, confidence_threshold=0.9)
    context = run_context()

    graph.invoke({"messages": [("user", "I prefer tea over coffee.")]}, config(), context=context)

    assert MemoryRepository(store).list_facts(context) == []


def search_call(query: str, limit: int = 5) -> AIMessage:
    call = {"name": "memory_search", "args": {"query": query, "limit": limit}, "id": "s1"}
    return AIMessage(content="", tool_calls=[call])


def reconfirmed_and_unconfirmed(repo: MemoryRepository, context: Context) -> None:
    """'tea' was stored 90 days ago and re-confirmed 2 days ago; 'coffee' is 40 days old."""
    now = datetime.now(UTC)
    repo.add_fact(context, "Prefers tea", key="drink_tea", created_at=now - timedelta(days=90))
    # Confirming stamps confirmed_at; the tea fact keeps its creation date.
    tea = FactCandidate(
        key="drink_tea",
        content="Prefers tea",
        category="preference",
        scope="user",
        durability="durable",
        authority="descriptive",
        confidence=0.9,
        evidence_message_id="m1",
        evidence_text="Prefers tea",
    )
    accepted = Decision(accepted=True, target="user", reason="test")
    confirmed = repo.remember(
        context, tea, accepted, thread_id="t0", now=now - timedelta(days=2), confirmed=True
    )
    assert confirmed is not None and confirmed.confirmed_at > confirmed.created_at
    repo.add_fact(
        context, "Prefers coffee", key="drink_coffee", created_at=now - timedelta(days=40)
    )


async def search_through_graph(
    graph: Graph, context: Context, *, asynchronous: bool
) -> list[dict[str, Any]]:
    message = {"messages": [("user", "What do I drink?")]}
    if asynchronous:
        result = await graph.ainvoke(message, config(), context=context)
    else:
        result = graph.invoke(message, config(), context=context)
    tool_message = result["messages"][2]
    assert isinstance(tool_message, ToolMessage) and tool_message.status == "success"
    rows: list[dict[str, Any]] = json.loads(str(tool_message.content))
    return rows


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize(
    ("age_from", "order"),
    [("confirmed", ["drink_tea", "drink_coffee"]), ("created", ["drink_coffee", "drink_tea"])],
)
async def test_build_time_memory_age_from_ranks_the_memory_search_tool(
    age_from: str, order: list[str], asynchronous: bool
) -> None:
    store = InMemoryStore()
    main = ScriptedChatModel(script=[search_call("prefers"), "done"])
    graph = memory_graph(
        main, store, memory_mode="tool", memory_extraction="off", memory_age_from=age_from
    )
    context = run_context()
    reconfirmed_and_unconfirmed(MemoryRepository(store), context)

    rows = await search_through_graph(graph, context, asynchronous=asynchronous)

    assert [row["id"] for row in rows] == order
    assert main.requests[0][0].content == RUN_PROMPT


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
async def test_build_time_search_budget_caps_the_memory_search_tool(asynchronous: bool) -> None:
    store = InMemoryStore()
    main = ScriptedChatModel(script=[search_call("lemon tea", limit=10), "done"])
    graph = memory_graph(
        main, store, memory_mode="tool", memory_extraction="off", memory_search_max_tokens=60
    )
    context = run_context()
    repo = MemoryRepository(store)
    for i in range(10):  # about 40 tokens a result
        repo.add_fact(context, f"Drinks lemon tea {i}.", key=f"tea{i}")

    rows = await search_through_graph(graph, context, asynchronous=asynchronous)

    assert len(rows) == 1  # the default budget (900) would return all ten
    assert count_text(json.dumps(rows, ensure_ascii=False)) <= 60


def test_a_run_can_still_override_the_build_time_age_from() -> None:
    store = InMemoryStore()
    main = ScriptedChatModel(script=[search_call("prefers"), "done"])
    graph = memory_graph(
        main, store, memory_mode="tool", memory_extraction="off", memory_age_from="confirmed"
    )
    context = run_context(settings={"memory_age_from": "created"})
    reconfirmed_and_unconfirmed(MemoryRepository(store), context)
    result = graph.invoke({"messages": [("user", "What do I drink?")]}, config(), context=context)
    rows = json.loads(str(result["messages"][2].content))
    assert [row["id"] for row in rows] == ["drink_coffee", "drink_tea"]


@pytest.mark.parametrize(
    ("settings", "order"),
    [
        (Settings(memory_age_from="confirmed"), ["drink_tea", "drink_coffee"]),
        (Settings(), ["drink_coffee", "drink_tea"]),
        (None, ["drink_coffee", "drink_tea"]),
    ],
    ids=["confirmed", "default", "none"],
)
def test_the_cli_memory_search_ages_facts_by_the_cli_settings(
    settings: Settings | None, order: list[str]
) -> None:
    store = InMemoryStore()
    context = Context(user_id="u1")
    reconfirmed_and_unconfirmed(MemoryRepository(store), context)
    out = io.StringIO()
    assert search_memory(store, context, "prefers", 5, out, settings) == 0
    keys = [line.split("- ", 1)[1].split(":", 1)[0] for line in out.getvalue().splitlines()]
    assert keys == order
