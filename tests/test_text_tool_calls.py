"""Tool calls a model wrote as text: recovered into real calls, or kept with a warning."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import Graph, build_graph
from ctxgraph.nodes.compaction.ledger import derive_ledger, render_ledger
from ctxgraph.nodes.text_tool_calls import (
    CALL_ID_PREFIX,
    EVENT,
    LIKELY_CAUSE,
    MARK_KEY,
    TextToolCallMode,
    TextToolCalls,
    read_text_tool_calls,
    schema_problem,
)
from ctxgraph.state import Context, Models, Settings, SettingsError
from ctxgraph.state.scripted_model import ScriptedChatModel

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real_model"
RECORDED = DATA / "qwen2.5-coder-1.5b-instruct.jsonl"

ORDERS = {"A123": "shipped", "B456": "processing", "C789": "delivered"}


@tool
def lookup_order(order_id: str) -> str:
    """Look up an order by its id."""
    return f"Order {order_id}: {ORDERS.get(order_id, 'not found')}"


@tool
def set_priority(order_id: str, level: int) -> str:
    """Set an order's priority level."""
    return f"Order {order_id}: priority {level}"


TOOLS: list[BaseTool] = [lookup_order]
FENCED = (
    '```json\n{\n  "name": "lookup_order",\n  "arguments": {\n    "order_id": "A123"\n  }\n}\n```'
)


def recorded_main_answers() -> list[dict[str, Any]]:
    if not DATA.is_dir():
        pytest.skip(f"the recorded real-model outputs are not there ({DATA})")
    records = [json.loads(line) for line in RECORDED.read_text(encoding="utf-8").splitlines()]
    return [record for record in records if record["role"] == "main"]


def read(
    text: str, mode: TextToolCallMode = "recover", tools: list[BaseTool] | None = None
) -> TextToolCalls:
    return read_text_tool_calls(AIMessage(text, id="a1"), TOOLS if tools is None else tools, mode)


def called(found: TextToolCalls) -> list[tuple[str, dict[str, Any]]]:
    return [(call["name"], call["args"]) for call in found.message.tool_calls]


def warning(problem: str) -> str:
    return f"{LIKELY_CAUSE}: {problem}; the text stays the answer and no tool ran"


# --- every recorded main answer of the real model ------------------------------------------

RECOVERED_SEQS = {
    # <tools>\n{"name": "lookup_order", ...}\n</tools>
    7: ("tagged", "A123"),
    15: ("tagged", "B456"),
    20: ("tagged", "C789"),
    22: ("tagged", "A123"),
    # ```json fenced, multi-line
    24: ("fenced", "A123"),
    26: ("fenced", "B456"),
    28: ("fenced", "C789"),
    30: ("fenced", "B456"),
    32: ("fenced", "B456"),
    35: ("fenced", "B456"),
    37: ("fenced", "B456"),
}
WARNED_SEQS = {17: warning("update_order is not a bound tool (bound: lookup_order)")}
PROSE_SEQS = {1, 3, 5, 9, 12}


def test_every_recorded_main_answer_is_recovered_warned_or_left_as_prose() -> None:
    answers = recorded_main_answers()
    assert {r["seq"] for r in answers} == set(RECOVERED_SEQS) | set(WARNED_SEQS) | PROSE_SEQS
    for record in answers:
        text = record["answer"]["text"]
        reply = AIMessage(text, id=f"rec-{record['seq']}")
        found = read_text_tool_calls(reply, TOOLS, "recover")
        seq = record["seq"]
        if seq in RECOVERED_SEQS:
            form, order = RECOVERED_SEQS[seq]
            assert found.recovered == 1 and found.warning == "" and found.form == form, seq
            assert called(found) == [("lookup_order", {"order_id": order})]
            assert found.message.tool_calls[0]["id"].startswith(CALL_ID_PREFIX)
            assert found.message.content == ""
            assert found.message.id == reply.id
            mark = found.message.additional_kwargs[MARK_KEY]
            assert mark == {"recovered": 1, "form": form, "text": text}
        elif seq in WARNED_SEQS:
            assert found.message is reply and found.recovered == 0
            assert found.warning == WARNED_SEQS[seq]
        else:
            assert found.message is reply and found.recovered == 0 and found.warning == ""


