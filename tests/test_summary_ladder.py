"""The summary ladder: lenient parsing, one repair request, then a degraded record."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import build_graph
from ctxgraph.graph.cli.threads import show_thread
from ctxgraph.nodes.compaction.background import wait_for_jobs
from ctxgraph.nodes.compaction.fallback import degraded_sections
from ctxgraph.nodes.compaction.plan import SummaryJob
from ctxgraph.nodes.compaction.summarizer import SummaryWriter, parse_sections
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.tokens import TokenCounter
from ctxgraph.store.persistence.archive import ThreadArchive, verify_thread
from tests.support.scripted import is_summary_request

CTX = Context(user_id="u")
PADDING = "The details of this turn matter. " * 40
SETTINGS = Settings(trigger_messages=8, keep_messages=2, memory_extraction="off", memory_mode="off")
EXACT = (
    "SESSION INTENT: answer questions\nSUMMARY: questions asked\nARTIFACTS: none\nNEXT STEPS: go on"
)


def _repair(messages: list[BaseMessage]) -> bool:
    return "Your answer lacked" in str(messages[-1].content)


def _always(text: str) -> Callable[[list[BaseMessage]], AIMessage]:
    return lambda messages: AIMessage(text)


def _missing_then_fixed(messages: list[BaseMessage]) -> AIMessage:
    if _repair(messages):
        return AIMessage(EXACT)
    return AIMessage("SESSION INTENT: answer\nSUMMARY: asked\nARTIFACTS: none")


def _timeout(messages: list[BaseMessage]) -> AIMessage:
    raise TimeoutError("summary model timed out")


ZOO: dict[str, tuple[Callable[[list[BaseMessage]], AIMessage], bool]] = {
    "exact": (_always(EXACT), False),
    "markdown": (
        _always(
            "## Session Intent\nanswer\n## Summary\nasked\n## Artifacts\nnone\n## Next steps\ngo"
        ),
        False,
    ),
    "bold": (
        _always("**Session intent:** a\n**Summary:** b\n**Artifacts:** c\n**Next steps:** d"),
        False,
    ),
    "numbered": (
        _always("1. Session intent\na\n2. Summary\nb\n3. Artifacts\nc\n4. Next steps\nd"),
        False,
    ),
    "chinese": (_always("会话意图：回答问题\n摘要：问了问题\n产出物：无\n下一步：继续"), False),
    "json": (
        _always(
            json.dumps(
                {"session_intent": "a", "summary": "b", "artifacts": ["c"], "next_steps": "d"}
            )
        ),
        False,
    ),
    "chatter": (_always(f"Sure, here is the record.\n\n{EXACT}\n\nLet me know if more."), False),
    "other_order": (
        _always("NEXT STEPS: d\nARTIFACTS: c\nSUMMARY: b\nSESSION INTENT: a"),
        False,
    ),
    "one_missing_repaired": (_missing_then_fixed, False),
    "one_missing_always": (_always("SUMMARY: b\nARTIFACTS: c\nNEXT STEPS: d"), True),
    "empty": (_always(""), True),
    "refusal": (_always("I'm sorry, but I can't help with that request."), True),
    "huge": (_always(EXACT.replace("questions asked", "word " * 100_000)), True),
    "timeout": (_timeout, True),
}


def _main(messages: list[BaseMessage]) -> AIMessage:
    if is_summary_request(messages):
        return AIMessage("nonsense, no headings")
    return AIMessage(f"Answer {len(messages)}.")


def _run(graph: Any, config: Any, turns: int) -> list[str]:
    sent: list[str] = []
    for n in range(turns):
        text = f"Question {n}: order A-{1000 + n}. {PADDING}"
        sent.append(text)
        graph.invoke({"messages": [HumanMessage(text)]}, config, context=CTX)
        window = graph.get_state(config).values["messages"]
        assert len(window) < SETTINGS.trigger_messages
    return sent


def _folded_and_window(store: Any, thread: str, values: dict[str, Any]) -> list[str]:
    archived = [
        str(m["data"]["content"]) if "data" in m else str(m.get("content"))
        for _, record in ThreadArchive(store, thread).versioned()
        for m in record["messages"]
    ]
    return archived + [str(m.content) for m in values["messages"]]


@pytest.mark.parametrize("behaviour", sorted(ZOO))
def test_every_summarizer_behaviour_keeps_the_window_bounded(behaviour: str) -> None:
    responder, degraded = ZOO[behaviour]
    store = InMemoryStore()
    graph = build_graph(
        models=Models(
            main=ScriptedChatModel(responder=_main),
            summary=ScriptedChatModel(responder=responder),
        ),
        settings=SETTINGS,
        checkpointer=InMemorySaver(),
        store=store,
    )
    config: Any = {"configurable": {"thread_id": behaviour}}
    sent = _run(graph, config, 12)
    values = graph.get_state(config).values
    everything = _folded_and_window(store, behaviour, values)
    assert all(any(text in seen for seen in everything) for text in sent)
    mark = values["compaction"]
    assert mark["version"] >= 1
    assert verify_thread(store, behaviour, mark).ok
    assert bool(values["summary"].get("degraded")) is degraded
    assert bool(mark.get("degraded")) is degraded


def test_a_usable_summary_replaces_a_degraded_one() -> None:
    answers = iter(["no headings"] * 4 + [EXACT] * 100)
    summarizer = ScriptedChatModel(responder=lambda messages: AIMessage(next(answers)))
    store = InMemoryStore()
    graph = build_graph(
        models=Models(main=ScriptedChatModel(responder=_main), summary=summarizer),
        settings=SETTINGS,
        checkpointer=InMemorySaver(),
        store=store,
    )
    config: Any = {"configurable": {"thread_id": "replace"}}
    seen: list[bool] = []
    for n in range(16):
        text = f"Question {n}. {PADDING}"
        graph.invoke({"messages": [HumanMessage(text)]}, config, context=CTX)
        summary = graph.get_state(config).values.get("summary")
        if summary:
            seen.append(bool(summary.get("degraded")))
    assert seen[0] is True and seen[-1] is False


def test_lenient_parsing_keeps_the_exact_format() -> None:
    assert parse_sections(EXACT) == {
        "session_intent": "answer questions",
        "summary": "questions asked",
        "artifacts": "none",
        "next_steps": "go on",
    }


def test_a_thousand_turns_with_a_nonsense_summarizer_on_postgres(
    persistence: Any, thread_id: str
) -> None:
    summarizer = ScriptedChatModel(responder=_always("I refuse."))
    graph = build_graph(
        models=Models(main=ScriptedChatModel(responder=_main), summary=summarizer),
        settings=SETTINGS,
        checkpointer=persistence.checkpointer,
        store=persistence.store,
    )
    config: Any = {"configurable": {"thread_id": thread_id}}
    sent = _run(graph, config, TURNS)
    values = graph.get_state(config).values
    everything = _folded_and_window(persistence.store, thread_id, values)
    humans = [text for text in everything if text.startswith("Question ")]
    assert humans == sent
    assert verify_thread(persistence.store, thread_id, values["compaction"]).ok
    assert values["summary"]["degraded"] is True
    # The ladder stays bounded however long the thread: the answer and one repair request
    # per compaction, never a retry loop (its speed is bench/compaction_bench.py's to time).
    assert summarizer.calls <= 2 * values["compaction"]["version"]
    out = io.StringIO()
    show_thread(persistence, thread_id, out)
    markers = [line for line in out.getvalue().splitlines() if line.startswith("──── compaction")]
    assert len(markers) == values["compaction"]["version"]
    assert all("(degraded: model-free summary)" in line for line in markers)


TURNS = 1000


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_one_repair_request_quotes_the_missing_sections(kind: str) -> None:
    model = ScriptedChatModel(responder=_missing_then_fixed)
    writer = SummaryWriter([model], TokenCounter())
    job = SummaryJob(None, [HumanMessage("Question 1.", id="h1")], "")
    if kind == "sync":
        sections = writer.write(job, SETTINGS, lambda s: [])
    else:
        sections = await writer.awrite(job, SETTINGS, lambda s: [])
    assert sections["next_steps"] == "go on"
    assert model.calls == 2
    assert "['NEXT STEPS']" in str(model.requests[1][-1].content)


def test_the_degraded_record_is_built_from_the_folded_turns() -> None:
    folded: list[BaseMessage] = [
        HumanMessage("Refund order ORD-2026-0042 please.", id="h1"),
        AIMessage("Refunded ORD-2026-0042.", id="a1"),
        HumanMessage("Now check invoice INV-7781.", id="h2"),
    ]
    job = SummaryJob(None, folded, "What next?")
    sections = degraded_sections(job, SETTINGS, lambda s: [], version=3)
    assert sections["degraded"] == "true"
    assert "ORD-2026-0042" in sections["session_intent"]
    assert "INV-7781" in sections["artifacts"]
    assert "read_history versions 1..3" in sections["next_steps"]
    assert "What next?" in sections["next_steps"]


def test_a_background_job_commits_a_degraded_record_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="ctxgraph.compaction")
    settings = Settings(
        trigger_messages=8,
        keep_messages=2,
        memory_extraction="off",
        memory_mode="off",
        compaction_mode="background",
    )
    store = InMemoryStore()
    graph = build_graph(
        models=Models(
            main=ScriptedChatModel(responder=_main),
            summary=ScriptedChatModel(responder=_always("No.")),
        ),
        settings=settings,
        checkpointer=InMemorySaver(),
        store=store,
    )
    config: Any = {"configurable": {"thread_id": "background"}}
    for n in range(16):
        text = f"Question {n}. {PADDING}"
        graph.invoke({"messages": [HumanMessage(text)]}, config, context=CTX)
        assert wait_for_jobs(10) == 0
        assert len(graph.get_state(config).values["messages"]) < settings.trigger_messages
    values = graph.get_state(config).values
    assert values["summary"]["degraded"] is True
    assert values["compaction"]["degraded"] is True
    assert verify_thread(store, "background", values["compaction"]).ok
    logged = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("compaction.degraded") for m in logged)
    assert any(m.startswith("compaction.applied") for m in logged)
