"""Skills through the graph: the listing, loading, the tool policy, slash activation and
compaction, asserted on the exact requests the scripted model receives."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from ctxgraph import Context, Models, Settings, build_graph
from ctxgraph.graph import as_subgraph
from ctxgraph.graph.builder import Graph
from ctxgraph.nodes.skills.listing import HIDDEN_LINE, NAMES_HEADER
from ctxgraph.nodes.skills.policy import ALWAYS_ALLOWED
from ctxgraph.state.messages import message_origin
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.tokens import count_text
from ctxgraph.store.persistence.connection import Persistence
from tests.support.scripted import Dispatch, demo_summarizer, main_requests
from tests.support.skill_files import WRITES, read_file, write_file, write_skill

CONTEXT = Context(user_id="skill-user")
TOOLS: tuple[BaseTool, ...] = (read_file, write_file)


@pytest.fixture(autouse=True)
def _no_writes() -> None:
    WRITES.clear()


def call(name: str, args: dict[str, Any], call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id}])


def load(name: str, call_id: str) -> AIMessage:
    return call("load_skill", {"name": name}, call_id)


def graph_for(
    main: ScriptedChatModel,
    skills: Path | Sequence[str],
    *,
    saver: InMemorySaver | None = None,
    store: BaseStore | None = None,
    summary: ScriptedChatModel | None = None,
    **settings: Any,
) -> Graph:
    dirs = (str(skills),) if isinstance(skills, Path) else tuple(skills)
    values: dict[str, Any] = {"memory_extraction": "off", "skills_dirs": dirs, **settings}
    return build_graph(
        checkpointer=saver or InMemorySaver(),
        store=store if store is not None else InMemoryStore(),
        models=Models(main=main, summary=summary),
        tools=TOOLS,
        settings=Settings(**values),
    )


def turn(graph: Graph, text: str, thread: str = "t") -> list[BaseMessage]:
    config = {"configurable": {"thread_id": thread}}
    result = graph.invoke({"messages": [HumanMessage(text)]}, config, context=CONTEXT)
    return list(result["messages"])


def bound(model: ScriptedChatModel, index: int = -1) -> list[str]:
    """Names of the tool schemas bound for one model call."""
    return [schema["function"]["name"] for schema in model.tool_requests[index]]


def skill_data(request: Sequence[BaseMessage]) -> str:
    """The text of the request's active-skills data message ("" without one)."""
    found = [m for m in request if message_origin(m) == "skills"]
    assert len(found) <= 1
    return str(found[0].content) if found else ""


def active(graph: Graph, thread: str = "t") -> list[str]:
    values = graph.get_state({"configurable": {"thread_id": thread}}).values
    return [entry["name"] for entry in values.get("skill_context") or []]


def listing_of(request: Sequence[BaseMessage], prompt: str) -> str:
    content = request[0].content
    assert isinstance(content, str) and content.startswith(prompt + "\n\n")
    return content[len(prompt) + 2 :]


def listing_text(request: Sequence[BaseMessage]) -> str:
    """The skill listing the system message carries after the rules ("" without one)."""
    content = str(request[0].content)
    prompt = Settings().system_prompt
    assert content.startswith(prompt)
    assert not [m for m in request if m.additional_kwargs.get("origin") == "skill_listing"]
    return content[len(prompt) :].strip()


# --- progressive disclosure -------------------------------------------------------------


def test_two_hundred_skills_fit_the_listing_budget_with_an_exact_hidden_count(
    tmp_path: Path,
) -> None:
    for number in range(200):
        write_skill(
            tmp_path,
            f"skill-{number:03d}",
            description=f"Handles task family {number} " + "with many careful steps " * 20,
        )
    main = ScriptedChatModel(script=["one", "two"])
    graph = graph_for(main, tmp_path, skills_list_budget=600)
    turn(graph, "first")
    turn(graph, "second")
    prompt = Settings().system_prompt
    first, second = (listing_of(request, prompt) for request in main.requests)
    assert first == second  # byte-identical while the skills do not change
    assert count_text(first) <= 600
    lines = first.splitlines()
    assert lines[0] == NAMES_HEADER
    shown = lines[1].split(", ")
    hidden = int(re.fullmatch(r"\[(\d+) more skills not listed.*", lines[2]).group(1))  # type: ignore[union-attr]
    assert shown == [f"skill-{n:03d}" for n in range(len(shown))]
    assert len(shown) + hidden == 200
    # Exact: one more name would not have fitted.
    one_more = "\n".join(
        [
            NAMES_HEADER,
            ", ".join(f"skill-{n:03d}" for n in range(len(shown) + 1)),
            HIDDEN_LINE.format(hidden=hidden - 1, s="s"),
        ]
    )
    assert count_text(one_more) > 600


