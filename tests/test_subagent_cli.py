"""Subagents on the command line: ``threads show --subagents``, progress lines and Ctrl-C."""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, cast

import pytest
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    AnyMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.store.memory import InMemoryStore
from typing_extensions import TypedDict

from ctxgraph.graph.builder import Graph
from ctxgraph.graph.cli import turns
from ctxgraph.graph.cli.main import build_parser
from ctxgraph.graph.cli.threads import load_thread, show_thread
from ctxgraph.nodes.subagents.stop import registered, stop_all
from ctxgraph.state.context import Context
from ctxgraph.state.delegations import DelegationEntry, DelegationRecord, merge_delegations
from ctxgraph.store.artifacts import ArtifactStore
from ctxgraph.store.persistence.connection import Persistence
from tests.support.cli import REPO_ROOT, run_ctxgraph

THREAD = "t-subagents"
CONFIG: RunnableConfig = {"configurable": {"thread_id": THREAD}}


class ChildState(TypedDict):
    """A child's state: its transcript."""

    messages: Annotated[list[AnyMessage], add_messages]


class ParentState(TypedDict):
    """The parent's state: messages and the delegation record, with the real reducer."""

    messages: Annotated[list[AnyMessage], add_messages]
    delegations: Annotated[DelegationRecord, merge_delegations]


class RecordState(TypedDict):
    """A parent whose ``delegations`` is written whole (to checkpoint folded counts)."""

    messages: Annotated[list[AnyMessage], add_messages]
    delegations: DelegationRecord


def in_memory() -> Persistence:
    """An in-memory checkpointer and Store in the shape ``show_thread`` takes."""
    return Persistence(
        checkpointer=cast(Any, InMemorySaver()), store=cast(Any, InMemoryStore()), uri="memory"
    )


def task_call(call_id: str, kind: str, description: str) -> dict[str, Any]:
    """A ``task`` tool call of the parent's model."""
    args = {"description": description, "subagent_type": kind}
    return {"name": "task", "args": args, "id": call_id, "type": "tool_call"}


def child_graph() -> Any:
    """A child that answers at once; compiled without a checkpointer, so it uses the parent's."""

    def model(state: ChildState) -> dict[str, Any]:
        """The child's model: one answer."""
        return {"messages": [AIMessage(content="Order A-1 ships on Friday.", id="child-answer")]}

    return StateGraph(ChildState).add_node("model", model).add_edge(START, "model").compile()


def delegating_thread(persistence: Persistence) -> str:
    """Run a parent that delegates three tasks; returns the first child's checkpoint_ns.

    ``c1`` runs a real child (checkpointed under the parent's thread) and also has a
    transcript artifact; ``c2`` has only a transcript artifact (its namespace holds no
    checkpoint); ``c3`` has neither.
    """
    artifacts = ArtifactStore(persistence.store, THREAD)
    refs = {
        call_id: artifacts.put(
            "tool_result", text, source_id=call_id, tool_name="task", part="transcript"
        ).ref
        for call_id, text in (
            ("c1", "[1] system: not shown, the checkpoint wins\n"),
            ("c2", "[1] system: You are a helper.\n[2] user: Check the \x1b[31mlog\n"),
        )
    }
    child = child_graph()
    seen: dict[str, str] = {}

    def model(state: ParentState) -> dict[str, Any]:
        """The parent's model: three task calls, each with its running entry."""
        calls = [
            task_call("c1", "research", "Find when order A-1 ships"),
            task_call("c2", "review", "Check the log"),
            task_call("c3", "research", "Count the orders"),
        ]
        running = [
            {
                "id": call["id"],
                "type": call["args"]["subagent_type"],
                "brief": call["args"]["description"],
                "status": "running",
                "started_at": "2026-01-01T00:00:00+00:00",
            }
            for call in calls
        ]
        return {
            "messages": [AIMessage(content="", tool_calls=calls, id="parent-ai")],
            "delegations": running,
        }

    def subagent(state: ParentState, config: RunnableConfig) -> dict[str, Any]:
        """Run the first child for real; the others end without a checkpoint of their own."""
        seen["ns"] = str(config["configurable"]["checkpoint_ns"])
        child.invoke(
            {
                "messages": [
                    SystemMessage(content="You are a researcher.", id="child-system"),
                    HumanMessage(content="Find when order A-1 ships", id="child-task"),
                ]
            }
        )
        finals: list[DelegationEntry] = [
            {
                "id": "c1",
                "type": "research",
                "brief": "Find when order A-1 ships",
                "status": "completed",
                "stop_reason": "final_answer",
                "elapsed_s": 2.46,
                "transcript_ref": refs["c1"],
                "checkpoint_ns": seen["ns"],
                "tokens_in": 120,
                "tokens_out": 40,
            },
            {
                "id": "c2",
                "type": "review",
                "brief": "Check the log",
                "status": "failed",
                "stop_reason": "error",
                "elapsed_s": 0.5,
                "transcript_ref": refs["c2"],
                "checkpoint_ns": "subagent:gone",
                "tokens_in": 10,
                "tokens_out": 0,
            },
            {
                "id": "c3",
                "type": "research",
                "brief": "Count the orders",
                "status": "timed_out",
                "stop_reason": "timeout",
                "elapsed_s": 30.0,
                "transcript_ref": None,
                "checkpoint_ns": None,
            },
        ]
        results = [
            ToolMessage(
                content=f"result of {entry['id']}",
                name="task",
                tool_call_id=entry["id"],
                id=f"result-{entry['id']}",
                additional_kwargs={"subagent": {"status": entry["status"]}},
            )
            for entry in finals
        ]
        return {"messages": results, "delegations": finals}

    parent = (
        StateGraph(ParentState)
        .add_node("model", model)
        .add_node("subagent", subagent)
        .add_edge(START, "model")
        .add_edge("model", "subagent")
        .compile(checkpointer=persistence.checkpointer, store=persistence.store)
    )
    first: Any = {"messages": [HumanMessage(content="When does A-1 ship?", id="u1")]}
    parent.invoke(first, CONFIG)
    return seen["ns"]


