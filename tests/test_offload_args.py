"""Old tool-call arguments through the graph: offloaded at 85% of a threshold, kept ones never."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from ctxgraph.graph import build_graph
from ctxgraph.nodes.offload.args import arg_path
from ctxgraph.nodes.offload.refs import LEDGER_ARTIFACTS_KEY, OFFLOAD_ARGS_KEY
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_replies import demo_memory
from ctxgraph.state.messages import ORIGIN_KEY, content_text
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.tokens import TokenCounter, count_text
from ctxgraph.store.artifacts import ArtifactStore
from ctxgraph.store.persistence.archive import ThreadArchive, record_messages, verify_thread
from ctxgraph.store.persistence.connection import Persistence, open_async_persistence
from tests.support.requests import request_builder
from tests.support.scripted import demo_summarizer, is_summary_request, main_requests

CTX = Context(user_id="u1")
BUILD = Settings(
    trigger_tokens=100_000, keep_messages=2, memory_extraction="off", memory_mode="off"
)
"""The graph's own settings: nothing fires in the first turn; each test sets its threshold."""


def lines(tag: str, count: int) -> str:
    return "\n".join(f"{tag} {i:05d}: the report says the quick brown fox ✓" for i in range(count))


LONG = lines("content", 800)
"""About 10,000 tokens."""
LONG2 = lines("appendix", 70)
"""About 900 tokens: over offload_args_min_tokens (500) too."""
SHORT = "a short note"


@tool
def save_files(path: str, content: str, files: list[dict[str, str]]) -> str:
    """Save a report and its attachments."""
    return f"saved {path} and {len(files)} attachments"


ARGS = {
    "path": "reports/q3.txt",
    "content": LONG,
    "files": [{"name": "a.txt", "text": SHORT}, {"name": "b.txt", "text": LONG2}],
}


def save_call(call_id: str, args: dict[str, Any], message_id: str) -> AIMessage:
    """A call as a provider returns it: ``tool_calls`` plus the OpenAI-format copy."""
    raw = {
        "id": call_id,
        "type": "function",
        "function": {"name": "save_files", "arguments": json.dumps(args)},
    }
    return AIMessage(
        "",
        id=message_id,
        tool_calls=[{"name": "save_files", "args": args, "id": call_id}],
        additional_kwargs={"tool_calls": [raw]},
    )


def agent(request: list[BaseMessage]) -> AIMessage:
    """Turn 1 saves the report (c1); "save again" saves a second one (c2); else it answers."""
    assert not is_summary_request(request)
    users = [m for m in request if m.type == "human" and ORIGIN_KEY not in m.additional_kwargs]
    latest = content_text(users[-1])
    if isinstance(request[-1], ToolMessage):
        return AIMessage("Saved.", id=f"r-{request[-1].tool_call_id}")
    if latest.startswith("save the report"):
        return save_call("c1", ARGS, "a1")
    if latest == "save again":
        return save_call("c2", {"path": "b.txt", "content": LONG, "files": []}, "a2")
    return AIMessage("ok")


def config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def make_graph(persistence: Any, main: ScriptedChatModel, **models: Any) -> Any:
    return build_graph(
        models=Models(main=main, summary=demo_summarizer(), **models),
        tools=[save_files],
        settings=BUILD,
        checkpointer=persistence.checkpointer,
        store=persistence.store,
    )


def request_tokens(graph: Any, thread_id: str, main: ScriptedChatModel, text: str) -> int:
    """Tokens of the request the router measures once ``text`` is added to the thread."""
    return measured(graph.get_state(config(thread_id)).values, main, text)


def measured(state: dict[str, Any], main: ScriptedChatModel, text: str) -> int:
    counter = TokenCounter()
    messages = [*state["messages"], HumanMessage(text, id="probe")]
    request = request_builder([], counter).build({"messages": messages}, BUILD)
    # The schemas of the latest call: the set bound for the thread's state as it is now.
    return counter.count_messages(request) + counter.count_tools(main.tool_requests[-1])