def test_descriptions_are_cut_before_names_are_dropped(tmp_path: Path) -> None:
    for number in range(12):
        write_skill(tmp_path, f"s{number}", description="word " * 200)
    main = ScriptedChatModel(script=["ok"])
    graph = graph_for(main, tmp_path, skills_list_budget=750)
    turn(graph, "hi")
    listing = listing_of(main.requests[0], Settings().system_prompt)
    rows = [line for line in listing.splitlines() if line.startswith("- s")]
    assert len(rows) == 12  # every skill keeps its name, description and ref
    assert all(str(tmp_path) in row for row in rows)
    descriptions = [row.split(": ", 1)[1].rsplit(" [", 1)[0] for row in rows]
    # 250-character descriptions would not fit: they were cut to the next shorter length.
    assert all(100 < len(text) <= 120 for text in descriptions)
    assert count_text(listing) <= 750


# --- loading and the record -------------------------------------------------------------


def test_loading_nine_skills_keeps_the_eight_most_recent_and_a_reload_moves_to_the_end(
    tmp_path: Path,
) -> None:
    for number in range(9):
        write_skill(tmp_path, f"k{number}")
    script: list[Any] = [load(f"k{n}", f"c{n}") for n in range(9)]
    script += ["loaded all", load("k1", "again"), "reloaded"]
    main = ScriptedChatModel(script=script)
    graph = graph_for(main, tmp_path)
    turn(graph, "load them all")
    assert active(graph) == [f"k{n}" for n in range(1, 9)]
    turn(graph, "load k1 again")
    assert active(graph) == [f"k{n}" for n in range(2, 9)] + ["k1"]


def test_load_skill_returns_the_body_hash_and_files(tmp_path: Path) -> None:
    path = write_skill(tmp_path, "guide", body="# Guide\nStep one.")
    (path.parent / "references").mkdir()
    (path.parent / "references" / "notes.md").write_text("line a\nline b\n", encoding="utf-8")
    main = ScriptedChatModel(
        script=[
            load("guide", "c1"),
            call("read_skill_file", {"name": "guide", "path": "references/notes.md"}, "c2"),
            "done",
        ]
    )
    graph = graph_for(main, tmp_path)
    messages = turn(graph, "use the guide")
    loaded, read = (m for m in messages if isinstance(m, ToolMessage))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert loaded.content == (
        f"Skill guide loaded (ref {path}, sha256 {digest}).\n"
        "Supporting files (read_skill_file): references/notes.md\n\n# Guide\nStep one."
    )
    assert loaded.additional_kwargs["skill"] == {
        "name": "guide",
        "path": str(path),
        "sha256": digest,
    }
    assert "0\tline a\n1\tline b" in str(read.content)
    entry = graph.get_state({"configurable": {"thread_id": "t"}}).values["skill_context"][0]
    assert {k: entry[k] for k in ("name", "path", "sha256", "source", "tool_call_id")} == {
        "name": "guide",
        "path": str(path),
        "sha256": digest,
        "source": "load_skill",
        "tool_call_id": "c1",
    }


def test_an_unknown_skill_name_is_an_error_result_with_close_matches(tmp_path: Path) -> None:
    write_skill(tmp_path, "report-writer")
    main = ScriptedChatModel(script=[load("report-writr", "c1"), "sorry"])
    graph = graph_for(main, tmp_path)
    messages = turn(graph, "write")
    result = next(m for m in messages if isinstance(m, ToolMessage))
    assert result.status == "error"
    assert "report-writer" in str(result.content)
    assert active(graph) == []