PARENT_LINES = [
    f"thread {THREAD}: 5 messages",
    "[1] user: When does A-1 ship?",
    "[2] assistant (tool calls)",
    '  → task({"description": "Find when order A-1 ships", "subagent_type": "research"}) [c1]',
    '  → task({"description": "Check the log", "subagent_type": "review"}) [c2]',
    '  → task({"description": "Count the orders", "subagent_type": "research"}) [c3]',
    "[3] tool task [c1]: result of c1",
    "[4] tool task [c2]: result of c2",
    "[5] tool task [c3]: result of c3",
    "delegations: 3 (1 completed, 1 failed, 1 timed_out)",
]


def test_show_without_the_flag_counts_the_delegations() -> None:
    persistence = in_memory()
    delegating_thread(persistence)
    out = io.StringIO()
    show_thread(persistence, THREAD, out)
    assert out.getvalue() == "\n".join(PARENT_LINES) + "\n"
    record = load_thread(persistence, THREAD).delegations
    assert [entry["status"] for entry in record["entries"]] == ["completed", "failed", "timed_out"]


def test_show_subagents_prints_each_child_from_checkpoint_artifact_or_neither() -> None:
    persistence = in_memory()
    ns = delegating_thread(persistence)
    ref = ArtifactStore.ref_for("tool_result", "c2", "transcript")
    out = io.StringIO()
    show_thread(persistence, THREAD, out, subagents=True)
    assert out.getvalue().splitlines() == [
        *PARENT_LINES,
        "",
        "subagent research (task call c1): completed (final_answer), 2.5s, 120 in / 40 out",
        "  brief: Find when order A-1 ships",
        f"transcript from the child's checkpoint (namespace {ns}):",
        "[1] system: You are a researcher.",
        "[2] user: Find when order A-1 ships",
        "[3] assistant: Order A-1 ships on Friday.",
        "",
        "subagent review (task call c2): failed (error), 0.5s, 10 in / 0 out",
        "  brief: Check the log",
        f"transcript from artifact {ref} (no checkpoint of the child at namespace subagent:gone):",
        "[1] system: You are a helper.",
        "[2] user: Check the \\x1b[31mlog",
        "",
        "subagent research (task call c3): timed_out (timeout), 30.0s",
        "  brief: Count the orders",
        "the transcript cannot be found: no checkpoint namespace recorded for the child and "
        "no transcript artifact",
    ]


