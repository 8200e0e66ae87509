"""Background compaction: jobs start below the triggers, results apply at the trigger."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import Graph, build_graph
from ctxgraph.nodes.compaction.background import wait_for_jobs
from ctxgraph.nodes.compaction.jobs import JobResult, JobResults, folded_hash
from ctxgraph.nodes.compaction.summarizer import parse_sections
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_replies import demo_summary
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.namespaces import thread_compaction_jobs
from ctxgraph.store.persistence.archive import verify_thread
from ctxgraph.store.persistence.compaction_lease import leases_for
from tests.support.background_child import SETTINGS
from tests.support.scripted import is_summary_request, prompt_text

CTX = Context(user_id="u1")
FILLER = (
    "The warehouse scanned the parcel at the dock and the carrier confirmed the pickup window. " * 6
).strip()
BACKGROUND = SETTINGS


class Summarizer:
    """A summary model that counts its calls and can be held until released."""

    def __init__(self) -> None:
        self.calls = 0
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, messages: list[BaseMessage]) -> AIMessage:
        with self._lock:
            self.calls += 1
        self.entered.set()
        assert self.gate.wait(30), "the test never released the summary model"
        return demo_summary(prompt_text(messages))


def chat_main(messages: list[BaseMessage]) -> AIMessage:
    assert not is_summary_request(messages)
    asked = [m for m in messages if isinstance(m, HumanMessage)][-1]
    return AIMessage(content=f"Noted: {asked.text}")


@dataclass
class Session:
    graph: Graph
    store: BaseStore
    summarizer: Summarizer
    thread: str = field(default_factory=lambda: f"bg-{uuid.uuid4().hex[:8]}")
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def config(self) -> dict[str, Any]:
        return {"configurable": {"thread_id": self.thread}}

    def turn(self, n: int, text: str | None = None) -> list[tuple[str, Any]]:
        """Run turn ``n``; what it streamed, as (mode, chunk), custom and values."""
        text = text or f"Turn {n}: remember that parcel P-{n:04d} goes to dock {n % 7}. {FILLER}"
        streamed = list(
            self.graph.stream(
                {"messages": [HumanMessage(content=text, id=f"h{n}")]},
                self.config,
                context=CTX,
                stream_mode=["custom", "values"],
            )
        )
        self.events.extend(chunk for mode, chunk in streamed if mode == "custom")
        return streamed

    def state(self) -> dict[str, Any]:
        return dict(self.graph.get_state(self.config).values)

    def names(self) -> list[str]:
        return [event["event"] for event in self.events]


def session(
    settings: Settings = BACKGROUND,
    *,
    store: BaseStore | None = None,
    checkpointer: Any = None,
    main: Callable[[list[BaseMessage]], AIMessage] = chat_main,
    tools: Sequence[BaseTool] = (),
) -> Session:
    summarizer = Summarizer()
    store = store or InMemoryStore()
    graph = build_graph(
        checkpointer=checkpointer or InMemorySaver(),
        store=store,
        models=Models(
            main=ScriptedChatModel(responder=main),
            summary=ScriptedChatModel(responder=summarizer),
        ),
        tools=list(tools),
        settings=settings,
    )
    return Session(graph, store, summarizer)


def test_a_job_starts_below_the_trigger_and_its_result_is_applied_without_a_second_call() -> None:
    s = session()
    n = 0
    while "compaction.started" not in s.names():
        n += 1
        s.turn(n)
        assert n < 10
    assert s.summarizer.calls <= 1
    started = n
    assert wait_for_jobs(10) == 0
    assert s.summarizer.calls == 1
    assert s.state()["compaction_job"]["state"] == "running"
    assert "summary" not in s.state() or s.state()["summary"] is None
    while "compaction.applied" not in s.names():
        n += 1
        s.turn(n)
        assert n < 20
    assert n == started + 1  # applied as soon as the run passed compact again
    assert s.summarizer.calls == 1
    state = s.state()
    assert state["compaction"]["version"] == 1
    assert state["compaction_job"] is None
    assert verify_thread(s.store, s.thread, state["compaction"]).ok


def turns_until(s: Session, event: str, first: int, limit: int = 20) -> int:
    """Run turns from ``first`` until ``event`` is seen; returns the last turn's number."""
    n = first
    while True:
        s.turn(n)
        if f"compaction.{event}" in s.names():
            return n
        n += 1
        assert n < first + limit, f"no compaction.{event} in {limit} turns: {s.names()}"