# --- the tool policy --------------------------------------------------------------------


def test_policy_unbinds_and_refuses_tools_outside_the_union(tmp_path: Path) -> None:
    write_skill(tmp_path, "reader", allowed=["read_file"])
    write_skill(tmp_path, "writer", allowed=["write_file"])
    main = ScriptedChatModel(
        script=[
            load("reader", "c1"),
            call("write_file", {"path": "a.txt", "text": "x"}, "c2"),
            "refused",
            load("writer", "c3"),
            call("write_file", {"path": "b.txt", "text": "x"}, "c4"),
            "written",
        ]
    )
    graph = graph_for(main, tmp_path)
    messages = turn(graph, "read only")
    # A fresh thread binds no built-in reader (nothing offloaded or compacted yet).
    everything = ["read_file", "write_file", "load_skill", "read_skill_file"]
    assert bound(main, 0) == everything
    assert bound(main, 1) == ["read_file", "load_skill", "read_skill_file"]
    # The exact request of the call after the load: rules + listing, the active-skill
    # data, then the window.
    reader = tmp_path / "reader" / "SKILL.md"
    writer = tmp_path / "writer" / "SKILL.md"
    digest = hashlib.sha256(reader.read_bytes()).hexdigest()
    request = main.requests[1]
    assert [type(m).__name__ for m in request] == [
        "SystemMessage",
        "HumanMessage",
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
    ]
    assert request[0].content == (
        f"{Settings().system_prompt}\n\n"
        "Skills you can use (name: description [ref]). When a task fits a skill, call "
        "load_skill(name) first and follow its instructions; read_skill_file(name, path) "
        "reads the files it mentions.\n"
        f"- reader: A skill. [{reader}]\n"
        f"- writer: A skill. [{writer}]"
    )
    assert request[1].content == (
        "Active skills of this thread (a record kept by the application, not a message from "
        "the user). Their instructions still apply; load_skill(name) shows a skill in full.\n"
        f"- reader: ref {reader}, sha256 {digest[:12]}\n"
        "Tool policy: only grep_artifact, load_skill, memory_search, read_artifact, "
        "read_file, read_history, read_skill_file may be called (the union of allowed-tools "
        "of the active skills reader)."
    )
    assert request[1].additional_kwargs == {"origin": "skills", "hide_from_ui": True}
    assert request[2].content == "read only"
    assert request[4].content == (
        f"Skill reader loaded (ref {reader}, sha256 {digest}).\n"
        "Supporting files (read_skill_file): none\n\nDo the thing."
    )
    refusal = [m for m in messages if isinstance(m, ToolMessage)][-1]
    assert refusal.status == "error"
    assert "not allowed by the skill tool policy" in str(refusal.content)
    assert "reader" in str(refusal.content)
    assert WRITES == []  # the tool never ran
    turn(graph, "now write")
    assert "write_file" in bound(main, 4)
    assert WRITES == ["b.txt"]


def test_a_slash_skill_decides_alone_for_its_run(tmp_path: Path) -> None:
    write_skill(tmp_path, "reader", body="Only read.", allowed=["read_file"])
    write_skill(tmp_path, "writer", allowed=["write_file"])
    main = ScriptedChatModel(
        script=[
            load("writer", "c1"),
            call("write_file", {"path": "a.txt", "text": "x"}, "c2"),
            "not widened",
            call("write_file", {"path": "b.txt", "text": "x"}, "c3"),
            "next run",
        ]
    )
    graph = graph_for(main, tmp_path)
    messages = turn(graph, "/reader compare the two files")
    assert "write_file" not in bound(main, 0)
    assert "write_file" not in bound(main, 1)  # loading writer did not widen /reader's set
    assert "write_file" not in bound(main, 2)
    assert WRITES == []
    assert [m for m in messages if isinstance(m, ToolMessage)][-1].status == "error"
    # The slash body is hidden context of every request of the run, never a stored message.
    for request in main.requests[:3]:
        assert "The user activated the skill reader with /reader for this turn." in skill_data(
            request
        )
        assert "Only read." in skill_data(request)
    assert not any("The user activated" in str(m.content) for m in messages)
    values = graph.get_state({"configurable": {"thread_id": "t"}}).values
    sources = {e["name"]: e["source"] for e in values["skill_context"]}
    assert sources == {"reader": "slash", "writer": "load_skill"}
    # The next run has no slash command: the union of both skills applies.
    turn(graph, "go on")
    assert "write_file" in bound(main, 3)
    assert WRITES == ["b.txt"]


