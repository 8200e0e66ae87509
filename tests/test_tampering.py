"""Readers see committed history only, and say so when an archived record was modified."""

from __future__ import annotations

import io
import json
import logging
import re
import uuid
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.prebuilt import ToolRuntime

from ctxgraph.graph import Graph, build_graph
from ctxgraph.graph.cli.threads import show_thread, verify_thread_command
from ctxgraph.nodes.tools.history import read_history
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_model import demo_models
from ctxgraph.state.demo_replies import demo_chat_reply
from ctxgraph.state.messages import message_origin
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.namespaces import thread_archive
from ctxgraph.store.persistence.archive import (
    TAMPERED,
    ThreadArchive,
    build_record,
    version_key,
)
from ctxgraph.store.persistence.connection import Persistence
from tests.support.cli import run_ctxgraph

CTX = Context(user_id="u-tamper")
SETTINGS = Settings(trigger_messages=8, keep_messages=2, memory_extraction="off")
FILLER = " ".join(["The carrier confirmed the pickup window and the customs papers."] * 12)
NOTES = [f"Note {n}: parcel P-{100 + n} leaves dock {n}. {FILLER}" for n in range(1, 6)]
REWRITTEN = "rewritten after the fact"


def history_agent(messages: list[BaseMessage]) -> AIMessage:
    """The demo chat model, except that ``history {json}`` calls ``read_history`` with it."""
    users = [m for m in messages if isinstance(m, HumanMessage) and not message_origin(m)]
    said = users[-1].text if users else ""
    if said.startswith("history ") and not isinstance(messages[-1], ToolMessage):
        call = {"name": "read_history", "args": json.loads(said[8:]), "id": f"rh-{users[-1].id}"}
        return AIMessage("", tool_calls=[call])
    return demo_chat_reply(messages)


def graph_on(persistence: Persistence) -> Graph:
    """A new graph object: what a fresh process builds."""
    demo = demo_models()
    return build_graph(
        checkpointer=persistence.checkpointer,
        store=persistence.store,
        models=Models(main=ScriptedChatModel(responder=history_agent), summary=demo.summary),
        settings=SETTINGS,
    )


def run(graph: Graph, thread_id: str, text: str) -> dict[str, Any]:
    config = {"configurable": {"thread_id": thread_id}}
    return graph.invoke({"messages": [HumanMessage(text)]}, config, context=CTX)


def history_result(graph: Graph, thread_id: str, **args: Any) -> ToolMessage:
    """The result ``read_history(**args)`` gave the model in one turn."""
    result = run(graph, thread_id, "history " + json.dumps(args))
    [answer] = [m for m in result["messages"] if isinstance(m, ToolMessage)][-1:]
    return answer


def history(graph: Graph, thread_id: str, **args: Any) -> str:
    """The text ``read_history(**args)`` returned; it must have succeeded."""
    answer = history_result(graph, thread_id, **args)
    assert answer.status == "success", answer.content
    return str(answer.content)


def mark_of(graph: Graph, thread_id: str) -> dict[str, Any]:
    config = {"configurable": {"thread_id": thread_id}}
    return dict(graph.get_state(config).values.get("compaction") or {})


def compacted(persistence: Persistence, thread_id: str) -> Graph:
    """A thread whose five notes compacted once: version 1 holds the first notes."""
    graph = graph_on(persistence)
    for note in NOTES:
        run(graph, thread_id, note)
    assert mark_of(graph, thread_id)["version"] == 1
    return graph


def tamper(persistence: Persistence, thread_id: str) -> None:
    """Edit the first message of version 1 in the Store, as someone with database access."""
    item = persistence.store.get(thread_archive(thread_id), version_key(1))
    assert item is not None
    value = dict(item.value)
    assert value["messages"][0]["data"]["content"] == NOTES[0]
    value["messages"][0]["data"]["content"] = REWRITTEN
    persistence.store.put(thread_archive(thread_id), version_key(1), value)


def shown(persistence: Persistence, thread_id: str) -> str:
    out = io.StringIO()
    show_thread(persistence, thread_id, out)
    return out.getvalue()


# --- a record modified after it was archived ---------------------------------------------


def test_threads_show_marks_a_modified_record(
    persistence: Persistence,
    thread_id: str,
    python: str,
    subprocess_env: dict[str, str],
) -> None:
    compacted(persistence, thread_id)
    assert TAMPERED not in shown(persistence, thread_id)

    tamper(persistence, thread_id)
    result = run_ctxgraph(python, subprocess_env, "threads", "show", thread_id)

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    marker = next(i for i, line in enumerate(lines) if TAMPERED in line)
    assert lines[marker] == (
        f"!!!! compaction v1: {TAMPERED} (version 1's messages do not match its chain hash "
        "(messages edited, added, dropped or reordered)); the messages below may not be what "
        "was said !!!!"
    )
    assert lines[marker + 1] == f"[1] user: {REWRITTEN}"
    assert sum(TAMPERED in line for line in lines) == 1
    assert result.stdout.index(lines[marker]) < result.stdout.index("──── compaction v1:")
    verified = run_ctxgraph(python, subprocess_env, "threads", "verify", thread_id)
    assert verified.returncode == 1
    assert "BROKEN at version 1" in verified.stdout


