"""Large user inputs through the graph: head, tail and ref for the model, text in an artifact."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from ctxgraph.graph import build_graph
from ctxgraph.nodes.compaction.ledger import bound_ledger, empty_ledger, render_ledger_within
from ctxgraph.nodes.offload.inputs import input_threshold
from ctxgraph.nodes.offload.refs import LEDGER_ARTIFACTS_KEY, OFFLOAD_FAILED_KEY, OFFLOAD_KEY
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_replies import demo_memory
from ctxgraph.state.messages import ORIGIN_KEY, content_text
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.tokens import count_text
from ctxgraph.store.artifacts import ArtifactStore, ArtifactWriteError
from ctxgraph.store.persistence.connection import Persistence, open_async_persistence
from tests.support.scripted import demo_summarizer, is_summary_request, main_requests

CTX = Context(user_id="u1")
LIMIT = 2_000
"""``offload_input_tokens`` of these tests (the default is 50,000)."""
MIDDLE = "MIDDLE-SENTINEL-4242: the part only the artifact keeps"
STUB_BOUND = 2_000


def big_text(lines: int = 700, *, newline: str = "\n") -> str:
    """A long paste: numbered lines with non-ASCII text, a sentinel line in the middle."""
    rows = [f"{i:05d}\tthe quick brown fox ✓ 漢字 jumps over the lazy dog 🦊" for i in range(lines)]
    rows[lines // 2] = MIDDLE
    return newline.join(rows) + newline


def config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def graph_on(persistence: Any, main: ScriptedChatModel, **overrides: Any) -> Any:
    settings = Settings(
        offload_input_tokens=LIMIT, memory_extraction="off", memory_mode="off", **overrides
    )
    return build_graph(
        models=Models(main=main, summary=demo_summarizer()),
        settings=settings,
        checkpointer=persistence.checkpointer,
        store=persistence.store,
    )


def user_message(request: list[BaseMessage], message_id: str) -> BaseMessage:
    [found] = [m for m in request if m.id == message_id]
    return found


def assert_never_sent(requests: list[list[BaseMessage]]) -> None:
    """No model request carried the oversized text (its middle) or an oversized message."""
    for request in requests:
        for message in request:
            assert MIDDLE not in content_text(message)


def test_a_large_input_reaches_the_model_as_head_tail_and_ref(
    persistence: Persistence, thread_id: str
) -> None:
    text = big_text(newline="\r\n")  # every byte must come back, \r included
    tokens = count_text(text)
    assert tokens > LIMIT
    main = ScriptedChatModel(script=["Got it."])
    graph = graph_on(persistence, main)

    graph.invoke({"messages": [HumanMessage(text, id="paste-1")]}, config(thread_id), context=CTX)

    [request] = main.requests
    shown = user_message(request, "paste-1")
    stub = content_text(shown)
    offload = shown.additional_kwargs[OFFLOAD_KEY]
    ref = offload["ref"]
    assert stub.startswith("[user input offloaded]")
    assert count_text(stub) <= STUB_BOUND
    assert f"artifact {ref}" in stub
    assert f'read_artifact(ref="{ref}"' in stub and f'grep_artifact(ref="{ref}"' in stub
    assert "00000\tthe quick brown fox" in stub  # the head
    assert "00699\tthe quick brown fox" in stub  # the tail
    assert_never_sent(main.requests)
    assert offload == {
        "ref": ref,
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
        "tokens": tokens,
    }

    # The checkpoint holds the stub under the input's id, not the original.
    saved = graph.get_state(config(thread_id)).values["messages"]
    assert saved[0].id == "paste-1"
    assert saved[0].content == stub and saved[0].additional_kwargs[OFFLOAD_KEY] == offload

    # The artifact holds the user's words byte for byte.
    artifacts = ArtifactStore(persistence.store, thread_id)
    assert artifacts.read_text(ref) == text
    artifact = artifacts.get(ref)
    assert artifact is not None
    assert (artifact.kind, artifact.call_id, artifact.sha256) == (
        "user_input",
        "paste-1",
        offload["sha256"],
    )


async def test_the_async_run_offloads_alike(database_uri: str, thread_id: str) -> None:
    text = big_text()
    main = ScriptedChatModel(script=["Got it."])
    async with open_async_persistence(database_uri) as persistence:
        graph = graph_on(persistence, main)
        await graph.ainvoke(
            {"messages": [HumanMessage(text, id="paste-a")]}, config(thread_id), context=CTX
        )
        artifacts = ArtifactStore(persistence.store, thread_id)
        shown = user_message(main.requests[0], "paste-a")
        ref = shown.additional_kwargs[OFFLOAD_KEY]["ref"]
        assert await artifacts.aread_text(ref) == text
    assert content_text(shown).startswith("[user input offloaded]")
    assert_never_sent(main.requests)


def test_a_failing_store_leaves_a_bounded_notice_and_no_ref(
    persistence: Persistence, thread_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self: ArtifactStore, *args: Any, **kwargs: Any) -> Any:
        raise ArtifactWriteError("could not store artifact art-x: simulated outage")

    monkeypatch.setattr(ArtifactStore, "put", refuse)
    text = big_text()
    main = ScriptedChatModel(script=["Got it."])
    graph = graph_on(persistence, main)

    graph.invoke({"messages": [HumanMessage(text, id="paste-2")]}, config(thread_id), context=CTX)

    shown = user_message(main.requests[0], "paste-2")
    notice = content_text(shown)
    assert notice.startswith("[user input NOT saved]")
    assert "NOT saved (could not store artifact art-x: simulated outage)" in notice
    assert "the rest is lost" in notice
    assert "00000\tthe quick brown fox" in notice and "00699\tthe quick brown fox" in notice
    assert count_text(notice) <= STUB_BOUND
    assert "read_artifact" not in notice
    assert OFFLOAD_KEY not in shown.additional_kwargs
    failed = shown.additional_kwargs[OFFLOAD_FAILED_KEY]
    assert failed["tokens"] == count_text(text) and "simulated outage" in failed["error"]
    assert_never_sent(main.requests)
    assert ArtifactStore(persistence.store, thread_id).list() == []


def test_short_inputs_stay_and_zero_turns_offloading_off(
    persistence: Persistence, thread_id: str
) -> None:
    short = big_text(lines=60)
    assert count_text(short) < LIMIT
    main = ScriptedChatModel(script=["one", "two"])
    graph = graph_on(persistence, main)
    graph.invoke({"messages": [HumanMessage(short, id="s1")]}, config(thread_id), context=CTX)
    assert user_message(main.requests[0], "s1").content == short

    text = big_text()
    off = Context(user_id="u1", settings=Settings(offload_input_tokens=0))
    graph.invoke({"messages": [HumanMessage(text, id="s2")]}, config(thread_id), context=off)
    assert user_message(main.requests[1], "s2").content == text
    assert ArtifactStore(persistence.store, thread_id).list() == []


def test_a_later_turn_stores_nothing_again(
    persistence: Persistence, thread_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    puts: list[str] = []
    original = ArtifactStore.put

    def counting(self: ArtifactStore, kind: Any, content: str, **kwargs: Any) -> Any:
        puts.append(kwargs["source_id"])
        return original(self, kind, content, **kwargs)

    monkeypatch.setattr(ArtifactStore, "put", counting)
    main = ScriptedChatModel(script=["one", "two"])
    graph = graph_on(persistence, main)
    graph.invoke({"messages": [HumanMessage(big_text(), id="p1")]}, config(thread_id), context=CTX)
    graph.invoke({"messages": [HumanMessage("thanks", id="p2")]}, config(thread_id), context=CTX)
    assert puts == ["p1"]
    second = user_message(main.requests[1], "p1")
    assert second.content == user_message(main.requests[0], "p1").content
    assert len(ArtifactStore(persistence.store, thread_id).list()) == 1


def test_with_memory_on_no_model_sees_the_original(
    persistence: Persistence, thread_id: str
) -> None:
    main = ScriptedChatModel(script=["Noted."])
    memory = ScriptedChatModel(responder=lambda ms: demo_memory(str(ms[-1].content)))
    graph = build_graph(
        models=Models(main=main, memory=memory, summary=demo_summarizer()),
        settings=Settings(offload_input_tokens=LIMIT),
        checkpointer=persistence.checkpointer,
        store=persistence.store,
    )
    own = Context(user_id=f"u-{thread_id}")  # whatever it learns stays with this test
    graph.invoke({"messages": [HumanMessage(big_text(), id="m1")]}, config(thread_id), context=own)
    assert content_text(user_message(main.requests[0], "m1")).startswith("[user input")
    assert_never_sent(main.requests)
    assert_never_sent(memory.requests)


def test_over_the_quota_only_artifacts_nothing_refers_to_are_evicted(
    persistence: Persistence, thread_id: str
) -> None:
    main = ScriptedChatModel(script=["one", "two"])
    graph = graph_on(persistence, main)
    graph.invoke({"messages": [HumanMessage(big_text(), id="q1")]}, config(thread_id), context=CTX)
    artifacts = ArtifactStore(persistence.store, thread_id)
    orphan = artifacts.put("tool_result", "stale output\n" * 500, source_id="gone-call").ref

    tight = Context(user_id="u1", settings=Settings(artifact_quota_bytes=1))
    text = big_text(lines=900)
    graph.invoke({"messages": [HumanMessage(text, id="q2")]}, config(thread_id), context=tight)

    live = {ArtifactStore.ref_for("user_input", "q1"), ArtifactStore.ref_for("user_input", "q2")}
    assert {a.ref for a in artifacts.list()} == live
    assert artifacts.get(orphan) is None
    assert artifacts.read_text(ArtifactStore.ref_for("user_input", "q2")) == text


# --- the record: refs of folded messages ------------------------------------------------


def artifact_reader(ref: str) -> Any:
    """Main model: answers each turn, and on "read it back" reads the artifact's first lines."""

    def reply(request: list[BaseMessage]) -> AIMessage:
        assert not is_summary_request(request)
        if isinstance(request[-1], ToolMessage):
            return AIMessage("Here is what it says.")
        if request[-1].content == "read it back":
            call = {"name": "read_artifact", "args": {"ref": ref, "limit": 3}, "id": "read-1"}
            return AIMessage("", tool_calls=[call])
        return AIMessage("ok")

    return reply


