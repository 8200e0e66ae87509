"""Subagent lifecycle: durable child checkpoints, stopping, cancelling, timeouts and nesting.

The parent model is a ``ScriptedChatModel``; a child's model is ``SlowModel`` where the
test needs a child that is still working when it is stopped (every call sleeps, so a
20-step child would take 10 s and any test that finishes in a few seconds stopped it).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from pydantic import PrivateAttr

from ctxgraph import SubagentsPart
from ctxgraph.graph import build_graph
from ctxgraph.nodes.subagents.stop import running_count, stop_all
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.subagents import SubagentSpec
from ctxgraph.store.artifacts import ArtifactStore
from ctxgraph.store.persistence.connection import open_persistence
from tests.support import subagent_child as crossed
from tests.support.cli import run_module

CONTEXT = Context(user_id="lifecycle-user")
BASE = {"memory_extraction": "off", "memory_mode": "off"}
"""No memory model calls: every call of the parent model is an agent call."""

DELEGATE = "Please run both jobs."
PARENT_ANSWER = "parent done"
WORKER_PROMPT = "You are the worker. Run the steps one by one."
PARTIAL = "partial: found order A-1"
"""The busy child's only non-empty text, from its first answer."""
CHILD_STEPS = 20
DELAY = 0.5
"""Seconds each call of a ``SlowModel`` takes."""
STOP_GRACE = 5.0
"""Seconds a run may take to end once its children were told to stop."""


class SlowModel(ScriptedChatModel):
    """A scripted model whose every call takes ``delay`` seconds.

    Counts the calls started, those in flight, and those that saw ``CancelledError``.
    """

    delay: float = DELAY
    _counts: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _started: int = PrivateAttr(default=0)
    _in_flight: int = PrivateAttr(default=0)
    _cancelled: int = PrivateAttr(default=0)
    _since: dict[int, float] = PrivateAttr(default_factory=dict)
    """When each call in flight started, by call number."""

    @property
    def started(self) -> int:
        return self._started

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def cancelled(self) -> int:
        return self._cancelled

    def oldest_call_age(self) -> float:
        """Seconds since the oldest call in flight started (0 with none in flight)."""
        with self._counts:
            starts = list(self._since.values())
        return time.monotonic() - min(starts) if starts else 0.0

    def _begin(self) -> int:
        with self._counts:
            self._started += 1
            self._in_flight += 1
            self._since[self._started] = time.monotonic()
            return self._started

    def _end(self, number: int, *, cancelled: bool = False) -> None:
        with self._counts:
            self._in_flight -= 1
            self._cancelled += cancelled
            del self._since[number]

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        number = self._begin()
        try:
            time.sleep(self.delay)
        finally:
            self._end(number)
        return super()._generate(messages, *args, **kwargs)

    async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        number = self._begin()
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self._end(number, cancelled=True)
            raise
        self._end(number)
        return super()._generate(messages, *args, **kwargs)


@tool
def step(n: int) -> str:
    """Run step ``n`` of the job."""
    return f"step {n} done"


def busy_child(messages: list[BaseMessage]) -> AIMessage:
    """Calls ``step`` until ``CHILD_STEPS`` answers; only the first answer has text."""
    answers = sum(isinstance(m, AIMessage) for m in messages)
    if answers >= CHILD_STEPS - 1:
        return AIMessage(content="all steps done")
    call = {"name": "step", "args": {"n": answers}, "id": f"step-{answers}"}
    return AIMessage(content=PARTIAL if answers == 0 else "", tool_calls=[call])


def task_call(number: int, kind: str = "worker") -> dict[str, Any]:
    return {
        "name": "task",
        "args": {"description": f"job {number}", "subagent_type": kind},
        "id": f"task-{number}",
    }


def parent_reply(tasks: int) -> Callable[[list[BaseMessage]], AIMessage]:
    """Delegates ``tasks`` jobs when the user says ``DELEGATE``; otherwise answers."""

    def reply(messages: list[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, HumanMessage) and last.content == DELEGATE:
            return AIMessage(content="", tool_calls=[task_call(n) for n in range(1, tasks + 1)])
        return AIMessage(content=PARENT_ANSWER)

    return reply


def delegating_graph(
    child: ScriptedChatModel, tasks: int, **settings: Any
) -> tuple[Any, ScriptedChatModel]:
    """A graph whose parent delegates ``tasks`` jobs to ``worker`` (model ``child``)."""
    spec = SubagentSpec(
        name="worker",
        description="Works through numbered steps.",
        system_prompt=WORKER_PROMPT,
        tools=(step,),
        model=child,
    )
    parent = ScriptedChatModel(responder=parent_reply(tasks))
    graph = build_graph(
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
        models=Models(main=parent),
        settings=Settings(**BASE, **settings),
        parts=[SubagentsPart([spec])],
    )
    return graph, parent


def config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def statuses(values: dict[str, Any]) -> dict[str, tuple[str, str | None]]:
    """Each delegation's status and stop reason, by call id."""
    return {e["id"]: (e["status"], e.get("stop_reason")) for e in values["delegations"]["entries"]}


def task_results(messages: list[BaseMessage]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage) and m.name == "task"}


