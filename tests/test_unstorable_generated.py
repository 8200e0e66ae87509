"""Text the graph's own models write (summaries, subagent answers) is made storable."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage

from ctxgraph.nodes.compaction.summarizer import parse_sections
from ctxgraph.nodes.subagents.child import ChildModel
from ctxgraph.state.scripted_model import ScriptedChatModel

ANSWER = (
    "SESSION INTENT: tea\x00 with milk\n"
    "SUMMARY: done \ud800 here\n"
    "ARTIFACTS: none\n"
    "NEXT STEPS: none"
)


def test_a_summary_with_nul_and_a_lone_surrogate_is_parsed_into_storable_sections() -> None:
    sections = parse_sections(ANSWER)
    assert sections["session_intent"] == "tea\ufffd with milk"
    assert sections["summary"] == "done \ufffd here"
    assert all("\x00" not in text for text in sections.values())


def test_a_subagents_answer_is_storable_in_its_own_checkpoint() -> None:
    model = ScriptedChatModel(script=["tea\x00 please"])
    child = ChildModel(model, [], delegates=False)
    update = child.invoke({"messages": [HumanMessage("hi")]}, None, {})  # type: ignore[typeddict-item]
    [reply] = update["messages"]
    assert isinstance(reply, AIMessage) and reply.content == "tea\ufffd please"