def summary_view(request: list[BaseMessage]) -> str:
    [summary] = [m for m in request if m.additional_kwargs.get(ORIGIN_KEY) == "summary"]
    return content_text(summary)


def test_after_two_compactions_the_model_can_still_read_the_first_input(
    persistence: Persistence, thread_id: str
) -> None:
    text = big_text()
    tokens = count_text(text)
    ref = ArtifactStore.ref_for("user_input", "first")
    main = ScriptedChatModel(responder=artifact_reader(ref))
    graph = graph_on(persistence, main, trigger_messages=10, keep_messages=2)
    graph.invoke({"messages": [HumanMessage(text, id="first")]}, config(thread_id), context=CTX)

    versions: list[int] = []
    for turn in range(2, 20):
        graph.invoke({"messages": [("user", f"question {turn}")]}, config(thread_id), context=CTX)
        state = graph.get_state(config(thread_id)).values
        version = (state.get("compaction") or {}).get("version", 0)
        if version and version not in versions:
            versions.append(version)
            # Each compaction keeps the ref in the record, merged with the earlier ones.
            listed = state["summary"]["ledger"][LEDGER_ARTIFACTS_KEY]
            assert listed == [{"ref": ref, "kind": "user_input", "tool": None, "tokens": tokens}]
            # The notice ctxgraph wrote is not taken for the user's words.
            ledger = state["summary"]["ledger"]
            assert not any("shown below" in c["text"] for c in ledger["constraints"])
            assert ref not in ledger["identifiers"]
        if len(versions) >= 2:
            break
    assert versions[:2] == [1, 2]
    assert all(m.id != "first" for m in state["messages"])  # folded in v1

    graph.invoke({"messages": [("user", "read it back")]}, config(thread_id), context=CTX)

    requests = main_requests(main)
    assert ref in summary_view(requests[-2])  # the record the model received lists the ref
    result = requests[-1][-1]
    assert isinstance(result, ToolMessage) and result.name == "read_artifact"
    assert result.status != "error", result.content
    assert "00000\tthe quick brown fox" in content_text(result)


