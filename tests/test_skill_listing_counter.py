"""The skill listing and re-attached skills are sized by the graph's token counter."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph import CtxGraph, Models, Settings
from ctxgraph.nodes.skills.listing import NAMES_HEADER
from ctxgraph.state.messages import content_text
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.tokens import TokenCounter, count_text
from tests.test_skills_graph import CONTEXT, listing_of, write_skill

BUDGET = 400


def heavy(messages: Sequence[BaseMessage]) -> int:
    """A tokenizer that counts one token per character: far more than cl100k."""
    return sum(len(content_text(m)) + 3 for m in messages)


def _listing(tmp_path: Path, counter: object) -> str:
    main = ScriptedChatModel(script=["ok"])
    root = CtxGraph(
        Models(main=main),
        Settings(memory_extraction="off", skills_dirs=(str(tmp_path),), skills_list_budget=BUDGET),
        token_counter=counter,  # type: ignore[arg-type]
    )
    graph = root.agent(checkpointer=InMemorySaver(), store=InMemoryStore())
    graph.invoke(
        {"messages": [HumanMessage("hi")]},
        {"configurable": {"thread_id": "t"}},
        context=CONTEXT,
    )
    return listing_of(main.requests[0], Settings().system_prompt)


def test_the_listing_budget_is_counted_with_the_callers_counter(tmp_path: Path) -> None:
    for number in range(6):
        write_skill(tmp_path, f"skill-{number}", description="Plans one careful trip step. " * 3)
    default = _listing(tmp_path, None)
    counted = _listing(tmp_path, heavy)
    assert count_text(default) <= BUDGET and "Plans one careful trip step." in default
    # By the caller's count the full listing is far over budget: only names remain.
    assert TokenCounter(count=heavy).count_text(default) > BUDGET
    assert counted.splitlines()[0] == NAMES_HEADER
    assert TokenCounter(count=heavy).count_text(counted) <= BUDGET
