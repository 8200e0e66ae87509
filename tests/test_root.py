"""One root, every served graph: ``CtxGraph`` seams reach the agent and the three workers.

The memory worker a root builds extracts with the root's extraction prompt, ranker and
token counter; its compaction worker counts with the root's token counter. The old seam
keywords of ``build_graph`` (and the part keywords of ``create_builder`` and
``as_subgraph``) keep working for one release: each warns, naming its replacement, and
still reaches the seam it set. ``build_graph`` takes at most eight parameters.
"""

from __future__ import annotations

import inspect
import json
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.messages.utils import count_tokens_approximately
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph import (
    CompactionPart,
    CtxGraph,
    MemoryPart,
    SubagentsPart,
    SubagentSpec,
    as_subgraph,
    build_graph,
    create_builder,
)
from ctxgraph.graph import builder
from ctxgraph.graph.seams import PART_KEYWORDS, ROOT_KEYWORDS
from ctxgraph.nodes.compaction.job_queue import settings_values
from ctxgraph.nodes.memory.extract import EXTRACTION_SYSTEM
from ctxgraph.nodes.part import Part
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.memory.queue import MemoryQueue
from ctxgraph.store.memory.repository import MemoryRepository
from tests.support.rankers import Sorter
from tests.test_memory_worker import ROWS, _update_call

EXTRACTION = """House rules (root seam): remember only what the user says about their work.
Profile: {profile}
Facts: {facts}
Conversation:
{conversation}"""


def _context() -> Context:
    return Context(user_id=f"u-{uuid.uuid4().hex[:10]}", agent_name="coder")


def _texts(request: Sequence[BaseMessage]) -> str:
    return "\n".join(str(message.content) for message in request)


def test_build_graph_takes_at_most_eight_parameters() -> None:
    assert len(inspect.signature(build_graph).parameters) <= 8


class _Wrapper:
    """A tool wrapper that changes nothing."""

    def wrap(self, request: Any, execute: Any) -> Any:
        return execute(request)

    async def awrap(self, request: Any, execute: Any) -> Any:
        return await execute(request)


class _Queue:
    """A compaction queue that is never used (no run compacts)."""

    async def submit(self, payload: Any) -> str:
        return "run-1"


SUMMARY = "House summary: {folded}"
RANKER = Sorter("confidence")
SPECS = [SubagentSpec(name="helper", description="d", system_prompt="p")]
WRAPPERS = [_Wrapper()]
QUEUE = _Queue()
OLD_VALUES: dict[str, Any] = {
    "summary_prompt": SUMMARY,
    "extraction_prompt": EXTRACTION,
    "ranker": RANKER,
    "subagents": SPECS,
    "token_counter": count_tokens_approximately,
    "tool_wrappers": WRAPPERS,
    "compaction_queue": QUEUE,
}
"""A value, not the default, for each old keyword."""


def _part(parts: Sequence[Any], kind: type[Any]) -> Any:
    (part,) = [p for p in parts if isinstance(p, kind)]
    return part


TAKEN: dict[str, Callable[[dict[str, Any]], Any]] = {
    "summary_prompt": lambda kw: _part(kw["parts"], CompactionPart).summary_prompt,
    "extraction_prompt": lambda kw: _part(kw["parts"], MemoryPart).extraction_prompt,
    "ranker": lambda kw: _part(kw["parts"], MemoryPart).ranker,
    "subagents": lambda kw: _part(kw["parts"], SubagentsPart).subagents,
    "token_counter": lambda kw: kw["token_counter"],
    "tool_wrappers": lambda kw: kw["tool_wrappers"],
    "compaction_queue": lambda kw: kw["compaction_queue"],
}
"""Where ``create_builder``'s arguments carry each old keyword's value."""