def test_show_subagents_escapes_names_reports_a_missing_artifact_and_folded_counts() -> None:
    persistence = in_memory()
    missing = ArtifactStore.ref_for("tool_result", "c9", "transcript")
    record: DelegationRecord = {
        "entries": [
            {
                "id": "c9\x1b",
                "type": "re\x07search",
                "brief": "Read \x1b[2Jthe log",
                "status": "cancelled",
                "stop_reason": "cancelled",
                "elapsed_s": 1.0,
                "transcript_ref": missing,
                "checkpoint_ns": "subagent:nowhere",
            },
            {"id": "c10", "type": "research", "brief": "Still going", "status": "running"},
        ],
        "folded": {"failed": 1, "completed": 3},
    }
    graph = (
        StateGraph(RecordState)
        .add_node("noop", lambda state: {})
        .add_edge(START, "noop")
        .compile(checkpointer=persistence.checkpointer, store=persistence.store)
    )
    graph.invoke({"messages": [HumanMessage(content="hi", id="u1")], "delegations": record}, CONFIG)
    out = io.StringIO()
    show_thread(persistence, THREAD, out, subagents=True)
    assert out.getvalue().splitlines() == [
        f"thread {THREAD}: 1 message",
        "[1] user: hi",
        "delegations: 6 (1 running, 3 completed, 1 failed, 1 cancelled)",
        "",
        "subagent re\\x07search (task call c9\\x1b): cancelled (cancelled), 1.0s",
        "  brief: Read \\x1b[2Jthe log",
        "the transcript cannot be found: no checkpoint of the child at namespace "
        f"subagent:nowhere, and transcript artifact {missing} is missing (evicted, or never "
        "stored)",
        "",
        "subagent research (task call c10): running",
        "  brief: Still going",
        "the transcript cannot be found: no checkpoint namespace recorded for the child and "
        "no transcript artifact",
        "",
        "earlier delegations, folded out of the record (no transcript shown): 3 completed, "
        "1 failed",
    ]


def test_show_subagents_of_a_thread_that_never_delegated() -> None:
    persistence = in_memory()
    graph = (
        StateGraph(ChildState)
        .add_node("noop", lambda state: {})
        .add_edge(START, "noop")
        .compile(checkpointer=persistence.checkpointer)
    )
    graph.invoke({"messages": [HumanMessage(content="hi", id="u1")]}, CONFIG)
    plain, flagged = io.StringIO(), io.StringIO()
    show_thread(persistence, THREAD, plain)
    show_thread(persistence, THREAD, flagged, subagents=True)
    assert plain.getvalue() == f"thread {THREAD}: 1 message\n[1] user: hi\n"
    assert flagged.getvalue() == (
        plain.getvalue() + "\nno delegations: the thread has not called the task tool\n"
    )