def test_the_record_lists_at_most_fifty_artifacts_within_its_budget() -> None:
    ledger = empty_ledger()
    ledger["artifacts"] = [
        {"ref": f"art-{n:024x}", "kind": "tool_result", "tool": "read_file", "tokens": 20_000 + n}
        for n in range(80)
    ]
    bounded = bound_ledger(ledger, max_tool_calls=40, max_identifiers=200)
    assert [e["ref"] for e in bounded["artifacts"]] == [f"art-{n:024x}" for n in range(30, 80)]
    assert bounded["folded_artifacts"] == 30
    for budget in (100, 200, 400, 1_000):
        rendered = render_ledger_within(bounded, budget)
        assert count_text(rendered) <= budget
        refs = [
            line.split(":")[0][2:] for line in rendered.splitlines() if line.startswith("- art-")
        ]
        newest_first = [f"art-{n:024x}" for n in range(79, 29, -1)]
        assert refs == newest_first[: len(refs)]  # newest first, while they fit
        assert "older artifacts are not listed" in rendered
    assert "- art-00000000000000000000004f: result of read_file, 20,079 tokens" in rendered


def test_the_threshold_is_capped_at_half_a_known_window() -> None:
    assert input_threshold(Settings(), 200_000) == 50_000
    assert input_threshold(Settings(), 64_000) == 32_000
    assert input_threshold(Settings(offload_input_tokens=2_000), 64_000) == 2_000
    assert input_threshold(Settings(offload_input_tokens=0), 64_000) == 0


def test_an_unknown_window_caps_the_threshold_at_half_the_trigger() -> None:
    assert input_threshold(Settings(), None) == 9_000
    assert input_threshold(Settings(trigger_tokens=200_000), None) == 50_000
    assert input_threshold(Settings(offload_input_tokens=2_000), None) == 2_000
    assert input_threshold(Settings(offload_input_tokens=0), None) == 0