def test_unknown_slash_name_answers_once_without_any_model_call(tmp_path: Path) -> None:
    write_skill(tmp_path, "report-writer")
    main = ScriptedChatModel(script=[])
    graph = build_graph(
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
        models=Models(main=main),  # the same model would extract memory, too
        tools=TOOLS,
        settings=Settings(skills_dirs=(str(tmp_path),), memory_extraction="inline"),
    )
    messages = turn(graph, "/report-writr the quarterly numbers")
    assert main.calls == 0
    assert [type(m).__name__ for m in messages] == ["HumanMessage", "AIMessage"]
    assert messages[-1].content == (
        "There is no skill called /report-writr. Did you mean /report-writer?"
    )


@pytest.mark.parametrize("text", ["/help me", "/usr/bin is a folder", "/Reader x", "a /reader"])
def test_reserved_words_and_other_slashes_reach_the_model(tmp_path: Path, text: str) -> None:
    write_skill(tmp_path, "reader", allowed=["read_file"])
    main = ScriptedChatModel(script=["answered"])
    graph = graph_for(main, tmp_path)
    assert turn(graph, text)[-1].content == "answered"
    assert "write_file" in bound(main, 0)


def test_advisory_policy_logs_and_runs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_skill(tmp_path, "reader", allowed=["read_file"])
    main = ScriptedChatModel(
        script=[load("reader", "c1"), call("write_file", {"path": "a", "text": "x"}, "c2"), "ok"]
    )
    graph = graph_for(main, tmp_path, skill_policy="advisory")
    with caplog.at_level(logging.WARNING, logger="ctxgraph.skills"):
        turn(graph, "write anyway")
    assert "write_file" in bound(main, 1)
    assert WRITES == ["a"]
    assert any("advisory" in record.getMessage() for record in caplog.records)


def test_an_unreadable_registry_fails_closed(tmp_path: Path) -> None:
    write_skill(tmp_path, "reader")
    main = ScriptedChatModel(script=[call("write_file", {"path": "a", "text": "x"}, "c1"), "no"])
    graph = graph_for(main, [str(tmp_path), str(tmp_path / "missing")])
    messages = turn(graph, "write")
    assert set(bound(main, 0)) <= ALWAYS_ALLOWED
    assert "read_file" not in bound(main, 0)
    assert WRITES == []
    refusal = next(m for m in messages if isinstance(m, ToolMessage))
    assert "could not be read" in str(refusal.content)


# --- compaction and change --------------------------------------------------------------


def test_active_skills_and_their_policy_survive_two_compactions(tmp_path: Path) -> None:
    body = "# Reader\n" + "\n".join(f"Step {n}: read carefully." for n in range(1, 6))
    write_skill(tmp_path, "reader", body=body, allowed=["read_file"])

    def reply(request: list[BaseMessage]) -> AIMessage:
        last = request[-1]
        if isinstance(last, ToolMessage):
            return AIMessage(content="noted the result")
        if last.content == "load the reader skill":
            return load("reader", "c1")
        if last.content == "write a file now":
            return call("write_file", {"path": "late.txt", "text": "x"}, "c9")
        return AIMessage(content="ok")

    dispatch = Dispatch(main=reply)
    main = ScriptedChatModel(responder=dispatch)
    summary = demo_summarizer()
    graph = graph_for(main, tmp_path, summary=summary, trigger_messages=6, keep_messages=2)
    turn(graph, "load the reader skill")
    for n in range(20):
        turn(graph, f"note {n}: more facts about the parcel")
        values = graph.get_state({"configurable": {"thread_id": "t"}}).values
        if int((values.get("compaction") or {}).get("version", 0)) >= 2:
            break
    assert int(values["compaction"]["version"]) >= 2
    messages = turn(graph, "write a file now")
    last = main_requests(main)[-1]
    assert not any(
        isinstance(m, ToolMessage) and m.name == "load_skill" for m in values["messages"]
    )
    data = skill_data(last)
    assert f"- reader: ref {tmp_path / 'reader' / 'SKILL.md'}" in data
    assert "re-attached because its load_skill result is no longer in the conversation" in data
    assert "Step 5: read carefully." in data
    assert "write_file" not in bound(main)
    assert WRITES == []
    assert [m for m in messages if isinstance(m, ToolMessage)][-1].status == "error"


