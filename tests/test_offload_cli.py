"""``ctxgraph threads artifact`` and ``threads show`` on threads with offloaded content."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from ctxgraph.graph import build_graph
from ctxgraph.nodes.offload.refs import OFFLOAD_ARGS_KEY, OFFLOAD_KEY
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.artifacts import ArtifactStore
from ctxgraph.store.persistence.connection import Persistence
from tests.support.cli import run_ctxgraph
from tests.support.scripted import demo_summarizer

CTX = Context(user_id="u1")
MIDDLE = "MIDDLE-SENTINEL-7373: only the artifact keeps this line"


def paste(lines: int = 700) -> str:
    rows = [f"{i:05d}\tthe quick brown fox ✓ 漢字 jumps over the lazy dog 🦊" for i in range(lines)]
    rows[lines // 2] = MIDDLE
    return "\n".join(rows) + "\n"


def big_result(lines: int = 600) -> str:
    return "\n".join(f"row {i:05d}: status=shipped depot=Leeds" for i in range(lines))


@tool
def fetch_report(name: str) -> str:
    """Fetch a stored report by name."""
    return big_result()


@tool
def write_file(path: str, content: str) -> str:
    """Write a file."""
    return f"wrote {len(content)} characters to {path}"


def agent(request: list[BaseMessage]) -> AIMessage:
    """Answers; "fetch" fetches a large report, "write" writes a large file."""
    if isinstance(request[-1], ToolMessage):
        return AIMessage("Done.")
    text = str(request[-1].content)
    if text == "fetch":
        call = {"name": "fetch_report", "args": {"name": "q3"}, "id": "f1"}
        return AIMessage("", tool_calls=[call])
    if text == "write":
        args = {"path": "out.txt", "content": paste(300)}
        call = {"name": "write_file", "args": args, "id": "w1"}
        return AIMessage("", id="w-ai", tool_calls=[call])
    return AIMessage("ok")


def config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def make_graph(persistence: Persistence, **settings: Any) -> Any:
    return build_graph(
        models=Models(main=ScriptedChatModel(responder=agent), summary=demo_summarizer()),
        tools=[fetch_report, write_file],
        settings=Settings(
            offload_input_tokens=2_000, memory_extraction="off", memory_mode="off", **settings
        ),
        checkpointer=persistence.checkpointer,
        store=persistence.store,
    )


def say(graph: Any, thread_id: str, text: str, message_id: str | None = None) -> None:
    message = HumanMessage(text, id=message_id) if message_id else HumanMessage(text)
    graph.invoke({"messages": [message]}, config(thread_id), context=CTX)


def input_ref(graph: Any, thread_id: str, message_id: str) -> str:
    state = graph.get_state(config(thread_id)).values
    [message] = [m for m in state["messages"] if m.id == message_id]
    return str(message.additional_kwargs[OFFLOAD_KEY]["ref"])


def test_threads_artifact_prints_the_content_and_names_what_is_unknown(
    python: str, subprocess_env: dict[str, str], persistence: Persistence, thread_id: str
) -> None:
    text = paste()
    graph = make_graph(persistence)
    say(graph, thread_id, text, "big")
    ref = input_ref(graph, thread_id, "big")

    shown = run_ctxgraph(python, subprocess_env, "threads", "artifact", thread_id, ref)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == text
    owner = run_ctxgraph(
        python, subprocess_env, "threads", "artifact", thread_id, ref, "--user", "u1"
    )
    assert owner.returncode == 0, owner.stderr
    assert owner.stdout == text

    unknown = "art-0123456789abcdef01234567"
    for args, named in (
        ((thread_id, unknown), unknown),
        ((thread_id, "not-a-ref"), "not-a-ref"),
        (("t-never-saved", ref), "t-never-saved"),
    ):
        refused = run_ctxgraph(python, subprocess_env, "threads", "artifact", *args)
        assert refused.returncode == 2, (args, refused.stdout, refused.stderr)
        assert refused.stdout == ""
        [line] = refused.stderr.splitlines()
        assert line.startswith("ctxgraph: ") and named in line
    stranger = run_ctxgraph(
        python, subprocess_env, "threads", "artifact", thread_id, ref, "--user", "mallory"
    )
    assert stranger.returncode == 2
    assert "belongs to another user" in stranger.stderr and stranger.stdout == ""


def test_threads_show_prints_the_full_input_in_the_window_and_in_the_archive(
    python: str, subprocess_env: dict[str, str], persistence: Persistence, thread_id: str
) -> None:
    text = paste()
    graph = make_graph(persistence, trigger_messages=10, keep_messages=2)
    say(graph, thread_id, text, "big")
    ref = input_ref(graph, thread_id, "big")
    note = f"(full text from artifact {ref}; the model saw its beginning and end and the ref)"

    in_window = run_ctxgraph(python, subprocess_env, "threads", "show", thread_id)
    assert in_window.returncode == 0, in_window.stderr
    assert f"[1] user: {text}\n    {note}\n" in in_window.stdout

    for turn in range(2, 8):
        say(graph, thread_id, f"question {turn}")
    assert graph.get_state(config(thread_id)).values["compaction"]["version"] >= 1
    archived = run_ctxgraph(python, subprocess_env, "threads", "show", thread_id, "--summary")
    assert archived.returncode == 0, archived.stderr
    out = archived.stdout
    assert f"[1] user: {text}\n    {note}\n" in out
    assert out.index(MIDDLE) < out.index("──── compaction v1:")
    assert f"- {ref}: user input, " in out[out.index("\nledger (recorded by code") :]

    # Once the artifact is gone, the message is shown as the model saw it, and says so.
    assert ArtifactStore(persistence.store, thread_id).evict(0, keep=()) == [ref]
    missing = run_ctxgraph(python, subprocess_env, "threads", "show", thread_id)
    assert missing.returncode == 0, missing.stderr
    assert MIDDLE not in missing.stdout
    assert "[1] user: [user input offloaded]" in missing.stdout
    assert (
        f"(the full text of this input was offloaded to artifact {ref}, which is missing "
        "(evicted, or never stored); shown as the model saw it)"
    ) in missing.stdout


def test_threads_show_names_the_refs_of_offloaded_results_and_arguments(
    python: str, subprocess_env: dict[str, str], persistence: Persistence, thread_id: str
) -> None:
    graph = make_graph(persistence, offload_tokens=1_000)
    say(graph, thread_id, "fetch")
    say(graph, thread_id, "write")
    # Offload the (old) write call's argument at once: any request is over 85% of this.
    low = Context(
        user_id="u1",
        settings=Settings(trigger_tokens=30_000, keep_messages=2, offload_args_fraction=0.01),
    )
    graph.invoke({"messages": [("user", "thanks")]}, config(thread_id), context=low)
    state = graph.get_state(config(thread_id)).values
    [result] = [m for m in state["messages"] if m.type == "tool" and m.name == "fetch_report"]
    result_ref = result.additional_kwargs[OFFLOAD_KEY]["ref"]
    [call] = [m for m in state["messages"] if m.id == "w-ai"]
    [entry] = call.additional_kwargs[OFFLOAD_ARGS_KEY]

    shown = run_ctxgraph(python, subprocess_env, "threads", "show", thread_id)
    assert shown.returncode == 0, shown.stderr
    assert f"[offloaded: artifact {result_ref}, " in shown.stdout
    assert f"argument content of [w1] offloaded: artifact {entry['ref']}, " in shown.stdout

    printed = run_ctxgraph(python, subprocess_env, "threads", "artifact", thread_id, result_ref)
    assert printed.returncode == 0 and printed.stdout == big_result()
    printed = run_ctxgraph(python, subprocess_env, "threads", "artifact", thread_id, entry["ref"])
    assert printed.returncode == 0 and printed.stdout == paste(300)