def at(fraction: float, tokens: int, user: str = "u1", **extra: Any) -> Context:
    """A run whose ``trigger_tokens`` puts a request of ``tokens`` at ``fraction`` of it."""
    settings = Settings(trigger_tokens=int(tokens / fraction), **extra)
    return Context(user_id=user, settings=settings)


def sent_call(request: list[BaseMessage], message_id: str) -> AIMessage:
    [found] = [m for m in request if m.id == message_id]
    assert isinstance(found, AIMessage)
    return found


def first_turn(
    graph: Any, thread_id: str, text: str = "save the report", context: Context = CTX
) -> None:
    graph.invoke({"messages": [("user", text)]}, config(thread_id), context=context)


def second_turn(graph: Any, thread_id: str, context: Context, text: str = "thanks") -> None:
    graph.invoke({"messages": [HumanMessage(text, id="h2")]}, config(thread_id), context=context)


def assert_offloaded(call: AIMessage, artifacts: ArtifactStore) -> dict[str, str]:
    """The call's two long arguments are placeholders naming artifacts that hold them exactly."""
    entries = call.additional_kwargs[OFFLOAD_ARGS_KEY]
    assert [(e["call_id"], e["arg"]) for e in entries] == [
        ("c1", "content"),
        ("c1", "files[1].text"),
    ]
    refs = {e["arg"]: e["ref"] for e in entries}
    args = call.tool_calls[0]["args"]
    assert set(args) == {"path", "content", "files"} and args["path"] == "reports/q3.txt"
    assert args["files"][0] == {"name": "a.txt", "text": SHORT}  # short strings stay
    assert args["files"][1]["name"] == "b.txt"
    for arg, text, value in (
        ("content", LONG, args["content"]),
        ("files[1].text", LONG2, args["files"][1]["text"]),
    ):
        ref = refs[arg]
        assert value == (
            f'[offloaded to {ref}: {count_text(text):,} tokens; read_artifact(ref="{ref}")]'
        )
        assert artifacts.read_text(ref) == text
        artifact = artifacts.get(ref)
        assert artifact is not None
        assert (artifact.kind, artifact.tool_name, artifact.call_id) == (
            "tool_args",
            "save_files",
            "c1",
        )
        entry = next(e for e in entries if e["ref"] == ref)
        assert (entry["sha256"], entry["tokens"]) == (artifact.sha256, count_text(text))
    # The provider's copy of the call is valid JSON and says the same.
    [raw] = call.additional_kwargs["tool_calls"]
    assert json.loads(raw["function"]["arguments"]) == args
    return refs


def test_at_86_percent_old_arguments_are_offloaded_and_recoverable(
    persistence: Persistence, thread_id: str
) -> None:
    main = ScriptedChatModel(responder=agent)
    graph = make_graph(persistence, main)
    first_turn(graph, thread_id)
    assert sent_call(main.requests[1], "a1").tool_calls[0]["args"] == ARGS
    tokens = request_tokens(graph, thread_id, main, "thanks")
    assert tokens > count_text(LONG)

    second_turn(graph, thread_id, at(0.86, tokens))

    artifacts = ArtifactStore(persistence.store, thread_id)
    sent = sent_call(main.requests[-1], "a1")
    refs = assert_offloaded(sent, artifacts)
    assert sorted(a.ref for a in artifacts.list()) == sorted(refs.values())
    # The checkpoint holds the replaced message under its id; nothing was compacted.
    state = graph.get_state(config(thread_id)).values
    saved = sent_call(state["messages"], "a1")
    assert saved.tool_calls == sent.tool_calls
    assert saved.additional_kwargs == sent.additional_kwargs
    assert not state.get("summary")