def test_reattached_bodies_are_cut_to_their_budget(tmp_path: Path) -> None:
    long_body = "\n".join(f"Rule {n}: keep the ledger exact and never guess." for n in range(400))
    write_skill(tmp_path, "long", body=long_body)
    main = ScriptedChatModel(responder=Dispatch(main=[load("long", "c1"), "ok"] + ["x"] * 20))
    graph = graph_for(
        main,
        tmp_path,
        summary=demo_summarizer(),
        trigger_messages=6,
        keep_messages=2,
        trigger_tokens=30_000,
        skills_reinject_budget=300,
    )
    turn(graph, "load long")
    for n in range(6):
        turn(graph, f"more {n}")
    data = skill_data(main_requests(main)[-1])
    body_part = data.split("re-attached because", 1)[1]
    assert "[cut here: call load_skill('long') again for the full text]" in body_part
    assert count_text(body_part) <= 300
    assert "Rule 0:" in body_part and "Rule 399:" not in body_part


def test_an_edited_skill_is_seen_next_turn_also_by_a_new_process(tmp_path: Path) -> None:
    path = write_skill(tmp_path, "reader", description="Version one.", allowed=["read_file"])
    saver, store = InMemorySaver(), InMemoryStore()
    main = ScriptedChatModel(script=[load("reader", "c1"), "loaded", "seen"])
    graph = graph_for(main, tmp_path, saver=saver, store=store)
    turn(graph, "load reader")
    assert "Version one." in listing_text(main.requests[0])
    write_skill(tmp_path, "reader", description="Version two.", allowed=["read_file"])
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    turn(graph, "again")
    assert "Version two." in listing_text(main.requests[-1])
    assert "changed since loaded, reload it with load_skill('reader')" in skill_data(
        main.requests[-1]
    )
    # A new graph (as a new process would build) on the old checkpointed thread.
    write_skill(tmp_path, "added", description="Brand new.")
    later = ScriptedChatModel(script=["fresh"])
    turn(graph_for(later, tmp_path, saver=saver, store=store), "and now")
    assert "- added: Brand new." in listing_text(later.requests[0])
    assert "write_file" not in bound(later, 0)  # the policy comes from the checkpoint
    (tmp_path / "reader" / "SKILL.md").unlink()
    (tmp_path / "reader").rmdir()
    gone = ScriptedChatModel(script=["gone"])
    turn(graph_for(gone, tmp_path, saver=saver, store=store), "removed")
    assert "- reader:" not in listing_text(gone.requests[0])
    assert "reader: ref" in skill_data(gone.requests[0])
    assert "no longer available" in skill_data(gone.requests[0])


# --- other sources and paths ------------------------------------------------------------


def test_store_skills_load_through_the_async_path() -> None:
    store = InMemoryStore()
    text = "---\nname: gamma\ndescription: From the Store.\n---\nGamma body."
    store.put(("skills",), "gamma", {"content": text, "files": {"notes/a.md": "A"}})
    main = ScriptedChatModel(script=[load("gamma", "c1"), "done"])
    graph = build_graph(
        checkpointer=InMemorySaver(),
        store=store,
        models=Models(main=main),
        tools=TOOLS,
        settings=Settings(skills_from_store=True, memory_extraction="off"),
    )
    config = {"configurable": {"thread_id": "s"}}
    result = asyncio.run(
        graph.ainvoke({"messages": [HumanMessage("use gamma")]}, config, context=CONTEXT)
    )
    assert "- gamma: From the Store. [store://skills/gamma/SKILL.md]" in listing_text(
        main.requests[0]
    )
    loaded = next(m for m in result["messages"] if isinstance(m, ToolMessage))
    assert "Gamma body." in str(loaded.content) and "notes/a.md" in str(loaded.content)