def test_recorded_calls_are_only_warned_about_in_mode_warn_and_untouched_when_off() -> None:
    answers = recorded_main_answers()
    warned = [r for r in answers if read(r["answer"]["text"], "warn").warning]
    assert sorted(r["seq"] for r in warned) == sorted([*RECOVERED_SEQS, *WARNED_SEQS])
    for record in answers:
        found = read(record["answer"]["text"], "warn")
        assert found.recovered == 0 and not found.message.tool_calls
        off = read(record["answer"]["text"], "off")
        assert off.recovered == 0 and off.warning == "" and not off.message.tool_calls


def test_recovered_call_ids_are_fresh() -> None:
    first, second = read(FENCED), read(FENCED)
    assert first.message.tool_calls[0]["id"] != second.message.tool_calls[0]["id"]


# --- the forms small models write -----------------------------------------------------------


def test_a_doubled_brace_is_recovered() -> None:
    found = read('{{"name": "lookup_order", "arguments": {"order_id": "A123"}}}')
    assert called(found) == [("lookup_order", {"order_id": "A123"})]
    assert found.form == "doubled_brace"


def test_tool_call_tags_and_a_missing_closing_brace_are_recovered() -> None:
    found = read(
        '<tool_call>\n{"name": "lookup_order", "arguments": {"order_id": "C789"}\n</tool_call>'
    )
    assert called(found) == [("lookup_order", {"order_id": "C789"})]
    assert found.form == "tagged"


@pytest.mark.parametrize(
    "text",
    [
        '{"function": "lookup_order", "parameters": {"order_id": "B456"}}',
        '{"tool": "lookup_order", "args": {"order_id": "B456"}}',
        '{"name": "lookup_order", "input": {"order_id": "B456"}}',
        '{"name": "lookup_order", "arguments": "{\\"order_id\\": \\"B456\\"}"}',
        '{"type": "function", "function": {"name": "lookup_order", '
        '"arguments": "{\\"order_id\\": \\"B456\\"}"}}',
        '{"name": "lookup_order", "order_id": "B456"}',
    ],
    ids=["function-parameters", "tool-args", "input", "string-arguments", "openai", "inline"],
)
def test_common_variants_are_recovered(text: str) -> None:
    found = read(text)
    assert called(found) == [("lookup_order", {"order_id": "B456"})]
    assert found.warning == "" and found.form == "bare"


def test_several_calls_in_one_answer_are_all_recovered() -> None:
    text = (
        '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A123"}}</tool_call>\n'
        '<tool_call>{"name": "set_priority", "arguments": {"order_id": "A123", "level": 2}}'
        "</tool_call>"
    )
    found = read(text, tools=[lookup_order, set_priority])
    assert called(found) == [
        ("lookup_order", {"order_id": "A123"}),
        ("set_priority", {"order_id": "A123", "level": 2}),
    ]
    assert found.recovered == 2
    assert len({call["id"] for call in found.message.tool_calls}) == 2


def test_a_json_list_of_calls_is_recovered() -> None:
    text = (
        '[{"name": "lookup_order", "arguments": {"order_id": "A123"}}, '
        '{"name": "lookup_order", "arguments": {"order_id": "B456"}}]'
    )
    found = read(text)
    assert called(found) == [
        ("lookup_order", {"order_id": "A123"}),
        ("lookup_order", {"order_id": "B456"}),
    ]
    assert found.form == "list"


# --- what is never recovered ----------------------------------------------------------------


def test_prose_around_a_call_is_warned_about_and_kept() -> None:
    text = 'Let me check that order. {"name": "lookup_order", "arguments": {"order_id": "A123"}}'
    found = read(text)
    assert found.message.content == text and not found.message.tool_calls
    assert found.warning == warning("the answer holds other text besides the call")


def test_a_call_next_to_other_json_is_warned_about() -> None:
    text = '{"name": "lookup_order", "arguments": {"order_id": "A123"}}\n{"status": "ok"}'
    found = read(text)
    assert found.recovered == 0
    assert found.warning == warning("the answer holds other text besides the call")


def test_arguments_that_do_not_validate_are_warned_about() -> None:
    found = read('{"name": "lookup_order", "arguments": {"id": "A123"}}')
    assert found.recovered == 0
    assert found.warning == warning(
        "the arguments of lookup_order do not match its schema (order_id: Field required)"
    )
    typed = read(
        '{"name": "set_priority", "arguments": {"order_id": "A123", "level": "high"}}',
        tools=[set_priority],
    )
    assert typed.recovered == 0
    assert typed.warning.startswith(
        f"{LIKELY_CAUSE}: the arguments of set_priority do not match its schema "
        "(level: Input should be a valid integer"
    )