def test_threads_show_has_the_subagents_flag(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    assert parser.parse_args(["threads", "show", "t1", "--subagents"]).subagents is True
    assert parser.parse_args(["threads", "show", "t1"]).subagents is False
    with pytest.raises(SystemExit):
        parser.parse_args(["threads", "show", "--help"])
    assert "--subagents" in capsys.readouterr().out


def running(call_id: str, kind: str, brief: str) -> dict[str, Any]:
    """A running entry, as the model node writes it."""
    return {"id": call_id, "type": kind, "brief": brief, "status": "running"}


def test_progress_lines_replace_the_task_call_and_result_lines() -> None:
    read = {"name": "read_file", "args": {"path": "a.txt"}, "id": "r1", "type": "tool_call"}
    answer = AIMessage(
        content="Delegating.",
        tool_calls=[task_call("c1", "research", "Find A-1"), read, task_call("c2", "review", "x")],
    )
    events: list[tuple[str, Any]] = [
        ("messages", (AIMessageChunk(content="Delegating."), {"langgraph_node": "model"})),
        (
            "updates",
            {
                "model": {
                    "messages": [answer],
                    "delegations": [
                        running("c0", "research", "From an abandoned run")
                        | {
                            "status": "cancelled",
                            "stop_reason": "cancelled",
                        },
                        running("c1", "research", "Find \x1b[1mA-1"),
                        running("c2", "review", "x"),
                    ],
                }
            },
        ),
        (
            "updates",
            {"tools": {"messages": [ToolMessage("hello", name="read_file", tool_call_id="r1")]}},
        ),
        (
            "updates",
            {
                "subagent": {
                    "messages": [
                        ToolMessage("A-1 ships Friday", name="task", tool_call_id="c1"),
                        ToolMessage("no answer", name="task", tool_call_id="c2"),
                    ],
                    "delegations": [
                        running("c1", "research", "Find A-1")
                        | {"status": "completed", "stop_reason": "final_answer", "elapsed_s": 2.46},
                        running("c2", "review", "x")
                        | {"status": "timed_out", "stop_reason": "timeout", "elapsed_s": 30},
                    ],
                }
            },
        ),
        ("messages", (AIMessageChunk(content="Friday."), {"langgraph_node": "model"})),
        ("updates", {"model": {"messages": [AIMessage(content="Friday.")]}}),
    ]
    out = io.StringIO()
    final = turns._print_events(iter(events), out)
    assert final is not None and final.content == "Friday."
    assert out.getvalue().splitlines() == [
        "assistant: Delegating.",
        "  subagent research: running — Find \\x1b[1mA-1",
        '  → read_file({"path": "a.txt"}) [r1]',
        "  subagent review: running — x",
        "  subagent research: cancelled (cancelled)",
        "  ← read_file [r1]: hello",
        "  subagent research: completed in 2.5s",
        "  subagent review: timed_out in 30.0s (timeout)",
        "assistant: Friday.",
    ]


def test_a_task_call_without_an_entry_keeps_the_generic_line() -> None:
    answer = AIMessage(content="", tool_calls=[task_call("c1", "research", "Find A-1")])
    out = io.StringIO()
    turns._print_events(iter([("updates", {"model": {"messages": [answer]}})]), out)
    assert out.getvalue() == (
        '  → task({"description": "Find A-1", "subagent_type": "research"}) [c1]\n'
    )


class _InterruptingOut(io.StringIO):
    """A terminal where Ctrl-C arrives while the first line is printed."""

    def write(self, text: str) -> int:
        """Raise ``KeyboardInterrupt`` as the user presses Ctrl-C."""
        raise KeyboardInterrupt


class _OneUpdateGraph:
    """Stands in for the compiled graph: its stream yields one model update."""

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[tuple[str, Any]]:
        """The model's answer with a task call."""
        answer = AIMessage(content="", tool_calls=[task_call("c1", "research", "Find A-1")])
        yield ("updates", {"model": {"messages": [answer]}})


def test_ctrl_c_stops_running_subagents(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def recording(reason: str = "cancelled") -> int:
        """Record the call, then stop for real."""
        calls.append(reason)
        return stop_all(reason)

    monkeypatch.setattr(turns, "stop_all", recording)
    with registered() as flag, pytest.raises(turns.TurnInterruptedError) as interrupted:
        turns.stream_turn(
            cast(Graph, _OneUpdateGraph()),
            "hi",
            config={},
            context=cast(Context, None),
            out=_InterruptingOut(),
        )
    worker: threading.Thread = interrupted.value.worker
    worker.join(timeout=5)
    assert calls == ["cancelled"]
    assert flag.is_set() and flag.reason == "cancelled"


def test_chat_delegates_and_a_later_process_prints_the_childs_transcript(
    python: str, subprocess_env: dict[str, str], thread_id: str
) -> None:
    env = subprocess_env | {"CTXGRAPH_SUBAGENTS_DIR": str(REPO_ROOT / "examples" / "subagents")}
    asked = "Ask the researcher to list the quiet hotels near Kyoto station."
    chat = run_ctxgraph(
        python, env, "chat", "--user", "u1", "--thread", thread_id, stdin=asked + "\n"
    )
    assert chat.returncode == 0, chat.stderr
    assert (
        "  subagent researcher: running — list the quiet hotels near Kyoto station.\n"
        in chat.stdout
    )
    assert re.search(r"  subagent researcher: completed in \d+\.\ds\n", chat.stdout)
    assert "assistant: The subagent reported: Noted: list the quiet hotels" in chat.stdout

    # Another process, on the same Postgres: the child's own checkpoint is read back.
    shown = run_ctxgraph(python, env, "threads", "show", thread_id, "--subagents")
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "delegations: 1 (1 completed)\n" in out
    assert re.search(
        r"subagent researcher \(task call call_[0-9a-f]+\): completed \(final_answer\), "
        r"\d+\.\ds, [1-9]\d* in / [1-9]\d* out\n",
        out,
    )
    child = out[out.index("transcript from the child's checkpoint (namespace subagent:") :]
    assert "[1] system: # Researcher" in child
    assert "[2] user: list the quiet hotels near Kyoto station.\n" in child
    assert "[3] assistant: Noted: list the quiet hotels near Kyoto station." in child
    assert asked not in child  # the parent's message never reached the child


def test_a_bad_subagents_folder_is_one_line_and_exit_2(
    python: str, subprocess_env: dict[str, str], thread_id: str, tmp_path: Path
) -> None:
    (tmp_path / "helper.md").write_text("---\nname: helper\n---\nNo description.\n")
    env = subprocess_env | {"CTXGRAPH_SUBAGENTS_DIR": str(tmp_path)}
    result = run_ctxgraph(python, env, "chat", "--user", "u1", "--thread", thread_id, stdin="hi\n")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("ctxgraph: CTXGRAPH_SUBAGENTS_DIR: ")
    assert "helper.md" in lines[0] and "description" in lines[0]