def test_skill_context_and_policy_persist_across_a_restart_on_postgres(
    tmp_path: Path, persistence: Persistence
) -> None:
    write_skill(tmp_path, "reader", allowed=["read_file"])
    thread = f"skills-{os.getpid()}-{id(tmp_path)}"
    first = ScriptedChatModel(script=[load("reader", "c1"), "loaded"])
    settings = Settings(skills_dirs=(str(tmp_path),), memory_extraction="off")
    graph = build_graph(
        checkpointer=persistence.checkpointer,
        store=persistence.store,
        models=Models(main=first),
        tools=TOOLS,
        settings=settings,
    )
    turn(graph, "load reader", thread)
    second = ScriptedChatModel(script=[call("write_file", {"path": "x", "text": "y"}, "c2"), "no"])
    rebuilt = build_graph(
        checkpointer=persistence.checkpointer,
        store=persistence.store,
        models=Models(main=second),
        tools=TOOLS,
        settings=settings,
    )
    messages = turn(rebuilt, "write", thread)
    assert active(rebuilt, thread) == ["reader"]
    assert "write_file" not in bound(second, 0)
    assert [m for m in messages if isinstance(m, ToolMessage)][-1].status == "error"
    assert WRITES == []


def test_without_skill_sources_requests_are_unchanged() -> None:
    main = ScriptedChatModel(script=["plain"])
    graph = build_graph(
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
        models=Models(main=main),
        tools=TOOLS,
        settings=Settings(memory_extraction="off"),
    )
    turn(graph, "/anything goes")
    assert main.requests[0][0].content == Settings().system_prompt
    assert listing_text(main.requests[0]) == ""
    assert "load_skill" not in bound(main, 0)
    assert skill_data(main.requests[0]) == ""


def test_skills_work_with_ctxgraph_embedded_as_a_subgraph(tmp_path: Path) -> None:
    write_skill(tmp_path, "reader", allowed=["read_file"])
    main = ScriptedChatModel(
        script=[
            load("reader", "c1"),
            "loaded",
            call("write_file", {"path": "x", "text": "y"}, "c2"),
            "refused",
        ]
    )
    settings = Settings(skills_dirs=(str(tmp_path),), memory_extraction="off")
    parent_builder = StateGraph(MessagesState, context_schema=Context)
    parent_builder.add_node(
        "assistant", as_subgraph(models=Models(main=main), tools=TOOLS, settings=settings)
    )
    parent_builder.add_edge(START, "assistant")
    parent_builder.add_edge("assistant", END)
    parent = parent_builder.compile(checkpointer=InMemorySaver(), store=InMemoryStore())
    config = {"configurable": {"thread_id": "p"}}
    parent.invoke({"messages": [HumanMessage("load reader")]}, config, context=CONTEXT)
    result = parent.invoke({"messages": [HumanMessage("write")]}, config, context=CONTEXT)
    assert "write_file" not in bound(main, 2)
    assert [m for m in result["messages"] if isinstance(m, ToolMessage)][-1].status == "error"
    assert WRITES == []
    child = parent.get_state({"configurable": {"thread_id": "p", "checkpoint_ns": "assistant"}})
    assert [e["name"] for e in child.values["skill_context"]] == ["reader"]


def test_allowed_tools_no_bound_tool_has_are_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_skill(tmp_path, "shell", allowed=["run_shell", "read_file"])
    main = ScriptedChatModel(script=["one", "two"])
    graph = graph_for(main, tmp_path)
    with caplog.at_level(logging.WARNING, logger="ctxgraph.skills"):
        turn(graph, "hi")
        turn(graph, "again")
    reports = [r.getMessage() for r in caplog.records if "run_shell" in r.getMessage()]
    assert len(reports) == 1  # once per reading of the skills, not per call
    assert "allowed-tools" in reports[0] and str(tmp_path / "shell") in reports[0]
    assert "read_file" not in reports[0].split("unknown tool", 1)[1].split("(")[0]