def test_arguments_that_are_not_an_object_are_warned_about() -> None:
    found = read('{"name": "lookup_order", "arguments": "A123"}')
    assert found.warning == warning("the arguments of lookup_order are not a JSON object")


def test_one_bad_call_keeps_every_call_of_the_answer_as_text() -> None:
    text = (
        '{"name": "lookup_order", "arguments": {"order_id": "A123"}}\n'
        '{"name": "cancel_order", "arguments": {"order_id": "A123"}}'
    )
    found = read(text)
    assert found.recovered == 0 and not found.message.tool_calls
    assert found.warning == warning("cancel_order is not a bound tool (bound: lookup_order)")


def test_mode_warn_keeps_a_valid_call_as_text_and_says_why() -> None:
    found = read(FENCED, "warn")
    assert found.message.content == FENCED and not found.message.tool_calls
    assert found.warning == warning(
        "text_tool_calls is 'warn' (CTXGRAPH_TEXT_TOOL_CALLS), so it was not run"
    )


def test_mode_off_reads_nothing() -> None:
    found = read(FENCED, "off")
    assert found.message.content == FENCED and found.warning == "" and found.recovered == 0


def test_no_tools_bound_leaves_the_answer_alone() -> None:
    found = read(FENCED, tools=[])
    assert found.message.content == FENCED and found.warning == "" and found.recovered == 0


def test_json_that_is_not_a_call_is_left_alone() -> None:
    for text in ['{"name": "Lin", "city": "Shenzhen"}', '```json\n{"status": "shipped"}\n```']:
        found = read(text)
        assert found.message.content == text and found.warning == "" and found.form == ""


def test_an_answer_with_real_tool_calls_is_not_read() -> None:
    reply = AIMessage(
        FENCED,
        tool_calls=[{"name": "lookup_order", "args": {"order_id": "B456"}, "id": "call_1"}],
    )
    found = read_text_tool_calls(reply, TOOLS, "recover")
    assert found.message is reply and found.warning == ""


def test_a_json_schema_tool_is_checked_for_required_keys_and_types() -> None:
    schema = {
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "count": {"type": "integer"}},
        "required": ["order_id"],
    }
    raw = StructuredTool.from_function(
        func=lambda **kwargs: "ok", name="raw_lookup", description="Raw.", args_schema=schema
    )
    assert schema_problem(raw, {"order_id": "A1", "count": 2}) == ""
    assert schema_problem(raw, {"count": 2}) == "order_id: Field required"
    assert schema_problem(raw, {"order_id": "A1", "count": True}) == "count: expected integer"


# --- the setting ----------------------------------------------------------------------------


def test_the_setting_defaults_to_recover_and_reads_its_environment_variable() -> None:
    assert Settings().text_tool_calls == "recover"
    assert Settings.from_env({"CTXGRAPH_TEXT_TOOL_CALLS": "warn"}).text_tool_calls == "warn"
    with pytest.raises(SettingsError) as raised:
        Settings(text_tool_calls="maybe")  # type: ignore[arg-type]
    assert str(raised.value) == (
        "Settings.text_tool_calls must be 'recover', 'warn' or 'off', got 'maybe'"
    )


def test_the_configuration_page_lists_the_setting_and_its_variable() -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
    assert '| `text_tool_calls` | `"recover"` |' in page
    assert "| `CTXGRAPH_TEXT_TOOL_CALLS` | `recover` |" in page


# --- through the graph ----------------------------------------------------------------------


def graph_for(model: ScriptedChatModel, mode: TextToolCallMode = "recover") -> Graph:
    return build_graph(
        models=Models(main=model),
        tools=TOOLS,
        settings=Settings(memory_extraction="off", text_tool_calls=mode),
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
    )


CONFIG: Any = {"configurable": {"thread_id": "t-text"}}
CTX = Context(user_id="u")
QUESTION = HumanMessage("Where is order A123?", id="h1")