def test_at_84_percent_nothing_is_offloaded(persistence: Persistence, thread_id: str) -> None:
    main = ScriptedChatModel(responder=agent)
    graph = make_graph(persistence, main)
    first_turn(graph, thread_id)
    tokens = request_tokens(graph, thread_id, main, "thanks")

    second_turn(graph, thread_id, at(0.84, tokens))

    sent = sent_call(main.requests[-1], "a1")
    assert sent.tool_calls[0]["args"] == ARGS
    assert OFFLOAD_ARGS_KEY not in sent.additional_kwargs
    assert ArtifactStore(persistence.store, thread_id).list() == []


def test_a_later_turn_offloads_nothing_again(
    persistence: Persistence, thread_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    puts: list[tuple[str, str]] = []
    original = ArtifactStore.put

    def counting(self: ArtifactStore, kind: Any, content: str, **kwargs: Any) -> Any:
        puts.append((kwargs["source_id"], kwargs["part"]))
        return original(self, kind, content, **kwargs)

    monkeypatch.setattr(ArtifactStore, "put", counting)
    main = ScriptedChatModel(responder=agent)
    graph = make_graph(persistence, main)
    first_turn(graph, thread_id)
    second_turn(graph, thread_id, at(0.86, request_tokens(graph, thread_id, main, "thanks")))
    assert puts == [("c1", "content"), ("c1", "files[1].text")]
    before = sent_call(main.requests[-1], "a1")

    # Still over 85% of a (much lower) threshold: the placeholders are not offloaded again.
    tokens = request_tokens(graph, thread_id, main, "and now?")
    low = at(0.9, tokens, summary_max_tokens=100, ledger_max_tokens=100)
    graph.invoke({"messages": [("user", "and now?")]}, config(thread_id), context=low)

    assert len(puts) == 2
    assert len(ArtifactStore(persistence.store, thread_id).list()) == 2
    after = sent_call(main.requests[-1], "a1")
    assert after.tool_calls == before.tool_calls
    assert after.additional_kwargs == before.additional_kwargs
    assert not graph.get_state(config(thread_id)).values.get("summary")


def test_arguments_in_the_kept_window_are_never_touched(
    persistence: Persistence, thread_id: str
) -> None:
    main = ScriptedChatModel(responder=agent)
    graph = make_graph(persistence, main)
    first_turn(graph, thread_id)
    context = at(0.86, request_tokens(graph, thread_id, main, "save again"))

    second_turn(graph, thread_id, context, "save again")

    # After its tool ran, the turn's own call (c2) is in the kept window: still whole,
    # although the request is over 85% again; the older call (c1) was offloaded.
    after_tools = main_requests(main)[-1]
    assert isinstance(after_tools[-1], ToolMessage) and after_tools[-1].tool_call_id == "c2"
    current = sent_call(after_tools, "a2")
    assert current.tool_calls[0]["args"]["content"] == LONG
    assert OFFLOAD_ARGS_KEY not in current.additional_kwargs
    assert (
        sent_call(after_tools, "a1")
        .tool_calls[0]["args"]["content"]
        .startswith("[offloaded to art-")
    )
    calls = {a.call_id for a in ArtifactStore(persistence.store, thread_id).list()}
    assert calls == {"c1"}


async def test_the_async_run_offloads_alike(database_uri: str, thread_id: str) -> None:
    main = ScriptedChatModel(responder=agent)
    async with open_async_persistence(database_uri) as persistence:
        graph = make_graph(persistence, main)
        await graph.ainvoke(
            {"messages": [("user", "save the report")]}, config(thread_id), context=CTX
        )
        tokens = measured((await graph.aget_state(config(thread_id))).values, main, "thanks")
        await graph.ainvoke(
            {"messages": [HumanMessage("thanks", id="h2")]},
            config(thread_id),
            context=at(0.86, tokens),
        )
        artifacts = ArtifactStore(persistence.store, thread_id)
        refs = {a.ref for a in await artifacts.alist()}
        sent = sent_call(main.requests[-1], "a1")
        entries = sent.additional_kwargs[OFFLOAD_ARGS_KEY]
        assert {e["ref"] for e in entries} == refs and len(refs) == 2
        by_arg = {e["arg"]: e["ref"] for e in entries}
        assert await artifacts.aread_text(by_arg["content"]) == LONG
        assert await artifacts.aread_text(by_arg["files[1].text"]) == LONG2


def test_offloading_then_compacting_in_one_step_archives_the_placeholders(
    persistence: Persistence, thread_id: str
) -> None:
    main = ScriptedChatModel(responder=agent)
    graph = make_graph(persistence, main)
    # A long first message, so that folding it makes the request shrink.
    first_turn(graph, thread_id, "save the report. " + lines("background", 150))
    tokens = request_tokens(graph, thread_id, main, "thanks")

    # The message-count trigger fires whatever the offloading: both happen in one step.
    second_turn(graph, thread_id, at(0.86, tokens, trigger_messages=6, keep_messages=2))

    state = graph.get_state(config(thread_id)).values
    mark = state["compaction"]
    assert mark["version"] == 1
    assert verify_thread(persistence.store, thread_id, mark).ok
    [record] = ThreadArchive(persistence.store, thread_id).records()
    folded = record_messages(record)
    archived = next(m for m in folded if m.id == "a1")
    assert isinstance(archived, AIMessage)
    refs = assert_offloaded(archived, ArtifactStore(persistence.store, thread_id))
    assert all(m.id != "a1" for m in state["messages"])
    listed = state["summary"]["ledger"][LEDGER_ARTIFACTS_KEY]
    assert listed == [
        {
            "ref": refs["content"],
            "kind": "tool_args",
            "tool": "save_files",
            "tokens": count_text(LONG),
        },
        {
            "ref": refs["files[1].text"],
            "kind": "tool_args",
            "tool": "save_files",
            "tokens": count_text(LONG2),
        },
    ]
    summary = next(m for m in main.requests[-1] if m.additional_kwargs.get(ORIGIN_KEY) == "summary")
    assert f"- {refs['content']}: arguments of save_files" in content_text(summary)


def test_with_memory_on_the_flush_before_an_offload_only_step_calls_no_model(
    persistence: Persistence, thread_id: str
) -> None:
    main = ScriptedChatModel(responder=agent)
    memory = ScriptedChatModel(responder=lambda ms: demo_memory(str(ms[-1].content)))
    graph = build_graph(
        models=Models(main=main, memory=memory, summary=demo_summarizer()),
        tools=[save_files],
        # Inline: the test counts the memory calls each turn makes within it.
        settings=Settings(
            trigger_tokens=100_000, keep_messages=2, memory_mode="off", memory_extraction="inline"
        ),
        checkpointer=persistence.checkpointer,
        store=persistence.store,
    )
    user = f"u-{thread_id}"  # the facts it learns stay with this test
    # A fact cue ("I", "my"), so the extraction gate lets turn 1 through to the model.
    text = "save the report: I need it for my quarterly review"
    first_turn(graph, thread_id, text, context=Context(user_id=user))
    assert memory.calls == 1  # the end of turn 1
    text = "Thanks. I prefer tea over coffee."
    tokens = request_tokens(graph, thread_id, main, text)

    second_turn(graph, thread_id, at(0.86, tokens, user=user), text)

    # The flush before the step saw only messages already extracted: no extra call, and
    # turn 2 is extracted once, at its end, as usual.
    assert memory.calls == 2
    assert "I prefer tea over coffee." in content_text(memory.requests[-1][-1])
    assert (
        sent_call(main.requests[-1], "a1")
        .tool_calls[0]["args"]["content"]
        .startswith("[offloaded to art-")
    )
    assert not graph.get_state(config(thread_id)).values.get("summary")


def test_argument_paths_name_keys_and_indexes() -> None:
    assert arg_path(("content",)) == "content"
    assert arg_path(("files", 2, "text")) == "files[2].text"
    assert arg_path(("a key", 0)) == '["a key"][0]'
    assert arg_path((0, "x")) == "[0].x"
