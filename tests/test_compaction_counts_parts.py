"""The size check measures the whole compacted request: active skills and delegations count.

The planner measures the state a compaction leaves (the thread's state with the window,
summary and mark replaced), so every part's request message is in its estimate and in
the size it commits with: the active skills' context and the delegation record too.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.store.memory import InMemoryStore

from ctxgraph.nodes.compaction.partition import partition_history
from ctxgraph.nodes.compaction.planner import CompactionPlanner
from ctxgraph.nodes.compaction.render import SECTIONS
from ctxgraph.nodes.skills.record import activation
from ctxgraph.nodes.skills.sources import SkillSources
from ctxgraph.nodes.skills.view import SkillRequests
from ctxgraph.nodes.subagents.render import delegations_message
from ctxgraph.state import Settings
from ctxgraph.state.graph_state import AgentState
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.skill_context import merge_skill_context
from ctxgraph.state.tokens import TokenCounter
from tests.support.requests import request_builder
from tests.support.skill_files import write_skill

KEEP = 4
SECTION_TOKENS = 200
RECORD: Any = {
    "entries": [
        {
            "id": "call_t1",
            "type": "researcher",
            "brief": "Find " + "the quarterly figures of every region " * 12,
            "status": "running",
        }
    ],
    "folded": {},
}


class Setup:
    """A planner over the built-in request parts, with one skill folder."""

    def __init__(self, root: Path) -> None:
        body = " ".join(f"Rule {n}: cite the source of every figure." for n in range(120))
        write_skill(root, "reporter", "Writes quarterly reports.", body)
        self.counter = TokenCounter()
        self.settings = Settings(
            memory_extraction="off",
            memory_mode="off",
            skills_dirs=(str(root),),
            keep_messages=KEEP,
            summary_max_tokens=2 * SECTION_TOKENS,
            trigger_tokens=100_000,
        )
        self.sources = SkillSources()
        self.skills = SkillRequests(self.sources, [], lambda _run: None, self.counter.count_text)
        self.planner = CompactionPlanner(
            ScriptedChatModel(script=["unused"]), request_builder([], self.counter, self.skills)
        )
        self.window = window()
        skill = self.sources.current(self.settings).get("reporter")
        assert skill is not None
        self.skill_context = merge_skill_context(None, activation(skill, "slash", self.settings))

    def bare(self) -> AgentState:
        return cast(AgentState, {"messages": self.window})

    def full(self) -> AgentState:
        return cast(
            AgentState,
            {"messages": self.window, "skill_context": self.skill_context, "delegations": RECORD},
        )

    def parts_tokens(self, kept: list[Any]) -> int:
        """Tokens of the two request messages the skill and the delegation add."""
        state = cast(AgentState, {"messages": kept, "skill_context": self.skill_context})
        context = self.skills.parts(state, self.settings).context
        record = delegations_message(RECORD)
        assert context is not None and record is not None
        return self.counter.count_message(context) + self.counter.count_message(record)


def window() -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    for n in range(8):
        messages.append(HumanMessage(f"Question {n}: " + "which region grew " * 15, id=f"u{n}"))
        messages.append(AIMessage(f"Answer {n}: " + "the north grew " * 15, id=f"a{n}"))
    return messages


def sections(tokens: int) -> dict[str, str]:
    words = " ".join(["note"] * (tokens // len(SECTIONS)))
    return {key: words for key, _ in SECTIONS}


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    return Setup(tmp_path)


def test_the_estimate_counts_the_active_skills_and_the_delegation_record(setup: Setup) -> None:
    split = partition_history(setup.window, KEEP)
    bare = setup.planner.estimate(setup.bare(), setup.settings, split, SECTION_TOKENS)
    full = setup.planner.estimate(setup.full(), setup.settings, split, SECTION_TOKENS)

    assert full.messages == bare.messages + 2
    assert full.tokens - bare.tokens == setup.parts_tokens(split[1]) > 0


def test_the_size_a_compaction_commits_with_counts_them_too(setup: Setup) -> None:
    store = InMemoryStore()
    finished = []
    for state in (setup.bare(), setup.full()):
        before = setup.planner.measure(state, setup.settings)
        plan = setup.planner.plan(state, setup.settings, store, "t", before)
        assert len(plan.kept) == KEEP and plan.unfit is None
        done = setup.planner.finish(plan, sections(SECTION_TOKENS))
        assert not isinstance(done, str), done
        finished.append(done.after)
    bare, full = finished

    assert full.tokens - bare.tokens == setup.parts_tokens(setup.window[-KEEP:])


def test_their_tokens_can_make_every_split_unfit_before_any_summary_call(setup: Setup) -> None:
    # The token trigger fires for the bare state, which compacts to well under it; the
    # skill context and the delegation record alone are larger than the trigger.
    bare_before = setup.planner.measure(setup.bare(), setup.settings)
    settings = replace(setup.settings, trigger_tokens=bare_before.tokens)
    assert setup.parts_tokens(setup.window[-1:]) > settings.trigger_tokens
    store = InMemoryStore()

    bare = setup.planner.plan(setup.bare(), settings, store, "t", bare_before)
    full_before = setup.planner.measure(setup.full(), settings)
    full = setup.planner.plan(setup.full(), settings, store, "t", full_before)

    assert bare.unfit is None and bare.old
    assert full.unfit is not None
    assert full.unfit.startswith("the compacted request would not fit")
    assert "still fires tokens" in full.unfit