@pytest.mark.parametrize("keyword", sorted(OLD_VALUES))
def test_an_old_seam_keyword_still_works_and_names_its_replacement(
    keyword: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    given: list[dict[str, Any]] = []
    real = builder.create_builder

    def spy(**kwargs: Any) -> Any:
        given.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(builder, "create_builder", spy)
    replacement = {**PART_KEYWORDS, **ROOT_KEYWORDS}[keyword]
    value = OLD_VALUES[keyword]
    with pytest.warns(DeprecationWarning, match=rf"build_graph\({keyword}=\.\.\.\)") as caught:
        graph = build_graph(models=Models(main=ScriptedChatModel()), **{keyword: value})
    assert graph is not None
    assert replacement in str(caught[0].message)
    (kwargs,) = given
    assert TAKEN[keyword](kwargs) is value, "the old keyword reached the builder"


@pytest.mark.parametrize("where", ["create_builder", "as_subgraph"])
@pytest.mark.parametrize("keyword", sorted(PART_KEYWORDS))
def test_an_old_part_keyword_of_the_builder_and_the_subgraph_still_works(
    where: str, keyword: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolved: list[list[Part]] = []
    real = builder.Assembly

    def spy(*args: Any, **kwargs: Any) -> Any:
        resolved.append(args[3])
        return real(*args, **kwargs)

    monkeypatch.setattr(builder, "Assembly", spy)
    build = {"create_builder": create_builder, "as_subgraph": as_subgraph}[where]
    value = OLD_VALUES[keyword]
    with pytest.warns(DeprecationWarning, match=rf"{where}\({keyword}=\.\.\.\)"):
        build(models=Models(main=ScriptedChatModel()), **{keyword: value})
    (parts,) = resolved
    assert TAKEN[keyword]({"parts": parts}) is value, "the old keyword set its part"


def test_an_unknown_keyword_is_refused() -> None:
    with pytest.raises(TypeError, match="summary_promt"):
        build_graph(models=Models(main=ScriptedChatModel()), summary_promt="x")


def test_the_agent_of_a_root_takes_its_extraction_prompt() -> None:
    memory = ScriptedChatModel(responder=lambda _messages: _update_call())
    main = ScriptedChatModel(responder=lambda _messages: AIMessage(content="Noted."))
    root = CtxGraph(
        Models(main=main, memory=memory),
        Settings(memory_extraction="inline"),
        parts=[MemoryPart(extraction_prompt=EXTRACTION)],
    )
    graph = root.agent(checkpointer=InMemorySaver(), store=InMemoryStore())
    config = {"configurable": {"thread_id": "t-agent"}}
    graph.invoke(
        {"messages": [HumanMessage("I mainly do Python backend work.")]}, config, context=_context()
    )
    extraction = [r for r in memory.requests if r and r[0].content == EXTRACTION_SYSTEM]
    assert extraction and "House rules (root seam)" in _texts(extraction[0])


def test_the_memory_worker_of_a_root_extracts_with_its_prompt_ranker_and_counter() -> None:
    store = InMemoryStore()
    context = _context()
    repository = MemoryRepository(store)
    now = datetime.now(UTC)
    for index in range(3):
        repository.add_fact(
            context,
            f"Uses tool number {index}",
            key=f"tool_{index}",
            created_at=now - timedelta(days=index),
        )
    MemoryQueue(store).enqueue("t-worker", context, ROWS, now=now)
    memory = ScriptedChatModel(script=[_update_call()])
    ranker = Sorter("confidence")
    counted: list[int] = []

    def counter(messages: Sequence[BaseMessage]) -> int:
        counted.append(len(messages))
        return count_tokens_approximately(messages)

    root = CtxGraph(
        Models(main=ScriptedChatModel(), memory=memory),
        Settings(),
        parts=[MemoryPart(extraction_prompt=EXTRACTION, ranker=ranker)],
        token_counter=counter,
    )
    done = root.memory_worker(store=store).invoke({"force": True})

    assert done["threads"] == ["t-worker"]
    (request,) = [r for r in memory.requests if r and r[0].content == EXTRACTION_SYSTEM]
    assert "House rules (root seam)" in _texts(request)
    assert ranker.queries, "the extraction read the stored facts through the root's ranker"
    assert counted, "the memory calls were counted with the root's token counter"


async def test_the_compaction_worker_of_a_root_counts_with_its_token_counter() -> None:
    counted: list[int] = []

    def counter(messages: Sequence[BaseMessage]) -> int:
        counted.append(len(messages))
        return count_tokens_approximately(messages)

    summary = ScriptedChatModel(
        responder=lambda _messages: AIMessage(
            content=json.dumps(
                {
                    "session_intent": "Ship it.",
                    "summary": "The user asked to ship the parcel.",
                    "artifacts": "none",
                    "next_steps": "Ship.",
                }
            )
        )
    )
    root = CtxGraph(Models(main=ScriptedChatModel(), summary=summary), token_counter=counter)
    worker = root.compaction_worker(store=InMemoryStore())
    folded = [
        HumanMessage("Please ship parcel A-1 today.", id="h1").model_dump(),
        AIMessage("Shipping A-1 now.", id="a1").model_dump(),
    ]
    payload = {
        "thread_id": "t-compact",
        "base_version": 0,
        "folded": [{"type": m["type"], "data": m} for m in folded],
        "previous": None,
        "request": "",
        "settings": settings_values(Settings()),
        "tokens_before": 100,
    }
    result = await worker.ainvoke(payload)
    assert result["outcome"] in {"stored", "ended"}
    assert counted, "the worker counted the folded messages with the root's token counter"