def test_the_events_carry_tokens_and_latency() -> None:
    s = session()
    n = turns_until(s, "started", 1)
    assert wait_for_jobs(10) == 0
    turns_until(s, "applied", n + 1)
    started = next(e for e in s.events if e["event"] == "compaction.started")
    applied = next(e for e in s.events if e["event"] == "compaction.applied")
    assert started["thread_id"] == s.thread and started["base_version"] == 0
    assert started["token"] == 1 and started["folded"] > 0 and started["tokens_before"] > 0
    assert applied["base_version"] == 0 and applied["version"] == 1
    assert applied["folded"] == started["folded"]
    assert applied["tokens_after"] < applied["tokens_before"]
    assert applied["latency_s"] >= 0


async def test_the_async_path_applies_a_job_result_too() -> None:
    s = session()
    events: list[str] = []

    async def turn(n: int) -> None:
        text = f"Turn {n}: parcel P-{n:04d} goes to dock {n % 7}. {FILLER}"
        async for chunk in s.graph.astream(
            {"messages": [HumanMessage(content=text, id=f"h{n}")]},
            s.config,
            context=CTX,
            stream_mode="custom",
        ):
            events.append(chunk["event"])

    n = 0
    while "compaction.started" not in events:
        n += 1
        await turn(n)
    assert wait_for_jobs(10) == 0
    while "compaction.applied" not in events:
        n += 1
        await turn(n)
        assert n < 20
    assert s.summarizer.calls == 1
    state = (await s.graph.aget_state(s.config)).values
    assert state["compaction"]["version"] == 1


def test_a_result_whose_base_was_superseded_is_discarded() -> None:
    s = session()
    n = turns_until(s, "started", 1)
    assert wait_for_jobs(10) == 0
    results = JobResults(s.store, s.thread).results()
    assert [r.base_version for _, r in results if r] == [0]
    # Compact inline meanwhile: lower the trigger for one run so it fires at once.
    inline = Settings(trigger_messages=6, keep_messages=2, compaction_mode="inline")
    s.graph.invoke(
        {"messages": [HumanMessage(content=f"Inline turn. {FILLER}")]},
        s.config,
        context=Context(user_id="u1", settings=inline),
    )
    assert s.state()["compaction"]["version"] == 1
    n = turns_until(s, "discarded", n + 1)
    discarded = next(e for e in s.events if e["event"] == "compaction.discarded")
    assert discarded["reason"].startswith("superseded: the job started from v0")
    assert all(r is None or r.base_version != 0 for _, r in JobResults(s.store, s.thread).results())


@tool
def parcel_status(parcel: str) -> str:
    """The status of a parcel."""
    return f"{parcel} is at the dock."


def tool_main(messages: list[BaseMessage]) -> AIMessage:
    """Looks every parcel up with a tool before it answers."""
    last = messages[-1]
    if isinstance(last, ToolMessage):
        return AIMessage(content=f"Checked: {last.text[:30]}")
    asked = [m for m in messages if isinstance(m, HumanMessage)][-1]
    call = {"name": "parcel_status", "args": {"parcel": asked.text[:12]}, "id": f"c-{asked.id}"}
    return AIMessage(content="", tool_calls=[call])


def test_a_result_is_applied_only_in_a_step_with_no_tool_call_pending() -> None:
    s = session(main=tool_main, tools=[parcel_status])
    steps: list[tuple[str, Any]] = []
    n = 0
    while "compaction.applied" not in s.names():
        n += 1
        assert n < 20, s.names()
        steps.extend(s.turn(n, f"Turn {n}: where is parcel P-{n:04d}? {FILLER}"))
    assert s.names().count("compaction.applied") == 1
    applied = next(i for i, (mode, chunk) in enumerate(steps) if chunk == s.events[-1])
    # The state the applying step read: the last full state streamed before the event.
    read = next(chunk for mode, chunk in reversed(steps[:applied]) if mode == "values")
    window = read["messages"]
    answered = {m.tool_call_id for m in window if isinstance(m, ToolMessage)}
    pending = [
        call["id"]
        for m in window
        if isinstance(m, AIMessage)
        for call in m.tool_calls
        if call["id"] not in answered
    ]
    assert pending == [], f"applied while tool calls {pending} waited for their results"
    assert any(isinstance(m, AIMessage) and m.tool_calls for m in window)
    assert verify_thread(s.store, s.thread, s.state()["compaction"]).ok


