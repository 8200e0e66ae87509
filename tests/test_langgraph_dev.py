"""``langgraph dev`` serves ctxgraph from ``langgraph.json``; the LangGraph SDK drives it.

The server is a real ``langgraph dev`` process on a free local port, running the offline
scripted model, so the test needs no network beyond 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_sync_client

REPO_ROOT = Path(__file__).resolve().parent.parent
GRAPH_ID = "ctxgraph"
STARTUP_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0
ORPHAN_GRACE = 2.0
RUN_TIMEOUT = 60.0

CALCULATION = "What is 17 * 23?"
RECALL = "What did I say before?"
CONTEXT = {"user_id": "studio-user"}

# Variables that would reach a real provider or a tracing service, or change the graph.
_DROPPED_PREFIXES = ("OPENAI_", "LANGSMITH_", "LANGCHAIN_", "CTXGRAPH_")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def server_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED_PREFIXES)}
    env.update(
        {
            "LANGGRAPH_CLI_NO_ANALYTICS": "1",
            "LANGGRAPH_NO_VERSION_CHECK": "true",
            "CTXGRAPH_MODEL": "scripted",
            "CTXGRAPH_SKILLS_DIRS": str(REPO_ROOT / "examples" / "skills"),
            "CTXGRAPH_SUBAGENTS_DIR": str(REPO_ROOT / "examples" / "subagents"),
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def server_output(log: Path) -> str:
    text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    return text[-20_000:] or "(no output)"


def wait_until_ready(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    """Poll ``GET /ok`` until it answers 200; fail with the server's output otherwise."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        code = process.poll()
        if code is not None:
            pytest.fail(
                f"langgraph dev exited with code {code} before it was ready:\n{server_output(log)}"
            )
        # langgraph dev silently moves to another port when the requested one is taken;
        # whatever answers on the picked port then is not this server.
        if "already in use" in server_output(log):
            pytest.fail(f"the port picked for langgraph dev was taken:\n{server_output(log)}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{url}/ok", timeout=2.0, trust_env=False).status_code == 200:
                return
        time.sleep(0.2)
    pytest.fail(
        f"langgraph dev was not ready at {url}/ok within {STARTUP_TIMEOUT:.0f}s:\n"
        f"{server_output(log)}"
    )


def group_members(pgid: int) -> list[int]:
    """PIDs of the process group's live (non-zombie) members."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        return [pgid]
    members = []
    for stat in proc.glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # Fields after the parenthesised command: state, ppid, pgrp, ...
            state, _ppid, pgrp = stat.read_text().rsplit(")", 1)[1].split()[:3]
            if int(pgrp) == pgid and state != "Z":
                members.append(int(stat.parent.name))
    return members


def wait_for_group_exit(pgid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while group_members(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def signal_group(pgid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Terminate the server's whole process group, kill what lingers, leave no orphan."""
    pgid = process.pid  # start_new_session=True: the server leads its own group
    signal_group(pgid, signal.SIGTERM)
    try:
        process.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        signal_group(pgid, signal.SIGKILL)
        process.wait(timeout=STOP_TIMEOUT)
    # Children that ignored SIGTERM would outlive the server as orphans.
    if not wait_for_group_exit(pgid, ORPHAN_GRACE):
        signal_group(pgid, signal.SIGKILL)
        wait_for_group_exit(pgid, STOP_TIMEOUT)
    leftovers = group_members(pgid)
    assert not leftovers, f"processes {leftovers} of langgraph dev's group outlived it"


BACKGROUND_SETTINGS = {
    "compaction_mode": "background",
    "trigger_messages": 14,
    "keep_messages": 2,
    "background_fraction": 0.5,
    "background_wait_s": 10,
    "memory_extraction": "off",
}
"""Settings under which a few runs queue a background job on the server and apply it."""


def drive_background_compaction(
    client: Any, graph_id: str, context: dict[str, Any]
) -> tuple[str, list[str]]:
    """Run short turns on a new thread until a background compaction is applied.

    Below the trigger, a job is queued as a ``compaction_worker`` run while the runs go
    on, and a later run applies its result. Returns the thread and the custom events seen.
    """
    background = {**context, "settings": BACKGROUND_SETTINGS}
    filler = "The carrier confirmed the pickup window and the customs papers. " * 6
    thread_id = str(client.threads.create()["thread_id"])
    events: list[str] = []
    for n in range(1, 13):
        for part in client.runs.stream(
            thread_id,
            graph_id,
            input={"messages": [{"role": "user", "content": f"Note {n}: dock {n}. {filler}"}]},
            context=background,
            stream_mode="custom",
        ):
            if part.event == "custom" and isinstance(part.data, dict):
                events.append(str(part.data.get("event")))
        if "compaction.applied" in events:
            break
        time.sleep(0.3)  # the job's summary is instant with the scripted model
    return thread_id, events


