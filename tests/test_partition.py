"""partition_history: whole tool exchanges, pinned messages, repaired tool pairs."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from ctxgraph.nodes.compaction import partition_history, repair_tool_pairs
from ctxgraph.nodes.compaction.partition import MISSING_RESULT


def calls(*ids: str) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[{"name": "lookup", "args": {"q": i}, "id": i} for i in ids],
        id="ai-" + "-".join(ids),
    )


def result(call_id: str, status: str = "success") -> ToolMessage:
    return ToolMessage(
        content=f"r-{call_id}", tool_call_id=call_id, id=f"tm-{call_id}", status=status
    )


def ids(messages: list[BaseMessage]) -> list[str | None]:
    return [m.id for m in messages]


def test_short_history_is_not_split() -> None:
    history = [HumanMessage("hi", id="u1"), AIMessage("hello", id="a1")]
    assert partition_history(history, keep=8) == ([], history)


def test_keep_moves_back_so_parallel_results_stay_with_their_call() -> None:
    history: list[BaseMessage] = [
        HumanMessage("start", id="u1"),
        AIMessage("thinking", id="a0"),
        calls("c1", "c2", "c3"),
        result("c1"),
        result("c2"),
        result("c3"),
        AIMessage("done", id="a1"),
    ]
    # keep=3 would cut between c2 and c3's results; the cut moves back to the call.
    old, kept = partition_history(history, keep=3)
    assert ids(kept) == ["u1", "ai-c1-c2-c3", "tm-c1", "tm-c2", "tm-c3", "a1"]
    assert ids(old) == ["a0"]


def test_latest_real_user_message_is_pinned_while_a_long_tool_run_compacts() -> None:
    history: list[BaseMessage] = [SystemMessage("rules", id="s1"), HumanMessage("old", id="u0")]
    history += [AIMessage("ok", id="a0"), HumanMessage("do the long task", id="u1")]
    for index in range(10):
        history += [calls(f"x{index}"), result(f"x{index}")]
    old, kept = partition_history(history, keep=4)
    assert ids(kept) == ["s1", "u1", "ai-x8", "tm-x8", "ai-x9", "tm-x9"]
    assert ids(old) == ["u0", "a0"] + [i for n in range(8) for i in (f"ai-x{n}", f"tm-x{n}")]
    assert kept[1].content == "do the long task"


def test_injected_human_messages_are_not_pinned_as_user_input() -> None:
    injected = HumanMessage("memory view", id="m1", additional_kwargs={"origin": "memory"})
    history: list[BaseMessage] = [HumanMessage("real", id="u1"), injected]
    history += [AIMessage(f"a{i}", id=f"a{i}") for i in range(6)]
    old, kept = partition_history(history, keep=2)
    assert ids(kept) == ["u1", "a4", "a5"]
    assert "m1" in ids(old)


def test_older_user_message_is_folded_when_a_newer_one_is_kept() -> None:
    history = [HumanMessage("first", id="u1"), AIMessage("a", id="a1")]
    history += [HumanMessage("second", id="u2"), AIMessage("b", id="a2")]
    old, kept = partition_history(history, keep=2)
    assert ids(kept) == ["u2", "a2"]
    assert ids(old) == ["u1", "a1"]


def test_orphan_results_are_folded_and_never_kept() -> None:
    history: list[BaseMessage] = [
        HumanMessage("q", id="u1"),
        result("ghost"),
        AIMessage("a", id="a1"),
        AIMessage("b", id="a2"),
    ]
    old, kept = partition_history(history, keep=3)
    assert "tm-ghost" not in ids(kept)
    assert "tm-ghost" in ids(old)
    repaired, _ = repair_tool_pairs(history)
    assert "tm-ghost" not in ids(repaired)


def test_dangling_call_followed_by_more_messages_gets_an_unknown_result() -> None:
    history: list[BaseMessage] = [
        HumanMessage("q", id="u1"),
        calls("c1", "c2"),
        result("c1"),
        HumanMessage("are you there?", id="u2"),
    ]
    repaired, _ = repair_tool_pairs(history)
    assert ids(repaired) == ["u1", "ai-c1-c2", "tm-c1", "c2-missing-result", "u2"]
    synthetic = repaired[3]
    assert isinstance(synthetic, ToolMessage)
    assert synthetic.status == "error"
    assert synthetic.content == MISSING_RESULT


def test_pending_call_at_the_end_is_left_for_the_tools_node() -> None:
    history: list[BaseMessage] = [HumanMessage("q", id="u1"), calls("c1")]
    repaired, _ = repair_tool_pairs(history)
    assert ids(repaired) == ["u1", "ai-c1"]


def test_keep_must_be_positive() -> None:
    with pytest.raises(ValueError, match="keep >= 1, got 0"):
        partition_history([], keep=0)