def test_an_unreadable_stored_result_is_discarded_and_a_good_one_still_applies() -> None:
    s = session()
    namespace = thread_compaction_jobs(s.thread)
    s.store.put(namespace, "v0-garbage", {"not": "a job result"}, index=False)
    turns_until(s, "applied", 1)
    discarded = [e for e in s.events if e["event"] == "compaction.discarded"]
    assert [e["reason"] for e in discarded] == ["unreadable job result"]
    assert discarded[0]["base_version"] is None and discarded[0]["token"] is None
    assert s.store.get(namespace, "v0-garbage") is None
    assert s.summarizer.calls == 1
    assert s.state()["compaction"]["version"] == 1


def test_a_stale_worker_stores_nothing_and_a_stale_result_is_not_applied(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from ctxgraph.nodes.compaction import background

    # The worker freezes: it never renews its lease, which then expires.
    monkeypatch.setattr(background._Renewal, "_loop", lambda self: None)
    s = session(replace(BACKGROUND, compaction_lease_s=1.0))
    s.summarizer.gate.clear()
    turns_until(s, "started", 1)
    assert s.summarizer.entered.wait(5)
    leases = leases_for(s.store)
    deadline = 0
    taken = None
    while taken is None and deadline < 40:
        taken = leases.acquire(s.thread, "another-worker", 60)
        if taken is None:
            threading.Event().wait(0.1)
            deadline += 1
    assert taken is not None and taken.token == 2
    with caplog.at_level(logging.WARNING, logger="ctxgraph.compaction"):
        s.summarizer.gate.set()
        assert wait_for_jobs(10) == 0
    assert "compaction.discarded" in caplog.text and "stale worker" in caplog.text
    assert JobResults(s.store, s.thread).results() == []
    # A result stored under the old token (a worker that checked just before the takeover)
    # is refused when a step would apply it.
    folded = s.state()["messages"][:4]
    JobResults(s.store, s.thread).put(
        JobResult(
            base_version=0,
            folded_ids=tuple(str(m.id) for m in folded),
            folded_hash=folded_hash(folded),
            sections=parse_sections(
                "SESSION INTENT\nTrack parcels.\nSUMMARY\nParcels were noted.\n"
                "ARTIFACTS\nP-0001\nNEXT STEPS\nGo on."
            ),
            token=1,
            holder="frozen-worker",
            started_at="2026-12-01T00:00:00+00:00",
            stored_at="2026-12-01T00:00:01+00:00",
            latency_s=1.0,
            tokens_before=1000,
        )
    )
    s.events.clear()
    s.turn(50)
    discarded = next(e for e in s.events if e["event"] == "compaction.discarded")
    assert discarded["reason"] == "stale worker: token 1 is no longer the thread's current token"
    assert "compaction.applied" not in s.names()
    leases.release(taken)


def test_at_the_trigger_a_running_job_is_waited_for() -> None:
    s = session(replace(BACKGROUND, background_wait_s=10.0))
    s.summarizer.gate.clear()
    n = turns_until(s, "started", 1)
    assert s.summarizer.entered.wait(5)
    # Turns go on below the trigger while the job runs.
    while s.state()["messages"] and len(s.state()["messages"]) < 12:
        n += 1
        s.turn(n)
    assert "compaction.applied" not in s.names()
    threading.Timer(0.5, s.summarizer.gate.set).start()
    n = turns_until(s, "applied", n + 1)
    assert s.summarizer.calls == 1
    assert s.state()["compaction"]["version"] == 1


def test_a_job_past_the_wait_leaves_the_trigger_to_compact_inline() -> None:
    s = session()  # background_wait_s=0
    first_call = threading.Event()

    def slow_first(messages: list[BaseMessage]) -> AIMessage:
        if not first_call.is_set():
            first_call.set()
            assert release.wait(30)
        return demo_summary(prompt_text(messages))

    release = threading.Event()
    s.summarizer.gate.set()
    graph = build_graph(
        checkpointer=InMemorySaver(),
        store=s.store,
        models=Models(
            main=ScriptedChatModel(responder=chat_main),
            summary=ScriptedChatModel(responder=slow_first),
        ),
        settings=BACKGROUND,
    )
    s.graph = graph
    n = turns_until(s, "started", 1)
    while s.state().get("compaction", {}).get("version") != 1:
        n += 1
        s.turn(n)
        assert n < 20
    assert "compaction.applied" not in s.names()  # the trigger compacted inline
    release.set()
    assert wait_for_jobs(10) == 0
    n = turns_until(s, "discarded", n + 1)
    discarded = [e for e in s.events if e["event"] == "compaction.discarded"]
    assert discarded[0]["reason"].startswith("superseded: the job started from v0")


def test_a_folded_message_edited_after_the_snapshot_discards_the_result() -> None:
    s = session()
    s.summarizer.gate.clear()
    n = turns_until(s, "started", 1)
    assert s.summarizer.entered.wait(5)
    first = s.state()["messages"][0]
    s.graph.update_state(
        s.config, {"messages": [HumanMessage(content="Edited first message.", id=first.id)]}
    )
    s.summarizer.gate.set()
    assert wait_for_jobs(10) == 0
    n = turns_until(s, "discarded", n + 1)
    discarded = next(e for e in s.events if e["event"] == "compaction.discarded")
    assert discarded["reason"].startswith("history edited: a folded message changed")
    assert JobResults(s.store, s.thread).results() == []


def test_settings_name_a_bad_background_value() -> None:
    from ctxgraph.state.settings import SettingsError

    with pytest.raises(SettingsError, match="compaction_mode must be 'inline' or 'background'"):
        Settings(compaction_mode="later")  # type: ignore[arg-type]
    with pytest.raises(SettingsError, match="background_fraction must be a number between 0"):
        Settings(background_fraction=1.0)
    with pytest.raises(SettingsError, match="background_wait_s must be a number of seconds"):
        Settings(background_wait_s=-1)
    with pytest.raises(SettingsError, match="compaction_lease_s must be a number of seconds"):
        Settings(compaction_lease_s=0.5)
    assert Settings.from_env({"CTXGRAPH_COMPACTION_MODE": "background"}).compaction_mode == (
        "background"
    )
    assert Settings().compaction_mode == "inline"


def saved_session(turns: int) -> Session:
    """A session whose thread has ``turns`` turns in inline mode (no job started yet)."""
    s = session(replace(BACKGROUND, compaction_mode="inline", trigger_messages=60))
    for n in range(1, turns + 1):
        s.turn(n)
    return s


def test_run_job_reports_a_failed_job_and_one_still_running() -> None:
    from ctxgraph.graph.builder import compaction_node

    s = saved_session(4)
    values: Any = s.state()

    def failing(messages: list[BaseMessage]) -> AIMessage:
        raise RuntimeError("summary endpoint down")

    broken = compaction_node(
        models=Models(
            main=ScriptedChatModel(responder=failing), summary=ScriptedChatModel(responder=failing)
        ),
        # Without the model-free record, a job no model can summarize fails.
        settings=replace(BACKGROUND, summary_fallback="off"),
    )
    failed = broken.run_job(values, s.store, s.thread, wait_s=10)
    assert failed.state == "failed" and failed.result is None and failed.lease is not None
    assert leases_for(s.store).current(s.thread) is not None
    assert not leases_for(s.store).current(s.thread).live  # type: ignore[union-attr]

    held = Summarizer()
    held.gate.clear()
    slow = compaction_node(
        models=Models(
            main=ScriptedChatModel(responder=chat_main),
            summary=ScriptedChatModel(responder=held),
        ),
        settings=BACKGROUND,
    )
    running = slow.run_job(values, s.store, s.thread, wait_s=0.2)
    assert running.state == "running" and running.worker is not None
    # A second caller joins the running job instead of starting one: no second call.
    joined_while_running = slow.run_job(values, s.store, s.thread, wait_s=0.2)
    assert joined_while_running.state == "running" and joined_while_running.lease is None
    held.gate.set()
    assert wait_for_jobs(10) == 0
    ready = slow.run_job(values, s.store, s.thread, wait_s=1)
    assert ready.state == "ready" and ready.result is not None
    assert held.calls == 1


def test_run_job_on_a_short_thread_has_nothing_to_fold() -> None:
    from ctxgraph.graph.builder import compaction_node

    s = saved_session(1)
    node = compaction_node(
        models=Models(
            main=ScriptedChatModel(responder=chat_main),
            summary=ScriptedChatModel(responder=Summarizer()),
        ),
        settings=BACKGROUND,
    )
    assert node.run_job(s.state(), s.store, s.thread, wait_s=1).state == "nothing to fold"  # type: ignore[arg-type]