def run(graph: Graph, use_async: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The final state and the custom events of one turn."""
    arguments: dict[str, Any] = {"context": CTX, "stream_mode": ["custom", "values"]}
    if use_async:

        async def collect() -> list[tuple[str, Any]]:
            return [c async for c in graph.astream({"messages": [QUESTION]}, CONFIG, **arguments)]

        streamed = asyncio.run(collect())
    else:
        streamed = list(graph.stream({"messages": [QUESTION]}, CONFIG, **arguments))
    values = [chunk for mode, chunk in streamed if mode == "values"]
    events = [chunk for mode, chunk in streamed if mode == "custom"]
    return values[-1], [e for e in events if e.get("event") == EVENT]


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_a_fenced_call_runs_the_tool_and_the_ledger_marks_it_recovered(use_async: bool) -> None:
    model = ScriptedChatModel(script=[FENCED, "Order A123 has shipped."])
    state, events = run(graph_for(model), use_async)

    assert model.calls == 2
    _, _, call, result = model.requests[1][-4:]  # the second request ends with the exchange
    assert isinstance(call, AIMessage) and call.content == ""
    assert [(c["name"], c["args"]) for c in call.tool_calls] == [
        ("lookup_order", {"order_id": "A123"})
    ]
    call_id = call.tool_calls[0]["id"]
    assert call_id is not None and call_id.startswith(CALL_ID_PREFIX)
    assert isinstance(result, ToolMessage) and result.tool_call_id == call_id
    assert result.content == "Order A123: shipped"
    messages = state["messages"]
    assert [type(m).__name__ for m in messages] == [
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "AIMessage",
    ]
    assert messages[-1].content == "Order A123 has shipped."
    assert messages[1].additional_kwargs[MARK_KEY]["text"] == FENCED

    ledger = derive_ledger(messages)
    [entry] = ledger["tool_calls"]
    assert entry["id"] == call_id and entry["status"] == "succeeded"
    assert entry.get("recovered") is True
    assert f"id={call_id} (from text)" in render_ledger(ledger)

    assert events == [
        {
            "event": EVENT,
            "thread_id": "t-text",
            "recovered": 1,
            "warned": False,
            "form": "fenced",
            "reason": None,
        }
    ]


def test_a_call_of_an_unbound_tool_stays_the_answer_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = '<tools>\n{"name": "update_order", "arguments": {"order_id": "B456"}}\n</tools>'
    model = ScriptedChatModel(script=[text])
    with caplog.at_level(logging.WARNING, logger="ctxgraph.model"):
        state, events = run(graph_for(model), use_async=False)

    assert model.calls == 1
    assert [type(m).__name__ for m in state["messages"]] == ["HumanMessage", "AIMessage"]
    assert state["messages"][-1].content == text
    expected = warning("update_order is not a bound tool (bound: lookup_order)")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [(r.name, r.getMessage()) for r in warnings] == [("ctxgraph.model", expected)]
    assert events == [
        {
            "event": EVENT,
            "thread_id": "t-text",
            "recovered": 0,
            "warned": True,
            "form": "tagged",
            "reason": expected,
        }
    ]
    assert derive_ledger(state["messages"])["tool_calls"] == []


def test_mode_off_shows_the_text_with_no_event() -> None:
    model = ScriptedChatModel(script=[FENCED])
    state, events = run(graph_for(model, "off"), use_async=False)
    assert model.calls == 1 and state["messages"][-1].content == FENCED and events == []


def test_a_recovered_call_cut_off_at_the_output_limit_is_answered_as_invalid() -> None:
    cut = AIMessage(FENCED, response_metadata={"finish_reason": "length"})
    model = ScriptedChatModel(script=[cut, "Sorry, let me try again later."])
    state, _ = run(graph_for(model), use_async=False)

    assert model.calls == 2
    error = state["messages"][2]
    assert isinstance(error, ToolMessage) and error.status == "error"
    assert error.tool_call_id.startswith(CALL_ID_PREFIX)
    assert "cut off at the model's output token limit" in error.text


# --- subagents -------------------------------------------------------------------------


def test_a_subagent_that_writes_its_call_as_text_runs_the_tool() -> None:
    from tests.test_subagents_graph import (
        child_model,
        delegate,
        graph_for,
        parent_model,
        task,
        turn,
    )

    def child_answer(request: list[BaseMessage]) -> AIMessage | str:
        last = request[-1]
        if isinstance(last, ToolMessage):
            return f"the lookup said: {last.content}"
        return '```json\n{"name": "lookup", "arguments": {"query": "customs PX-7781"}}\n```'

    child = child_model(child_answer)
    graph = graph_for(parent_model(delegate(task("c1", "Check customs."))), child)
    turn(graph, "check customs")

    (second, *_) = child.requests[1:]
    results = [m for m in second if isinstance(m, ToolMessage)]
    assert [m.content for m in results] == ["found: customs PX-7781"]
    calls = [m for m in second if isinstance(m, AIMessage) and m.tool_calls]
    assert calls[0].text == "" and calls[0].tool_calls[0]["id"].startswith("call_text_")
