"""Background compaction on the embedded Postgres: one job per thread across threads and
processes, results that outlive their process, and turns that never wait for a summary."""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from ctxgraph.graph import build_graph
from ctxgraph.nodes.compaction.background import wait_for_jobs
from ctxgraph.nodes.compaction.jobs import JobResults
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.persistence.archive import verify_thread
from ctxgraph.store.persistence.connection import Persistence
from tests.support.background_child import SETTINGS, turn_events, turn_text
from tests.support.cli import start_python
from tests.support.scripted import is_summary_request, prompt_text

CTX = Context(user_id="background-user")


def start_child(
    env: dict[str, str], uri: str, thread: str, mode: str, log: Path, **extra: str
) -> subprocess.Popen[str]:
    """Start ``tests.support.background_child`` with ``extra`` added to ``env``.

    It never reads its standard input, so that pipe stays unused.
    """
    return start_python(
        sys.executable,
        {**env, **extra},
        "-m",
        "tests.support.background_child",
        uri,
        thread,
        mode,
        str(log),
    )


def finished(child: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    return dict(json.loads(out.strip().splitlines()[-1]))


def summary_calls(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


class SlowSession:
    """A slow scripted session: the main model and the summary model each sleep."""

    def __init__(self, main_delay: float, summary_delay: float) -> None:
        self.main_delay = main_delay
        self.summary_delay = summary_delay
        self.summary_calls = 0
        self._lock = threading.Lock()

    def main(self, messages: list[BaseMessage]) -> AIMessage:
        if is_summary_request(messages):
            return self.summary(messages)
        time.sleep(self.main_delay)
        asked = [m for m in messages if isinstance(m, HumanMessage)][-1]
        return AIMessage(content=f"Noted: {asked.text[:40]}")

    def summary(self, messages: list[BaseMessage]) -> AIMessage:
        from ctxgraph.state.demo_replies import demo_summary

        with self._lock:
            self.summary_calls += 1
        time.sleep(self.summary_delay)
        return demo_summary(prompt_text(messages))

    def models(self) -> Models:
        return Models(
            main=ScriptedChatModel(responder=self.main),
            summary=ScriptedChatModel(responder=self.summary),
        )


def seed_thread(persistence: Persistence, thread: str, turns: int) -> None:
    """Turns in inline mode with high triggers: a thread just below the background level."""
    quiet = Settings(trigger_messages=60, keep_messages=2, memory_extraction="off")
    graph = build_graph(
        checkpointer=persistence.checkpointer,
        store=persistence.store,
        models=SlowSession(0, 0).models(),
        settings=quiet,
    )
    for n in range(1, turns + 1):
        graph.invoke(
            {"messages": [HumanMessage(content=turn_text(n))]},
            {"configurable": {"thread_id": thread}},
            context=CTX,
        )


def test_eight_concurrent_triggers_in_threads_make_one_summary_call(
    persistence: Persistence,
) -> None:
    thread = f"bg-{uuid.uuid4().hex[:8]}"
    seed_thread(persistence, thread, 3)
    session = SlowSession(0, 1.0)
    graphs = [
        build_graph(
            checkpointer=persistence.checkpointer,
            store=persistence.store,
            models=session.models(),
            settings=SETTINGS,
        )
        for _ in range(8)
    ]
    events: list[str] = []
    barrier = threading.Barrier(8)

    def trigger(index: int) -> None:
        barrier.wait()
        text = f"Concurrent note {index}. {turn_text(9)}"
        config = {"configurable": {"thread_id": thread}}
        for chunk in turn_events(graphs[index], config, text, CTX):
            events.append(chunk["event"])

    workers = [threading.Thread(target=trigger, args=(i,)) for i in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert wait_for_jobs(30) == 0
    assert events.count("compaction.started") == 1, events
    assert events.count("compaction.skipped_busy") + events.count("compaction.started") == 8
    assert session.summary_calls == 1
    assert len(JobResults(persistence.store, thread).results()) == 1


def test_eight_concurrent_triggers_in_processes_make_one_summary_call(
    persistence: Persistence, database_uri: str, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    thread = f"bg-{uuid.uuid4().hex[:8]}"
    seed_thread(persistence, thread, 3)
    log = tmp_path / "summary-calls.log"
    go = tmp_path / "go-folder"
    go.mkdir()
    children = [
        start_child(
            subprocess_env,
            database_uri,
            thread,
            "turn",
            log,
            CTXGRAPH_TEST_TEXT=f"Process note {i}. {turn_text(9)}",
            CTXGRAPH_TEST_SUMMARY_DELAY="1.0",
            CTXGRAPH_TEST_GO=str(go),
        )
        for i in range(8)
    ]
    deadline = time.monotonic() + 120
    while len(list(go.glob("ready-*"))) < 8:
        assert time.monotonic() < deadline, "the children never got ready"
        assert all(child.poll() is None for child in children), "a child ended early"
        time.sleep(0.05)
    (go / "go").touch()
    reports = [finished(child) for child in children]
    events = [event for report in reports for event in report["events"]]
    assert events.count("compaction.started") == 1, events
    assert events.count("compaction.skipped_busy") == 7, events
    assert summary_calls(log) == 1
    assert len(JobResults(persistence.store, thread).results()) == 1


def test_a_result_stored_before_the_process_died_is_applied_after_restart(
    persistence: Persistence, database_uri: str, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    thread = f"bg-{uuid.uuid4().hex[:8]}"
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    first = finished(start_child(subprocess_env, database_uri, thread, "until-ready", first_log))
    assert first["events"][-1] == "compaction.started" and first["version"] is None
    assert summary_calls(first_log) == 1
    stored = JobResults(persistence.store, thread).results()
    assert len(stored) == 1 and stored[0][1] is not None
    second = finished(
        start_child(
            subprocess_env,
            database_uri,
            thread,
            "refuse",
            second_log,
            CTXGRAPH_TEST_FIRST_TURN=str(first["turns"] + 1),
        )
    )
    assert "compaction.applied" in second["events"], second
    assert summary_calls(second_log) == 0
    assert second["version"] == 1
    graph = build_graph(
        checkpointer=persistence.checkpointer,
        store=persistence.store,
        models=SlowSession(0, 0).models(),
        settings=SETTINGS,
    )
    mark = graph.get_state({"configurable": {"thread_id": thread}}).values["compaction"]
    assert verify_thread(persistence.store, thread, mark).ok


def test_no_turn_of_a_30_turn_background_session_waits_for_a_summary(
    persistence: Persistence,
) -> None:
    thread = f"bg-{uuid.uuid4().hex[:8]}"
    session = SlowSession(0.5, 2.0)
    settings = Settings(
        trigger_messages=24,
        keep_messages=2,
        memory_extraction="off",
        compaction_mode="background",
        background_fraction=0.4,
        background_wait_s=10,
    )
    graph = build_graph(
        checkpointer=persistence.checkpointer,
        store=persistence.store,
        models=session.models(),
        settings=settings,
    )
    config: Any = {"configurable": {"thread_id": thread}}
    times: list[float] = []
    events: list[str] = []
    for n in range(1, 31):
        started = time.perf_counter()
        for chunk in turn_events(graph, config, turn_text(n), CTX):
            events.append(chunk["event"])
        times.append(time.perf_counter() - started)
    assert wait_for_jobs(30) == 0
    median = statistics.median(times)
    slowest = max(times)
    assert events.count("compaction.applied") >= 2, events
    assert "compaction.discarded" not in events and "compaction.failed" not in events
    assert slowest <= 1.5 * median, (
        f"slowest turn {slowest:.2f} s, median {median:.2f} s: {[round(t, 2) for t in times]}"
    )
    state = graph.get_state(config).values
    assert state["compaction"]["version"] == events.count("compaction.applied")
    assert verify_thread(persistence.store, thread, state["compaction"]).ok


async def test_the_async_path_on_async_postgres(database_uri: str) -> None:
    from ctxgraph.store.persistence import open_async_persistence

    thread = f"bg-{uuid.uuid4().hex[:8]}"
    session = SlowSession(0, 0.3)
    async with open_async_persistence(database_uri) as db:
        graph = build_graph(
            checkpointer=db.checkpointer,
            store=db.store,
            models=session.models(),
            settings=SETTINGS,
        )
        config: Any = {"configurable": {"thread_id": thread}}
        events: list[str] = []
        for n in range(1, 20):
            async for chunk in graph.astream(
                {"messages": [HumanMessage(content=turn_text(n))]},
                config,
                context=CTX,
                stream_mode="custom",
            ):
                events.append(chunk["event"])
            if "compaction.applied" in events:
                break
            await asyncio.sleep(0.4)  # the job writes through the store's event loop
        assert events[:1] == ["compaction.started"] and "compaction.applied" in events, events
        assert session.summary_calls == events.count("compaction.started")
        mark = (await graph.aget_state(config)).values["compaction"]
        assert mark["version"] == 1