def test_read_history_and_the_next_compaction_flag_a_modified_record(
    persistence: Persistence, thread_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    compacted(persistence, thread_id)
    tamper(persistence, thread_id)
    fresh = graph_on(persistence)

    with caplog.at_level(logging.WARNING, logger="ctxgraph.compaction"):
        by_query = history(fresh, thread_id, query="rewritten after")
        by_version = history(fresh, thread_id, version=1)
        for n in range(6, 10):
            run(fresh, thread_id, f"Note {n}: parcel P-{100 + n} leaves dock {n}. {FILLER}")

    assert by_query.splitlines() == [f"v1 ({TAMPERED}): human: {REWRITTEN}"]
    lines = by_version.splitlines()
    assert lines[0].startswith("archive version 1 (")
    assert lines[1].startswith(f"note: {TAMPERED} (version 1's messages do not match its chain")
    assert lines[2] == f"human: {REWRITTEN}"
    assert mark_of(fresh, thread_id)["version"] >= 3  # the fresh graph compacted twice
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.name == "ctxgraph.compaction" and TAMPERED in r.getMessage()
    ]
    # Once per graph and version, at its first compaction of the thread.
    assert warnings == [
        f"archive version 1 of thread {thread_id}: {TAMPERED} (version 1's messages do not "
        "match its chain hash (messages edited, added, dropped or reordered)); "
        f"`ctxgraph threads verify {thread_id}` checks the whole chain"
    ]


def test_an_intact_archive_logs_no_warning(
    persistence: Persistence, thread_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    compacted(persistence, thread_id)
    fresh = graph_on(persistence)
    with caplog.at_level(logging.WARNING, logger="ctxgraph.compaction"):
        for n in range(6, 10):
            run(fresh, thread_id, f"Note {n}: parcel P-{100 + n} leaves dock {n}. {FILLER}")

    assert mark_of(fresh, thread_id)["version"] >= 2
    assert [r.getMessage() for r in caplog.records if r.name == "ctxgraph.compaction"] == []


# --- a prepared version above the mark is not history ----------------------------------------

LEFTOVER_TEXT = "a message of a compaction that crashed before its commit"


def tool_runtime(
    persistence: Persistence, thread_id: str, mark: dict[str, Any]
) -> ToolRuntime[Context, dict[str, Any]]:
    """What the tools node injects into ``read_history``: the state, config and Store."""
    return ToolRuntime(
        state={"messages": [], "compaction": mark},
        context=CTX,
        config={"configurable": {"thread_id": thread_id}},
        stream_writer=lambda _: None,
        tool_call_id="rh-direct",
        store=persistence.store,
    )


def leave_prepared_version(persistence: Persistence, thread_id: str) -> dict[str, Any]:
    """Archive a version 2 that no checkpoint committed, as a crash would leave it."""
    archive = ThreadArchive(persistence.store, thread_id)
    committed = archive.get(1)
    assert committed is not None
    record = build_record(
        version=2,
        messages=[HumanMessage(LEFTOVER_TEXT, id=f"leftover-{uuid.uuid4().hex[:6]}")],
        summary={"schema_version": 1, "summary": "never committed"},
        previous_cursor=committed["cursor"],
        previous_chain_hash=committed["chain_hash"],
    )
    archive.put(record, committed_version=1)
    return {name: record[name] for name in ("version", "cursor", "checksum", "chain_hash")}


def test_readers_leave_a_prepared_version_out_and_the_next_compaction_replaces_it(
    persistence: Persistence, thread_id: str
) -> None:
    graph = compacted(persistence, thread_id)
    before = shown(persistence, thread_id)
    its_mark = leave_prepared_version(persistence, thread_id)

    assert shown(persistence, thread_id) == before
    verified = io.StringIO()
    assert verify_thread_command(persistence, thread_id, verified) == 0
    assert verified.getvalue() == (
        f"thread {thread_id}: intact (1 compaction version verified against the thread state)\n"
        f"thread {thread_id}: also found v2 above the committed mark (v1): it is a prepared "
        "leftover of an interrupted compaction, not part of the history and harmless; the "
        "next compaction replaces it\n"
    )
    # read_history reads the mark from the state the tool runs in.
    at_v1 = tool_runtime(persistence, thread_id, mark_of(graph, thread_id))
    with pytest.raises(ValueError, match="there is no archived compaction version 2"):
        read_history(at_v1, version=2)
    assert read_history(at_v1, query="crashed before") == (
        "no archived message contains 'crashed before'"
    )
    assert read_history(at_v1, version=1).startswith("archive version 1 (")
    # Had a checkpoint committed version 2, the same record would be history.
    at_v2 = tool_runtime(persistence, thread_id, its_mark)
    assert read_history(at_v2, query="crashed before").startswith("v2: human: a message")

    for n in range(6, 10):
        run(graph, thread_id, f"Note {n}: parcel P-{100 + n} leaves dock {n}. {FILLER}")
    assert mark_of(graph, thread_id)["version"] >= 2
    replaced = ThreadArchive(persistence.store, thread_id).get(2)
    assert replaced is not None and LEFTOVER_TEXT not in json.dumps(replaced["messages"])
    assert LEFTOVER_TEXT not in shown(persistence, thread_id)
    verified = io.StringIO()
    assert verify_thread_command(persistence, thread_id, verified) == 0
    assert re.fullmatch(
        r"thread \S+: intact \(\d+ compaction versions verified[^\n]*\n", verified.getvalue()
    )