@contextlib.contextmanager
def dev_server(folder: Path, env: dict[str, str], log: Path, *args: str) -> Iterator[str]:
    """Run ``langgraph dev`` in ``folder`` on a free port; yield its base URL once it is ready.

    The server's output goes to ``log``, and is printed (shown by pytest only when the
    test fails) after the server and its process group have stopped.
    """
    executable = Path(sys.executable).parent / "langgraph"
    assert executable.exists(), f"{executable} is missing: install the dev extras"
    port = free_port()
    command = [str(executable), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1"]
    command += ["--port", str(port), *args]
    with log.open("wb") as output:
        process = subprocess.Popen(
            command,
            cwd=folder,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_ready(process, url, log)
        yield url
    finally:
        try:
            stop(process)
        finally:
            print(f"--- langgraph dev output ---\n{server_output(log)}")


@contextlib.contextmanager
def langgraph_dev(log: Path) -> Iterator[str]:
    """Run ``langgraph dev`` from the repo root; yield its base URL once it is ready."""
    # The in-memory server persists threads under .langgraph_api/ in its working directory.
    dev_data = REPO_ROOT / ".langgraph_api"
    had_dev_data = dev_data.exists()
    try:
        with dev_server(REPO_ROOT, server_env(), log) as url:
            yield url
    finally:
        if not had_dev_data:  # leave the work tree as the test found it
            shutil.rmtree(dev_data, ignore_errors=True)


def message_text(message: dict[str, Any]) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


@pytest.mark.server
def test_langgraph_dev_serves_ctxgraph(tmp_path: Path) -> None:
    with (
        langgraph_dev(tmp_path / "langgraph-dev.log") as url,
        get_sync_client(url=url, api_key=None, timeout=RUN_TIMEOUT) as client,
    ):
        assistants = client.assistants.search(graph_id=GRAPH_ID)
        assert [a["graph_id"] for a in assistants] == [GRAPH_ID]

        thread_id = client.threads.create()["thread_id"]
        first = client.runs.wait(
            thread_id,
            GRAPH_ID,
            input={"messages": [{"role": "user", "content": CALCULATION}]},
            context=CONTEXT,
        )
        assert isinstance(first, dict), first
        assert [m["type"] for m in first["messages"]] == ["human", "ai", "tool", "ai"]

        second = client.runs.wait(
            thread_id,
            GRAPH_ID,
            input={"messages": [{"role": "user", "content": RECALL}]},
            context=CONTEXT,
        )
        assert isinstance(second, dict), second

        state = client.threads.get_state(thread_id)
        assert state["next"] == []
        messages = state["values"]["messages"]
        assert isinstance(messages, list)
        assert [m["type"] for m in messages] == ["human", "ai", "tool", "ai", "human", "ai"]
        question, call, result, answer, recall, recalled = messages

        assert message_text(question) == CALCULATION
        assert [c["name"] for c in call["tool_calls"]] == ["calculator"]
        assert call["tool_calls"][0]["args"] == {"expression": "17 * 23"}
        assert result["tool_call_id"] == call["tool_calls"][0]["id"]
        assert result["status"] == "success"
        assert message_text(result) == "391"
        assert not answer["tool_calls"]
        assert "391" in message_text(answer)
        assert message_text(recall) == RECALL
        assert not recalled["tool_calls"]
        assert message_text(recalled) == f'Earlier in this thread you said: "{CALCULATION}".'
        assert second["messages"] == messages

        runs = client.runs.list(thread_id)
        assert sorted(run["status"] for run in runs) == ["success", "success"]

        # Skills come from the configured folders: a slash activation runs under the
        # skill's tool policy, and an unknown name is answered without the model.
        skill_thread = client.threads.create()["thread_id"]
        slashed = client.runs.wait(
            skill_thread,
            GRAPH_ID,
            input={"messages": [{"role": "user", "content": "/trip-budget What is 180 * 7?"}]},
            context=CONTEXT,
        )
        assert isinstance(slashed, dict), slashed
        assert [m["type"] for m in slashed["messages"]] == ["human", "ai", "tool", "ai"]
        assert "trip-budget" in message_text(slashed["messages"][-1])
        skill_state = client.threads.get_state(skill_thread)["values"]
        assert [(e["name"], e["source"]) for e in skill_state["skill_context"]] == [
            ("trip-budget", "slash")
        ]
        unknown = client.runs.wait(
            skill_thread,
            GRAPH_ID,
            input={"messages": [{"role": "user", "content": "/trip-budgt again"}]},
            context=CONTEXT,
        )
        assert isinstance(unknown, dict), unknown
        assert message_text(unknown["messages"][-1]) == (
            "There is no skill called /trip-budgt. Did you mean /trip-budget?"
        )

        # Subagents come from CTXGRAPH_SUBAGENTS_DIR: the child runs and is recorded.
        task_thread = client.threads.create()["thread_id"]
        delegated = client.runs.wait(
            task_thread,
            GRAPH_ID,
            input={
                "messages": [{"role": "user", "content": "Ask the researcher to list the piers."}]
            },
            context=CONTEXT,
        )
        assert isinstance(delegated, dict), delegated
        assert [m["type"] for m in delegated["messages"]] == ["human", "ai", "tool", "ai"]
        result = delegated["messages"][2]
        assert result["name"] == "task" and result["status"] == "success", message_text(result)
        assert message_text(result).startswith("Noted: list the piers.\n\n[subagent researcher:")
        entries = client.threads.get_state(task_thread)["values"]["delegations"]["entries"]
        assert [(e["type"], e["status"]) for e in entries] == [("researcher", "completed")]

        # Background compaction on the server: a job is queued below the trigger as a
        # compaction_worker run while the runs go on, and a later run applies its result.
        bg_thread, events = drive_background_compaction(client, GRAPH_ID, CONTEXT)
        # The job went through the server's queue, as a compaction_worker run.
        assert events[:1] == ["compaction.queued"], events
        assert "compaction.applied" in events, events
        bg_state = client.threads.get_state(bg_thread)["values"]
        assert bg_state["compaction"]["version"] == 1
        assert bg_state["compaction_job"] is None
