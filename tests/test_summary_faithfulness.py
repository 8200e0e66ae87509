"""Checks for what real summaries get wrong: echoes, stale copies and invented successes."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import build_graph
from ctxgraph.nodes.compaction.faithfulness import (
    echo_problems,
    invented_success_problems,
    problem_reasons,
    stale_problems,
)
from ctxgraph.nodes.compaction.fallback import degraded_sections
from ctxgraph.nodes.compaction.ledger import ToolCallStatus, derive_ledger, empty_ledger
from ctxgraph.nodes.compaction.plan import SummaryJob
from ctxgraph.nodes.compaction.planner import summary_check
from ctxgraph.nodes.compaction.summarizer import (
    SummaryError,
    SummaryWriter,
    parse_sections,
    prompts_instruction,
)
from ctxgraph.nodes.compaction.verify import summary_problems
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.summary import SUMMARY_SCHEMA_VERSION
from ctxgraph.state.tokens import TokenCounter
from tests.support.scripted import is_summary_request, summary_text

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real_model"
RECORDED = DATA / "qwen2.5-coder-1.5b-instruct.jsonl"
SETTINGS = Settings(memory_extraction="off", memory_mode="off")
INSTRUCTION = prompts_instruction()

EXPECTED: dict[int, list[str]] = {
    # "The assistant has completed the task of finding the order number A123": no tool ran.
    11: ["invented_success"],
    # 'The assistant used the "lookup_order" tool ... The result from the tool was ...'
    14: ["invented_success"],
    # 'The assistant confirmed that the order status is "pending"': a status no tool gave.
    16: ["invented_success"],
    # "using the `lookup_order` tool, which returned the order status", `update_order`
    19: ["invented_success"],
    # "by using the `lookup_order` tool, which returned "unknown""
    21: ["invented_success"],
    # Version 1 as committed: "would call the tool `lookup_order`" is a plan, not a claim.
    23: [],
    # Version 2: SUMMARY and NEXT STEPS are version 1's word for word, four turns later.
    34: ["stale"],
}


# --- the recorded summary calls ---------------------------------------------------------


def _rows() -> list[dict[str, Any]]:
    if not DATA.is_dir():
        pytest.skip(f"recorded real-model outputs not found at {DATA}")
    rows = [json.loads(line) for line in RECORDED.read_text(encoding="utf-8").splitlines()]
    return [row for row in rows if row["role"] == "summary"]


def _block(prompt: str, tag: str) -> str:
    match = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", prompt, re.DOTALL)
    assert match is not None, tag
    return match.group(1)


def _folded(transcript: str) -> list[AnyMessage]:
    """The folded messages back from the transcript the summary model was sent."""
    said: list[tuple[str, str]] = []
    for line in transcript.splitlines():
        match = re.match(r"(human|assistant): (.*)", line)
        if match:
            said.append((match.group(1), match.group(2)))
        else:  # a message's next line
            said[-1] = (said[-1][0], f"{said[-1][1]}\n{line}")
    return [HumanMessage(text) if role == "human" else AIMessage(text) for role, text in said]


class Recorded:
    """One recorded summary call: its answer and what its check is built from."""

    def __init__(self, row: dict[str, Any]) -> None:
        prompt = str(row["request"]["messages"][-1]["content"])
        previous = _block(prompt, "previous_summary")
        self.previous = None if previous.strip() == "(none yet)" else parse_sections(previous)
        self.folded = _folded(_block(prompt, "folded_messages"))
        self.request = _block(prompt, "current_request")
        self.answer = str(row["answer"]["text"])

    def job(self) -> SummaryJob:
        return SummaryJob(self.previous, self.folded, self.request, "recorded")

    def check(self) -> Callable[[dict[str, str]], list[str]]:
        return summary_check(self.previous, self.folded, SETTINGS)

    def problems(self, sections: dict[str, str]) -> list[str]:
        """Every problem the ladder finds: the writer's echo check, then the plan's check."""
        return [*echo_problems(sections, INSTRUCTION), *self.check()(sections)]


def _recorded(seq: int) -> Recorded:
    [row] = [row for row in _rows() if row["seq"] == seq]
    return Recorded(row)


def test_every_recorded_summary_is_covered() -> None:
    assert sorted(row["seq"] for row in _rows()) == sorted(EXPECTED)


@pytest.mark.parametrize("seq", sorted(EXPECTED))
def test_each_recorded_summary_parses_and_yields_its_problems(seq: int) -> None:
    call = _recorded(seq)
    sections = parse_sections(call.answer)
    # Nothing ran: the ledger of the folded turns holds no call (the calls are text).
    assert derive_ledger(call.folded)["tool_calls"] == []
    problems = call.problems(sections)
    assert problem_reasons(problems) == EXPECTED[seq], problems
    assert all(p.startswith(tuple(f"{r}: " for r in EXPECTED[seq])) for p in problems)


def test_recorded_problems_quote_the_claims_and_say_why() -> None:
    problems = _recorded(14).problems(parse_sections(_recorded(14).answer))
    assert problems[0] == (
        'invented_success: SUMMARY says "The assistant used the "lookup_order" tool to '
        'retrieve the order status.", but no tool call succeeded in this session'
    )
    [stale] = _recorded(34).problems(parse_sections(_recorded(34).answer))
    assert stale == (
        "stale: SUMMARY and NEXT STEPS are the previous record's, word for word, although "
        "4 new user turns were folded; say what happened in them"
    )


def _edited(seq: int, **sections: str) -> dict[str, str]:
    """EDITED: a recorded answer's sections with some replaced (not the model's output)."""
    return {**parse_sections(_recorded(seq).answer), **sections}


EDITED: dict[str, tuple[dict[str, str], list[str]]] = {
    # The echo the 36-turn session saw, put into the committed version 1 (seq 23).
    "echo of the prompt's first line": (
        {
            "session_intent": "The user wants the assistant to continue the work without "
            "the folded messages."
        },
        ["echo"],
    ),
    "echo of a section's description": (
        {
            "session_intent": "the user's goal and explicit constraints, in their own words "
            "where possible"
        },
        ["echo"],
    ),
    "the 36-turn session's success claim": (
        {"summary": "The assistant successfully retrieved the information."},
        ["invented_success"],
    ),
    "a Chinese success claim": (
        {"summary": "助手成功调用了 lookup_order 工具，查询到订单 A123 的状态。"},
        ["invented_success"],
    ),
    "a truthful account": (
        {
            "summary": "The assistant wrote a lookup_order call as text; no tool ran, so the "
            "status of A123, B456 and C789 is unknown."
        },
        [],
    ),
}


@pytest.mark.parametrize("label", sorted(EDITED))
def test_edited_variants_of_a_recorded_answer(label: str) -> None:
    replaced, reasons = EDITED[label]
    sections = _edited(23, **replaced)
    assert problem_reasons(_recorded(23).problems(sections)) == reasons


# --- the ladder: one repair request, then the degraded record ----------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("seq", [seq for seq, reasons in sorted(EXPECTED.items()) if reasons])
async def test_a_flagged_recorded_answer_gets_one_repair_then_the_degraded_record(
    seq: int, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    call = _recorded(seq)
    model = ScriptedChatModel(responder=lambda messages: AIMessage(call.answer))
    writer = SummaryWriter([model], TokenCounter())
    caplog.set_level(logging.INFO, logger="ctxgraph.compaction")
    with pytest.raises(SummaryError) as failed:
        if kind == "sync":
            writer.write(call.job(), SETTINGS, call.check())
        else:
            await writer.awrite(call.job(), SETTINGS, call.check())
    assert list(failed.value.reasons) == EXPECTED[seq]
    assert model.calls == 2  # the answer, then the one repair request
    repair = str(model.requests[1][-1].content)
    assert repair.startswith("Your answer cannot be used as it is:\n- " + EXPECTED[seq][0])
    assert str(model.requests[1][-2].content) == call.answer[:4000]  # the answer, quoted
    rejected = [r.getMessage() for r in caplog.records if "compaction.rejected" in r.getMessage()]
    assert len(rejected) == 2
    assert all("thread=recorded" in line for line in rejected)
    assert all(f"reasons={EXPECTED[seq]}" in line for line in rejected)
    assert ["repair=True" in rejected[0], "repair=False" in rejected[1]] == [True, True]
    # The last rung: the model-free record passes the same check.
    sections = degraded_sections(call.job(), SETTINGS, call.check(), version=1)
    assert sections["degraded"] == "true"


def test_the_clean_recorded_answer_is_accepted_in_one_call() -> None:
    call = _recorded(23)
    model = ScriptedChatModel(responder=lambda messages: AIMessage(call.answer))
    sections = SummaryWriter([model], TokenCounter()).write(call.job(), SETTINGS, call.check())
    assert sections == parse_sections(call.answer)
    assert model.calls == 1


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_repaired_answer_is_used(kind: str) -> None:
    claims = summary_text("Track A123.", "The assistant used the lookup_order tool to get it.")
    honest = summary_text("Track A123.", "The user asked about A123; no lookup has run yet.")
    model = ScriptedChatModel(script=[claims, honest])
    writer = SummaryWriter([model], TokenCounter())
    job = SummaryJob(None, [HumanMessage("Where is A123?", id="h1")], "", "t")
    check = summary_check(None, [HumanMessage("Where is A123?", id="h1")], SETTINGS)
    if kind == "sync":
        sections = writer.write(job, SETTINGS, check)
    else:
        sections = await writer.awrite(job, SETTINGS, check)
    assert sections["summary"] == "The user asked about A123; no lookup has run yet."
    assert model.calls == 2
    assert "invented_success: SUMMARY says" in str(model.requests[1][-1].content)


def test_the_echo_check_reads_the_template_the_writer_sends() -> None:
    template = (
        "Brief the night shift supervisor who takes over the queue tomorrow morning.\n"
        "{previous_summary}\n{folded}\n{current_request}\nUse the four usual headings."
    )
    echoing = summary_text(
        "Brief the night shift supervisor who takes over the queue.", "The user asked for A123."
    )
    job = SummaryJob(None, [HumanMessage("Where is A123?", id="h1")], "", "t")
    custom = ScriptedChatModel(responder=lambda messages: AIMessage(echoing))
    with pytest.raises(SummaryError, match="echo: SESSION INTENT repeats the instruction"):
        SummaryWriter([custom], TokenCounter(), prompt=template).write(
            job, SETTINGS, lambda sections: []
        )
    # The default prompt has no such words, so the same answer is no echo there.
    plain = ScriptedChatModel(responder=lambda messages: AIMessage(echoing))
    SummaryWriter([plain], TokenCounter()).write(job, SETTINGS, lambda sections: [])
    assert plain.calls == 1


def test_repeating_the_data_is_no_echo() -> None:
    request = "Please continue the work on order B456 without the folded packaging and ship it."
    sections = {"session_intent": request, "summary": "a", "artifacts": "b", "next_steps": "c"}
    assert echo_problems(sections, INSTRUCTION) == []
    # What the prompt holds as data is left out of the instruction, tags included.
    assert "previous_summary" not in INSTRUCTION and "{folded}" not in INSTRUCTION


# --- adversarial fakes --------------------------------------------------------------------


def _sections(summary: str, next_steps: str = "Go on.") -> dict[str, str]:
    return {
        "session_intent": "Orders.",
        "summary": summary,
        "artifacts": "A123",
        "next_steps": next_steps,
    }


def _ledger(*calls: tuple[str, str, str]) -> Any:
    ledger = empty_ledger()
    ledger["tool_calls"] = [
        {
            "id": call_id,
            "name": name,
            "args": {},
            "status": cast(ToolCallStatus, status),
            "error": None,
            "idempotency_key": None,
            "side_effect": not name.startswith("lookup"),
        }
        for call_id, name, status in calls
    ]
    return ledger


LOOKED_UP = _ledger(("c1", "lookup_order", "succeeded"), ("c2", "cancel_order", "failed"))

CLAIMS: list[tuple[str, Any, bool]] = [
    # No succeeded call at all: any claim of a run is invented.
    ("The assistant successfully retrieved the information.", empty_ledger(), True),
    ("The lookup came back with the status shipped.", empty_ledger(), True),
    ("助手已查询订单状态。", empty_ledger(), True),
    (
        "The assistant retrieved the order details for A123.",
        _ledger(("c9", "lookup_order", "failed")),
        True,
    ),
    # Succeeded calls: only a tool the ledger does not hold as succeeded is flagged.
    ("The assistant used the lookup_order tool, which returned shipped.", LOOKED_UP, False),
    ("The assistant used the `update_order` tool to change the address.", LOOKED_UP, True),
    ("The assistant called `cancel_order` for C789.", LOOKED_UP, True),
    ("The assistant successfully retrieved the information.", LOOKED_UP, False),
    # Not claims: negated, hedged, planned, asked, or the user's doing.
    ("The assistant did not run any tool; the status of A123 is unknown.", empty_ledger(), False),
    ("The assistant will call lookup_order next.", empty_ledger(), False),
    ("The agent would call the tool `lookup_order` to get the status.", empty_ledger(), False),
    ("Did the tool return anything?", empty_ledger(), False),
    ("The user looked up the order on the website.", empty_ledger(), False),
    ("The package was returned to the sender.", empty_ledger(), False),
    ("The order ran late because of the storm.", empty_ledger(), False),
    ("没有查到订单。", empty_ledger(), False),
    ("用户需要查询订单。", empty_ledger(), False),
]


@pytest.mark.parametrize(("summary", "ledger", "flagged"), CLAIMS)
def test_a_claimed_run_is_checked_against_the_ledger(
    summary: str, ledger: Any, flagged: bool
) -> None:
    problems = invented_success_problems(_sections(summary), ledger)
    assert bool(problems) is flagged, problems


def test_an_unheld_tool_is_named_in_the_problem() -> None:
    [problem] = invented_success_problems(
        _sections("The assistant used the `update_order` tool to change the address."), LOOKED_UP
    )
    assert problem.endswith("but the ledger holds no succeeded call of update_order")


def test_folded_and_counted_successes_count_as_held() -> None:
    ledger = empty_ledger()
    ledger["aggregated"] = {"lookup_order": 3}
    ledger["folded_calls"] = {"send_email": {"succeeded": 1}}
    said = "The assistant used the lookup_order tool and then called send_email."
    assert invented_success_problems(_sections(said), ledger) == []


PREVIOUS = {
    "session_intent": "Orders.",
    "summary": "The user asked about A123.",
    "artifacts": "A123",
    "next_steps": "Answer the user.",
}


def test_a_copied_record_is_stale_only_when_user_turns_were_folded() -> None:
    copied = {**PREVIOUS, "summary": "the user asked about  A123", "session_intent": "New."}
    turn = [HumanMessage("And B456?", id="h2"), AIMessage("Looking.", id="a2")]
    [problem] = stale_problems(copied, PREVIOUS, turn)
    assert problem.startswith("stale: SUMMARY and NEXT STEPS are the previous record's")
    assert "1 new user turn was folded" in problem
    tool_only = [ToolMessage("late result", tool_call_id="c1")]
    assert stale_problems(copied, PREVIOUS, tool_only) == []
    assert stale_problems(copied, None, turn) == []
    assert stale_problems({**copied, "next_steps": "Answer about B456."}, PREVIOUS, turn) == []


def test_a_model_free_record_is_not_held_to_the_prose_checks() -> None:
    degraded = {
        **PREVIOUS,
        "summary": "The assistant successfully retrieved it.",
        "degraded": "true",
    }
    turn = [HumanMessage("And B456?", id="h2")]
    assert stale_problems(degraded, degraded, turn) == []
    assert invented_success_problems(degraded, empty_ledger()) == []
    assert echo_problems({**degraded, "session_intent": INSTRUCTION}, INSTRUCTION) == []


def test_summary_problems_without_context_skip_the_stale_check() -> None:
    record = {"schema_version": SUMMARY_SCHEMA_VERSION, **PREVIOUS, "ledger": empty_ledger()}
    assert summary_problems(record, SETTINGS) == []
    assert summary_problems(record, SETTINGS, previous=PREVIOUS, folded=[HumanMessage("x")]) != []


# --- through the graph ----------------------------------------------------------------------

ECHO = summary_text(
    "The user wants the assistant to continue the work without the folded messages.",
    "Questions were asked.",
)
PADDING = "The details of this turn matter. " * 40


def _graph(summary: Callable[[list[BaseMessage]], AIMessage]) -> tuple[Any, ScriptedChatModel]:
    def main(messages: list[BaseMessage]) -> AIMessage:
        if is_summary_request(messages):  # the main model is the next rung: it echoes too
            return AIMessage(ECHO)
        return AIMessage(f"Answer {len(messages)}.")

    summarizer = ScriptedChatModel(responder=summary)
    graph = build_graph(
        models=Models(main=ScriptedChatModel(responder=main), summary=summarizer),
        settings=Settings(
            trigger_messages=8, keep_messages=2, memory_extraction="off", memory_mode="off"
        ),
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
    )
    return graph, summarizer


def _until_compacted(graph: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    config: Any = {"configurable": {"thread_id": "faithful"}}
    events: list[dict[str, Any]] = []
    for n in range(12):
        turn = {"messages": [HumanMessage(f"Question {n}: order A-{1000 + n}. {PADDING}")]}
        for event in graph.stream(turn, config, context=Context(user_id="u"), stream_mode="custom"):
            events.append(event)
        values = graph.get_state(config).values
        if values.get("summary"):
            return values, events
    raise AssertionError("no compaction")


def test_an_echoing_summarizer_ends_in_the_degraded_record_with_events_saying_why() -> None:
    graph, summarizer = _graph(lambda messages: AIMessage(ECHO))
    values, events = _until_compacted(graph)
    assert values["summary"]["degraded"] is True
    assert values["compaction"]["degraded"] is True
    assert summarizer.calls == 2  # the answer and one repair request, then the next model
    rejected = [e for e in events if e["event"] == "compaction.rejected"]
    assert [(e["model"], e["reasons"], e["repair"]) for e in rejected] == [
        ("scripted", ["echo"], True),
        ("scripted", ["echo"], False),
        ("scripted", ["echo"], True),
        ("scripted", ["echo"], False),
    ]
    assert rejected[0]["problems"] == [
        'echo: SESSION INTENT repeats the instruction ("continue the work without the folded '
        'messages") instead of saying what the folded turns hold'
    ]
    [summarized] = [e for e in events if e["event"] == "compaction.summarized"]
    assert summarized["outcome"] == "degraded"
    assert summarized["reasons"] == ["echo"]


def test_a_summarizer_that_fixes_its_answer_on_repair_is_committed() -> None:
    def summary(messages: list[BaseMessage]) -> AIMessage:
        if "Your answer cannot be used" in str(messages[-1].content):
            return AIMessage(summary_text("Questions about orders.", "Questions were asked."))
        return AIMessage(ECHO)

    graph, summarizer = _graph(summary)
    values, events = _until_compacted(graph)
    assert not values["summary"].get("degraded")
    assert values["summary"]["session_intent"] == "Questions about orders."
    assert summarizer.calls == 2
    rejected = [e for e in events if e["event"] == "compaction.rejected"]
    assert [(e["reasons"], e["repair"]) for e in rejected] == [(["echo"], True)]
