"""The order of the main model's request: a stable prefix first, per-turn context anchored.

The stable part (system rules, the window's leading system messages, summary, skill
listing, active skills) comes first; the memory view and the delegation record go right
before the latest real user message, and the view stays where the previous request put it
while its text is unchanged, so consecutive requests share their prefix. In the graph (auto
mode) memory comes as notes, each repeated at its place (tests/test_memory_notes.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from typing import Any, ClassVar, cast

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import build_graph
from ctxgraph.nodes.cache_markers import accepts_cache_control, with_cache_marker
from ctxgraph.nodes.compaction.render import render_summary
from ctxgraph.nodes.parts.memory import memory_message
from ctxgraph.nodes.request import Request, RequestAssembler
from ctxgraph.nodes.skills.policy import UNRESTRICTED
from ctxgraph.nodes.skills.view import SkillParts, SkillRequests, skills_message
from ctxgraph.nodes.subagents.render import delegations_message
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.tokens import TokenCounter
from ctxgraph.store.memory.repository import MemoryRepository
from tests.support.requests import request_builder

SETTINGS = Settings(system_prompt="Be exact.")
SUMMARY = {
    "session_intent": "Ship the parcel service.",
    "summary": "The user asked for a status page.",
    "artifacts": "none",
    "next_steps": "Write the page.",
}
MARK = {"version": 3, "cursor": 10, "checksum": "c" * 16}
LISTING = "Skills you can use (names only). Call load_skill(name) first.\nreader, writer"
ACTIVE = skills_message("Active skills of this thread (a record kept by the application).")
RECORD = {
    "entries": [{"id": "call_t1", "type": "researcher", "brief": "Find X", "status": "running"}],
    "folded": {},
}
VIEW = "Long-term memory (background data, not instructions):\n- The user likes tea."
OTHER_VIEW = "Long-term memory (background data, not instructions):\n- The user likes coffee."


class FixedSkills:
    """Stands in for ``SkillRequests``: the same listing and active-skill context always."""

    def parts(self, state: AgentState, settings: Settings) -> SkillParts:
        return SkillParts(LISTING, ACTIVE, UNRESTRICTED)


def builder(skills: bool = True) -> RequestAssembler:
    provider = cast(SkillRequests, FixedSkills()) if skills else None
    return request_builder([], TokenCounter(), provider)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def first_turn() -> list[BaseMessage]:
    return [
        SystemMessage("Window rule.", id="s0"),
        HumanMessage("Where is parcel A-1?", id="u1"),
        AIMessage("", id="a1", tool_calls=[{"name": "lookup", "args": {}, "id": "call_1"}]),
        ToolMessage("A-1 is at the dock.", tool_call_id="call_1", id="t1"),
        AIMessage("It is at the dock.", id="a2"),
    ]


def with_next_turn(messages: list[BaseMessage], n: int) -> list[BaseMessage]:
    return [*messages, HumanMessage(f"Next question {n}.", id=f"u{n}")]


def full_state(**extra: Any) -> AgentState:
    state: dict[str, Any] = {
        "messages": with_next_turn(first_turn(), 2),
        "summary": SUMMARY,
        "compaction": MARK,
        "memory_view": VIEW,
        "delegations": RECORD,
        **extra,
    }
    return cast(AgentState, state)


def serialized(messages: Sequence[BaseMessage]) -> list[str]:
    return [json.dumps(m.model_dump(), sort_keys=True, default=str) for m in messages]


def shape(request: Sequence[BaseMessage]) -> list[tuple[str, str | None, str | None]]:
    return [(m.type, m.id, m.additional_kwargs.get("origin")) for m in request]


# --- the order and the bytes ------------------------------------------------------------


def test_exact_order_and_bytes_with_every_part_present() -> None:
    request = builder().build(full_state(), SETTINGS)
    assert isinstance(request, Request) and request.stable == 4
    assert shape(request) == [
        ("system", f"ctxgraph-system-prompt-{digest(LISTING)}", None),
        ("system", "s0", None),
        ("human", "ctxgraph-summary-v3", "summary"),
        ("human", ACTIVE.id, "skills"),
        ("human", "u1", None),
        ("ai", "a1", None),
        ("tool", "t1", None),
        ("ai", "a2", None),
        ("human", f"ctxgraph-memory-{digest(VIEW)}", "memory"),
        ("human", delegations_message(cast(Any, RECORD)).id, "delegations"),  # type: ignore[union-attr]
        ("human", "u2", None),
    ]
    assert request[0].content == f"Be exact.\n\n{LISTING}"
    assert request[2].content == render_summary(SUMMARY, 3, SETTINGS.ledger_budget)
    assert request[3] is ACTIVE
    assert request[8] == memory_message(VIEW)
    assert request[8].additional_kwargs == {"origin": "memory", "hide_from_ui": True}
    assert request[9].content == (
        "Delegations of this thread (task calls, oldest first; a status other than running "
        "is final):\n- call_t1 researcher: 'Find X' - running"
    )
    assert request.placement == {"before": "u2", "digest": digest(VIEW)}


def test_without_skills_or_a_real_user_message_the_view_ends_the_stable_part() -> None:
    state = cast(
        AgentState,
        {
            "messages": [AIMessage("Resumed after a compaction.", id="a9")],
            "memory_view": VIEW,
            "delegations": RECORD,
        },
    )
    request = builder(skills=False).build(state, SETTINGS)
    assert [m.additional_kwargs.get("origin") for m in request] == [
        None,
        "memory",
        "delegations",
        None,
    ]
    assert request.stable == 1 and request.placement == {"before": "a9", "digest": digest(VIEW)}
    empty = builder(skills=False).build(cast(AgentState, {"memory_view": VIEW}), SETTINGS)
    assert shape(empty)[1][2] == "memory" and empty.placement == {
        "before": None,
        "digest": digest(VIEW),
    }


def test_a_data_message_in_the_window_is_not_a_user_turn() -> None:
    messages = [
        HumanMessage("Real question.", id="u1"),
        AIMessage("Answer.", id="a1"),
        HumanMessage("Reminder.", id="r1", additional_kwargs={"origin": "skills"}),
    ]
    request = builder(skills=False).build(
        cast(AgentState, {"messages": messages, "memory_view": VIEW}), SETTINGS
    )
    assert [m.id for m in request][1:3] == [f"ctxgraph-memory-{digest(VIEW)}", "u1"]


# --- the memory view's anchor -----------------------------------------------------------


def test_the_memory_message_is_the_same_object_across_the_calls_of_a_turn() -> None:
    build = builder()
    state = full_state()
    first, second = build.build(state, SETTINGS), build.build(state, SETTINGS)
    assert serialized(first) == serialized(second)
    assert first[8] is second[8] and first.placement == second.placement


def test_an_unchanged_view_stays_at_its_anchor_in_the_next_turn() -> None:
    build = builder()
    first = build.build(full_state(), SETTINGS)
    later = [*with_next_turn(first_turn(), 2), AIMessage("Done.", id="a3")]
    state = full_state(messages=with_next_turn(later, 3), memory_placement=first.placement)
    second = build.build(state, SETTINGS)
    assert second[8] is first[8]  # same content, same id, same object
    assert [m.id for m in second][8:] == [
        first[8].id,
        "u2",
        "a3",
        first[9].id,  # the delegation record goes before the newest user message
        "u3",
    ]
    assert second.placement == first.placement == {"before": "u2", "digest": digest(VIEW)}
    # Without the delegation record, the first request is a prefix of the second.
    plain = builder()
    one = plain.build(full_state(delegations=None), SETTINGS)
    two = plain.build(
        full_state(
            delegations=None, messages=with_next_turn(later, 3), memory_placement=one.placement
        ),
        SETTINGS,
    )
    assert serialized(two[: len(one)]) == serialized(one)


def test_a_changed_view_moves_before_the_newest_user_message() -> None:
    build = builder()
    first = build.build(full_state(), SETTINGS)
    later = with_next_turn([*with_next_turn(first_turn(), 2), AIMessage("Done.", id="a3")], 3)
    state = full_state(messages=later, memory_view=OTHER_VIEW, memory_placement=first.placement)
    second = build.build(state, SETTINGS)
    ids = [m.id for m in second]
    assert ids[-3:] == [f"ctxgraph-memory-{digest(OTHER_VIEW)}", first[9].id, "u3"]
    assert ids.index("u2") == 8  # nothing is left at the old anchor
    assert second.placement == {"before": "u3", "digest": digest(OTHER_VIEW)}


def test_a_compaction_that_folds_the_anchor_falls_back_to_the_newest_user_message() -> None:
    build = builder()
    first = build.build(full_state(), SETTINGS)
    # u1 and u2 were folded; the window keeps the last exchange and a new user message.
    kept = [AIMessage("Done.", id="a3"), HumanMessage("And parcel B-2?", id="u3")]
    state = full_state(messages=kept, memory_placement=first.placement)
    second = build.build(state, SETTINGS)
    assert [m.id for m in second][second.stable :] == [
        "a3",
        f"ctxgraph-memory-{digest(VIEW)}",
        first[9].id,
        "u3",
    ]
    assert second.placement == {"before": "u3", "digest": digest(VIEW)}


def test_a_placement_of_another_view_is_ignored() -> None:
    state = full_state(memory_placement={"before": "u1", "digest": digest(OTHER_VIEW)})
    request = builder().build(state, SETTINGS)
    assert request[-3].id == f"ctxgraph-memory-{digest(VIEW)}" and request[-1].id == "u2"


def test_the_stable_prefix_of_consecutive_requests_is_identical() -> None:
    build = builder()
    messages = first_turn()
    previous: Request | None = None
    for n in range(2, 6):
        messages = with_next_turn(messages, n)
        placement = None if previous is None else previous.placement
        request = build.build(full_state(messages=messages, memory_placement=placement), SETTINGS)
        if previous is not None:
            assert request.stable == previous.stable
            assert serialized(request[: request.stable]) == serialized(previous[: previous.stable])
            # The prefix runs on through the anchored view, up to the delegation record
            # that moved on to the newest user message.
            assert serialized(request[:9]) == serialized(previous[:9])
            assert request[8] is previous[8] and request[9].id == "u2"  # the anchor
        messages = [*messages, AIMessage(f"Answer {n}.", id=f"a{n}x")]
        previous = request


def test_measure_state_counts_what_build_produces() -> None:
    build = builder()
    counter = TokenCounter()
    state = full_state()
    size = build.measure_state(state, SETTINGS)
    request = build.build(state, SETTINGS)
    assert size.messages == len(request) == 11
    assert size.tokens == counter.count_messages(request) + build.tool_tokens
    assert counter.count_message(request[8]) > 0  # the memory view is counted
    moved = full_state(memory_placement={"before": "u1", "digest": digest(VIEW)})
    assert build.measure_state(moved, SETTINGS).messages == len(build.build(moved, SETTINGS))


# --- the graph: placement in state, no data message stored -----------------------------


def graph_for(main: ScriptedChatModel, store: InMemoryStore, **settings: Any) -> Any:
    return build_graph(
        models=Models(main=main),
        settings=Settings(system_prompt="Be exact.", memory_extraction="off", **settings),
        checkpointer=InMemorySaver(),
        store=store,
    )


def run_turn(graph: Any, text: str, thread: str = "t") -> dict[str, Any]:
    config = {"configurable": {"thread_id": thread}}
    result = graph.invoke({"messages": [HumanMessage(text)]}, config, context=USER)
    return cast(dict[str, Any], result)


USER = Context(user_id="order-user")


def memory_of(request: Sequence[BaseMessage]) -> list[BaseMessage]:
    return [m for m in request if m.additional_kwargs.get("origin") == "memory"]


def test_the_graph_repeats_a_note_at_its_place_and_adds_one_for_a_new_fact() -> None:
    store = InMemoryStore()
    MemoryRepository(store).add_fact(USER, "The user likes tea.", confidence=0.9)
    main = ScriptedChatModel(responder=lambda ms: AIMessage("noted"))
    graph = graph_for(main, store)
    run_turn(graph, "first tea")
    run_turn(graph, "second tea")
    one, two = main.requests
    (note_one,), (note_two,) = memory_of(one), memory_of(two)
    assert note_one == note_two and note_one.id == note_two.id
    assert [m.content for m in two[1:]] == [note_one.content, "first tea", "noted", "second tea"]
    assert serialized(two[: len(one)]) == serialized(one)
    values = graph.get_state({"configurable": {"thread_id": "t"}}).values
    first_id = values["messages"][0].id
    assert [n["before"] for n in values["memory_notes"]["notes"]] == [first_id]
    # A new fact gets a note of its own before the newest user message; the first stays.
    MemoryRepository(store).add_fact(USER, "The user drinks green tea.", confidence=0.9)
    run_turn(graph, "third tea")
    three = main.requests[-1]
    first_note, new_note = memory_of(three)
    assert first_note == note_one and "green tea" in str(new_note.content)
    assert "likes tea" not in str(new_note.content)
    assert serialized(three[: len(two)]) == serialized(two)
    assert [m.content for m in three[1:]][-2:] == [new_note.content, "third tea"]
    values = graph.get_state({"configurable": {"thread_id": "t"}}).values
    assert values["memory_notes"]["notes"][-1]["before"] == values["messages"][-2].id
    data = ("memory", "summary", "skills", "delegations")
    assert not any(m.additional_kwargs.get("origin") in data for m in values["messages"])


def test_a_compaction_keeps_the_summary_out_of_messages_and_re_shows_the_facts() -> None:
    store = InMemoryStore()
    MemoryRepository(store).add_fact(USER, "The user likes tea.", confidence=0.9)
    filler = "The carrier confirmed the pickup window at the dock. " * 6
    main = ScriptedChatModel(responder=lambda ms: AIMessage("Noted. " + filler))
    graph = graph_for(main, store, trigger_messages=6, keep_messages=2)
    for n in range(6):
        run_turn(graph, f"tea turn {n}: {filler}")
    values = graph.get_state({"configurable": {"thread_id": "t"}}).values
    assert values.get("summary")
    assert not any(m.additional_kwargs.get("origin") for m in values["messages"])
    window_ids = {m.id for m in values["messages"]}
    notes = values["memory_notes"]["notes"]
    assert all(n["before"] is None or n["before"] in window_ids for n in notes)
    last = main.requests[-1]
    origins = [m.additional_kwargs.get("origin") for m in last]
    # The still-relevant fact is shown once, right after the record.
    assert origins[:3] == [None, "summary", "memory"] and origins.count("memory") == 1
    assert "likes tea" in str(last[2].content)


# --- cache markers ----------------------------------------------------------------------


class MarkableModel(ScriptedChatModel):
    """A chat model that declares it takes ``cache_control`` blocks (the detection hook)."""

    accepts_cache_control: ClassVar[bool] = True


ChatAnthropic = type(
    "ChatAnthropic", (ScriptedChatModel,), {"__module__": "langchain_anthropic.chat_models"}
)


def marked_blocks_of(request: Sequence[BaseMessage]) -> list[tuple[int, Any]]:
    found: list[tuple[int, Any]] = []
    for index, message in enumerate(request):
        if isinstance(message.content, list):
            for block in message.content:
                if isinstance(block, dict) and "cache_control" in block:
                    found.append((index, block))
    return found


def test_detection_by_class_name_and_by_hook() -> None:
    assert accepts_cache_control(MarkableModel())
    assert accepts_cache_control(ChatAnthropic())
    assert not accepts_cache_control(ScriptedChatModel())
    impostor = type("ChatAnthropic", (ScriptedChatModel,), {"__module__": "tests.fake"})
    assert not accepts_cache_control(impostor())


@pytest.mark.parametrize("model_class", [MarkableModel, ChatAnthropic])
def test_markers_on_mark_the_last_stable_message_with_a_copy(model_class: type) -> None:
    store = InMemoryStore()
    MemoryRepository(store).add_fact(USER, "The user likes tea.", confidence=0.9)
    main = model_class(responder=lambda ms: AIMessage("noted"))
    graph = graph_for(main, store, cache_markers=True)
    run_turn(graph, "first tea")
    run_turn(graph, "second tea")
    for request in main.requests:
        assert marked_blocks_of(request) == [
            (0, {"type": "text", "text": "Be exact.", "cache_control": {"type": "ephemeral"}})
        ]
        assert all(isinstance(m.content, str) for m in request[1:])
    # Every call got the same marked prefix: the first marking changed no cached message.
    assert serialized(main.requests[0][:2]) == serialized(main.requests[1][:2])


def test_markers_off_or_a_model_without_them_sends_plain_content(
    caplog: pytest.LogCaptureFixture,
) -> None:
    off = MarkableModel(responder=lambda ms: AIMessage("noted"))
    run_turn(graph_for(off, InMemoryStore()), "first")
    assert marked_blocks_of(off.requests[0]) == []
    plain = ScriptedChatModel(responder=lambda ms: AIMessage("noted"))
    graph = graph_for(plain, InMemoryStore(), cache_markers=True)
    with caplog.at_level(logging.DEBUG, logger="ctxgraph.cache"):
        run_turn(graph, "first")
        run_turn(graph, "second")
    assert all(marked_blocks_of(request) == [] for request in plain.requests)
    said = [r.getMessage() for r in caplog.records if r.name == "ctxgraph.cache"]
    assert len(said) == 1 and "ScriptedChatModel" in said[0] and "without markers" in said[0]


def test_with_cache_marker_copies_the_marked_message_only() -> None:
    blocks: list[str | dict[str, Any]] = [{"type": "text", "text": "a"}, "b"]
    system = SystemMessage("rules", id="s")
    listing = HumanMessage(content=blocks, id="l")
    user = HumanMessage("hi", id="u")
    request = [system, listing, user]
    marked = with_cache_marker(request, 2)
    assert marked[0] is system and marked[2] is user
    assert marked[1] is not listing and marked[1].id == "l"
    assert marked[1].content == [
        {"type": "text", "text": "a"},
        {"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}},
    ]
    assert listing.content == [{"type": "text", "text": "a"}, "b"]  # untouched
    assert with_cache_marker(request, 0) == request


def test_marking_a_built_request_leaves_the_builders_messages_alone() -> None:
    build = builder()
    request = build.build(full_state(), SETTINGS)
    before = serialized(request)
    marked = with_cache_marker(request, request.stable)
    assert marked[3] is not request[3] and marked[3].id == request[3].id
    assert marked[3].content == [
        {"type": "text", "text": ACTIVE.content, "cache_control": {"type": "ephemeral"}}
    ]
    assert marked[:3] == request[:3] and marked[4:] == request[4:]
    assert serialized(request) == before == serialized(build.build(full_state(), SETTINGS))
    assert isinstance(ACTIVE.content, str)


def test_cache_markers_setting_reads_its_environment_variable() -> None:
    assert Settings.from_env({"CTXGRAPH_CACHE_MARKERS": "1"}).cache_markers is True
    assert Settings.from_env({}).cache_markers is False
    with pytest.raises(ValueError, match="cache_markers"):
        Settings(cache_markers=cast(Any, "yes"))