def delegations_data(request: list[BaseMessage]) -> str:
    """The text of the request's delegations data message (exactly one)."""
    found = [m for m in request if m.additional_kwargs.get("origin") == "delegations"]
    assert len(found) == 1, [m.additional_kwargs for m in request]
    content = found[0].content
    assert isinstance(content, str)
    return content


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


async def await_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Like ``wait_until``, yielding to the event loop; returns right after a True check."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


# --- 1. Durable child checkpoints -----------------------------------------------------


def test_child_checkpoint_and_transcript_outlive_the_process_that_ran_them(
    python: str, subprocess_env: dict[str, str], database_uri: str, thread_id: str
) -> None:
    ran = run_module(
        python, subprocess_env, "tests.support.subagent_child", database_uri, thread_id
    )
    assert ran.returncode == 0, ran.stderr
    report = json.loads(ran.stdout.strip().splitlines()[-1])
    assert report["last"] == crossed.PARENT_ANSWER

    # This process never ran the graph: everything below comes from the database.
    with open_persistence(database_uri) as persistence:
        saved = persistence.checkpointer.get_tuple(config(thread_id))
        assert saved is not None
        values = saved.checkpoint["channel_values"]
        (entry,) = values["delegations"]["entries"]
        assert entry["id"] == crossed.TASK_CALL_ID
        assert (entry["type"], entry["status"], entry["stop_reason"]) == (
            "clerk",
            "completed",
            "final_answer",
        )
        ns = entry["checkpoint_ns"]
        assert isinstance(ns, str) and ns
        result = task_results(values["messages"])[crossed.TASK_CALL_ID]
        assert result.additional_kwargs["subagent"]["checkpoint_ns"] == ns
        assert report["subagent"]["checkpoint_ns"] == ns
        assert result.content.startswith(crossed.CHILD_ANSWER)

        child = persistence.checkpointer.get_tuple(
            {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
        )
        assert child is not None, f"no child checkpoint in namespace {ns!r}"
        messages = child.checkpoint["channel_values"]["messages"]
        assert [type(m) for m in messages] == [
            SystemMessage,
            HumanMessage,
            AIMessage,
            ToolMessage,
            AIMessage,
        ]
        system, question, lookup, looked_up, answer = messages
        assert system.content == crossed.SYSTEM_PROMPT
        assert question.content == crossed.CHILD_TASK_TEXT
        assert [(c["name"], c["args"], c["id"]) for c in lookup.tool_calls] == [
            ("lookup_order", {"order_id": "A-17"}, crossed.LOOKUP_CALL_ID)
        ]
        assert isinstance(looked_up, ToolMessage)
        assert looked_up.tool_call_id == crossed.LOOKUP_CALL_ID
        assert looked_up.content == crossed.LOOKUP_RESULT
        assert answer.content == crossed.CHILD_ANSWER
        assert not answer.tool_calls

        transcript = ArtifactStore(persistence.store, thread_id).read_text(entry["transcript_ref"])
        assert crossed.CHILD_ANSWER in transcript
        assert crossed.LOOKUP_RESULT in transcript


# --- 2. stop_all() stops sync children --------------------------------------------------


def test_stop_all_ends_sync_children_and_their_results_say_cancelled(thread_id: str) -> None:
    child = SlowModel(responder=busy_child)
    graph, parent = delegating_graph(child, tasks=2)
    ran: dict[str, Any] = {}

    def run() -> None:
        try:
            ran["out"] = graph.invoke(
                {"messages": [HumanMessage(DELEGATE)]}, config(thread_id), context=CONTEXT
            )
        except BaseException as error:  # reported by the assertions below
            ran["error"] = error

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    wait_until(lambda: running_count() == 2 and child.started >= 2, 10, "both children")
    time.sleep(1.0)
    assert stop_all() == 2
    stopped = time.monotonic()
    worker.join(STOP_GRACE)
    assert not worker.is_alive(), f"graph.invoke still running {STOP_GRACE} s after stop_all()"
    assert time.monotonic() - stopped < STOP_GRACE
    calls = child.started
    time.sleep(1.0)
    assert child.started == calls, "the children kept calling their model after the stop"
    assert calls < CHILD_STEPS, calls  # both children together made fewer calls than one run
    assert running_count() == 0

    # The subagent node answers each call as cancelled, so the parent run went on.
    assert "error" not in ran, ran.get("error")
    out = ran["out"]
    assert out["messages"][-1].content == PARENT_ANSWER
    state = graph.get_state(config(thread_id)).values
    cancelled = {"task-1": ("cancelled", "cancelled"), "task-2": ("cancelled", "cancelled")}
    assert statuses(state) == cancelled
    results = task_results(out["messages"])
    assert sorted(results) == ["task-1", "task-2"]
    for result in results.values():
        meta = result.additional_kwargs["subagent"]
        assert (meta["status"], meta["stop_reason"]) == ("cancelled", "cancelled")
        assert result.status == "error"
        assert "[subagent worker: cancelled (cancelled) after" in result.content
        assert result.content.startswith(PARTIAL)  # the child's last text before the stop

    # The parent's next model call saw both results and the record with both cancelled.
    after = parent.requests[-1]
    assert sorted(task_results(after)) == ["task-1", "task-2"]
    record = delegations_data(after)
    assert "- task-1 worker: 'job 1' - cancelled (cancelled)" in record
    assert "- task-2 worker: 'job 2' - cancelled (cancelled)" in record

    # A later run changes nothing: a final status is final.
    graph.invoke({"messages": [HumanMessage("Thanks.")]}, config(thread_id), context=CONTEXT)
    assert statuses(graph.get_state(config(thread_id)).values) == cancelled
    assert "- task-1 worker: 'job 1' - cancelled (cancelled)" in delegations_data(
        parent.requests[-1]
    )
    assert child.started == calls


# --- 3. Cancelling the async run --------------------------------------------------------


async def test_cancelling_an_async_run_cancels_its_children_and_the_next_run_sees_it(
    thread_id: str,
) -> None:
    child = SlowModel(responder=busy_child)
    graph, parent = delegating_graph(child, tasks=2)
    run = asyncio.create_task(
        graph.ainvoke({"messages": [HumanMessage(DELEGATE)]}, config(thread_id), context=CONTEXT)
    )
    await await_until(lambda: child.started >= 2, 10, "both children")
    await asyncio.sleep(1.0)
    # Cancel right after seeing both children early in a model call (no await in between),
    # so both calls are suspended in their sleep, with 0.3 s left, when the cancel arrives.
    await await_until(
        lambda: child.in_flight == 2 and child.oldest_call_age() < DELAY - 0.3,
        10,
        "both children early in a model call",
    )
    run.cancel()
    done, _ = await asyncio.wait({run}, timeout=STOP_GRACE)
    assert run in done, f"the cancelled run still runs {STOP_GRACE} s later"
    assert run.cancelled()
    assert child.cancelled == 2, "each child's model call should see CancelledError"
    assert child.in_flight == 0
    calls = child.started
    await asyncio.sleep(1.0)
    assert child.started == calls, "the children kept calling their model after the cancel"
    assert running_count() == 0

    # The cancelled run left both entries running, with no results.
    left = (await graph.aget_state(config(thread_id))).values
    assert statuses(left) == {"task-1": ("running", None), "task-2": ("running", None)}
    assert task_results(left["messages"]) == {}

    asked = len(parent.requests)
    out = await graph.ainvoke(
        {"messages": [HumanMessage("Are the jobs done?")]}, config(thread_id), context=CONTEXT
    )
    assert out["messages"][-1].content == PARENT_ANSWER
    assert len(parent.requests) == asked + 1
    assert child.started == calls  # nothing restarted the children
    state = (await graph.aget_state(config(thread_id))).values
    assert statuses(state) == {
        "task-1": ("cancelled", "cancelled"),
        "task-2": ("cancelled", "cancelled"),
    }
    # The request of that model call must not tell the model the tasks still run: the
    # model node knows they were abandoned, and "running" means "still working".
    record = delegations_data(parent.requests[asked])
    for line in (
        "- task-1 worker: 'job 1' - cancelled (cancelled)",
        "- task-2 worker: 'job 2' - cancelled (cancelled)",
    ):
        assert line in record, f"the first request after the cancelled run says:\n{record}"


# --- 4. Timeouts ------------------------------------------------------------------------


def assert_timed_out(out: dict[str, Any], values: dict[str, Any], elapsed: float) -> None:
    """The child was stopped by its 1 s timeout, with its partial text in the result."""
    assert elapsed < 1.0 + STOP_GRACE, elapsed
    assert statuses(values) == {"task-1": ("timed_out", "timeout")}
    (result,) = task_results(out["messages"]).values()
    meta = result.additional_kwargs["subagent"]
    assert (meta["status"], meta["stop_reason"]) == ("timed_out", "timeout")
    assert meta["elapsed_s"] >= 1.0
    assert result.status == "error"
    assert result.content.startswith(f"{PARTIAL}\n\n[subagent worker: timed_out (timeout) after")
    assert out["messages"][-1].content == PARENT_ANSWER


def test_a_sync_child_past_its_timeout_ends_timed_out_with_its_partial_text(
    thread_id: str,
) -> None:
    child = SlowModel(responder=busy_child)
    graph, _ = delegating_graph(child, tasks=1, subagent_timeout_s=1)
    started = time.monotonic()
    out = graph.invoke({"messages": [HumanMessage(DELEGATE)]}, config(thread_id), context=CONTEXT)
    elapsed = time.monotonic() - started
    assert_timed_out(out, graph.get_state(config(thread_id)).values, elapsed)
    calls = child.started
    assert calls < 6, calls
    time.sleep(DELAY * 2)
    assert child.started == calls


async def test_an_async_child_past_its_timeout_ends_timed_out_with_its_partial_text(
    thread_id: str,
) -> None:
    child = SlowModel(responder=busy_child)
    graph, _ = delegating_graph(child, tasks=1, subagent_timeout_s=1)
    started = time.monotonic()
    out = await graph.ainvoke(
        {"messages": [HumanMessage(DELEGATE)]}, config(thread_id), context=CONTEXT
    )
    elapsed = time.monotonic() - started
    assert_timed_out(out, (await graph.aget_state(config(thread_id))).values, elapsed)
    assert child.cancelled == 1  # the call in flight at the timeout was cancelled
    calls = child.started
    assert calls < 6, calls
    await asyncio.sleep(DELAY * 2)
    assert child.started == calls


# --- 5. Depth ---------------------------------------------------------------------------

GRANDCHILD_ANSWER = "grandchild answer: 42"


def tool_names(model: ScriptedChatModel, call: int) -> list[str]:
    return [schema["function"]["name"] for schema in model.tool_requests[call]]


def manager_reply(messages: list[BaseMessage]) -> AIMessage:
    """Delegates to ``worker``, then relays the worker's answer."""
    last = messages[-1]
    if isinstance(last, ToolMessage):
        assert isinstance(last.content, str)
        return AIMessage(content=f"manager relays: {last.content.splitlines()[0]}")
    call = task_call(9)
    call["args"] = {"description": "compute the answer", "subagent_type": "worker"}
    return AIMessage(content="", tool_calls=[call])


def test_depth_two_lets_a_child_delegate_and_the_answer_climbs_back(thread_id: str) -> None:
    manager = ScriptedChatModel(responder=manager_reply)
    worker = ScriptedChatModel(script=[GRANDCHILD_ANSWER])
    specs = [
        SubagentSpec("manager", "Splits work.", "You are the manager.", model=manager),
        SubagentSpec("worker", "Does work.", "You are the worker.", model=worker),
    ]

    def parent_reply(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage(content=PARENT_ANSWER)
        call = task_call(1)
        call["args"] = {"description": "get the answer", "subagent_type": "manager"}
        return AIMessage(content="", tool_calls=[call])

    graph = build_graph(
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
        models=Models(main=ScriptedChatModel(responder=parent_reply)),
        settings=Settings(**BASE, subagent_max_depth=2),
        parts=[SubagentsPart(specs)],
    )
    out = graph.invoke({"messages": [HumanMessage("Go.")]}, config(thread_id), context=CONTEXT)

    # The child (manager) could delegate; the grandchild (worker) could not.
    assert manager.calls == 2 and worker.calls == 1
    assert "task" in tool_names(manager, 0)
    assert "task" not in tool_names(worker, 0)
    assert [m.content for m in worker.requests[0]] == ["You are the worker.", "compute the answer"]
    # The grandchild's answer reached the child as its task result ...
    (to_child,) = task_results(manager.requests[1]).values()
    assert to_child.tool_call_id == "task-9"
    assert to_child.content.startswith(GRANDCHILD_ANSWER)
    assert to_child.additional_kwargs["subagent"]["status"] == "completed"
    # ... and, relayed by the child, the parent.
    (to_parent,) = task_results(out["messages"]).values()
    assert to_parent.content.startswith(f"manager relays: {GRANDCHILD_ANSWER}")
    assert to_parent.additional_kwargs["subagent"]["status"] == "completed"
    assert out["messages"][-1].content == PARENT_ANSWER
    values = graph.get_state(config(thread_id)).values
    assert statuses(values) == {"task-1": ("completed", "final_answer")}


def test_depth_one_gives_children_no_task_tool(thread_id: str) -> None:
    child = ScriptedChatModel(script=["job done"])
    graph, parent = delegating_graph(child, tasks=1)
    out = graph.invoke({"messages": [HumanMessage(DELEGATE)]}, config(thread_id), context=CONTEXT)
    assert "task" in tool_names(parent, 0)
    assert child.calls == 1
    assert sorted(tool_names(child, 0)) == ["grep_artifact", "read_artifact", "step"]
    (result,) = task_results(out["messages"]).values()
    assert result.content.startswith("job done")
