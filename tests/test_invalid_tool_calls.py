"""Tool calls whose arguments are not a JSON object: answered with an error, then retried."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import pytest
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    InvalidToolCall,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph import Graph, build_graph
from ctxgraph.nodes.compaction.partition import partition_history
from ctxgraph.nodes.invalid_calls import (
    ORIGINALS_KEY,
    SHOWN_ARGUMENT_CHARS,
    answer_invalid_calls,
    argument_problem,
    invalid_call_id,
    invalid_calls_node,
)
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.demo_replies import demo_tools
from ctxgraph.state.scripted_model import ScriptedChatModel
from tests.support.openai_server import OpenAIServer, Reply

SYSTEM = "Use the calculator for arithmetic."
QUESTION = "What is 17 * 23?"
PARSE_ERROR = "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
BAD_CALL = AIMessage(
    content="",
    invalid_tool_calls=[
        {
            "name": "calculator",
            "args": "{bad json",
            "id": "call_1",
            "error": PARSE_ERROR,
            "type": "invalid_tool_call",
        }
    ],
)
EXPECTED_ERROR = (
    "Error: this calculator call was not run, because its arguments are unusable.\n"
    "Problem: invalid JSON: Expecting property name enclosed in double quotes "
    "(line 1, column 2)\n"
    f"Parser message: {PARSE_ERROR}\n"
    'Arguments as received: "{bad json"\n'
    "Call the tool again with its arguments as one JSON object that matches its schema."
)
SETTINGS = Settings(system_prompt=SYSTEM, memory_extraction="off")


def config(thread: str = "t") -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


def graph_for(models: Models) -> Graph:
    return build_graph(
        models=models,
        tools=demo_tools(),
        settings=SETTINGS,
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
    )


def assert_every_call_answered(request: Sequence[BaseMessage]) -> None:
    """Each assistant tool call (invalid ones too) has its result before the next non-tool."""
    for index, message in enumerate(request):
        if not isinstance(message, AIMessage):
            continue
        wanted = {c["id"] for c in message.tool_calls} | {
            c["id"] for c in message.invalid_tool_calls
        }
        answered: set[str | None] = set()
        for later in request[index + 1 :]:
            if not isinstance(later, ToolMessage):
                break
            answered.add(later.tool_call_id)
        assert wanted <= answered, (message, answered)


def test_invalid_call_gets_an_error_result_and_the_model_answers() -> None:
    model = ScriptedChatModel(script=[BAD_CALL, "17 * 23 is 391.", "You are welcome."])
    graph = graph_for(Models(main=model))
    ctx = Context(user_id="u")

    result = graph.invoke({"messages": [HumanMessage(QUESTION, id="h1")]}, config(), context=ctx)

    assert model.calls == 2
    system, question, call, error = model.requests[1]
    assert isinstance(system, SystemMessage) and system.text == SYSTEM
    assert question == HumanMessage(QUESTION, id="h1")
    # The call the provider gets back is well-formed and answered right after it.
    assert isinstance(call, AIMessage)
    assert call.tool_calls == [
        {"name": "calculator", "args": {}, "id": "call_1", "type": "tool_call"}
    ]
    assert call.invalid_tool_calls == []
    assert call.additional_kwargs[ORIGINALS_KEY] == [dict(BAD_CALL.invalid_tool_calls[0])]
    assert error == ToolMessage(
        content=EXPECTED_ERROR,
        tool_call_id="call_1",
        name="calculator",
        status="error",
        id="call_1-invalid-arguments",
    )
    answer = result["messages"][-1]
    assert isinstance(answer, AIMessage)
    assert answer.text == "17 * 23 is 391."
    assert [m.type for m in result["messages"]] == ["human", "ai", "tool", "ai"]

    graph.invoke({"messages": [HumanMessage("Thanks.")]}, config(), context=ctx)
    third = model.requests[2]
    assert [m.type for m in third] == ["system", "human", "ai", "tool", "ai", "human"]
    assert_every_call_answered(third)


def test_readable_calls_run_and_invalid_ones_get_errors_in_one_answer() -> None:
    """An answer with both: the tools node runs the readable call, then invalid_calls."""
    mixed = AIMessage(
        content="",
        tool_calls=[{"name": "calculator", "args": {"expression": "17 * 23"}, "id": "ok_1"}],
        invalid_tool_calls=[
            {
                "name": "calculator",
                "args": '{"expression": 2 +}',
                "id": None,
                "error": None,
                "type": "invalid_tool_call",
            }
        ],
    )
    model = ScriptedChatModel(script=[mixed, "391, and the second call failed."])
    graph = graph_for(Models(main=model))

    steps = [
        node
        for update in graph.stream(
            {"messages": [HumanMessage(QUESTION)]},
            config(),
            context=Context(user_id="u"),
            stream_mode="updates",
        )
        for node in update
    ]

    assert steps == ["load_memory", "model", "tools", "invalid_calls", "model"]
    _, _, call, result, error = model.requests[1]
    assert isinstance(call, AIMessage) and isinstance(result, ToolMessage)
    assert isinstance(error, ToolMessage)
    synthesized = invalid_call_id(call.id, 0, "calculator", '{"expression": 2 +}')
    assert [c["id"] for c in call.tool_calls] == ["ok_1", synthesized]
    assert (result.tool_call_id, result.text, result.status) == ("ok_1", "391", "success")
    assert (error.tool_call_id, error.status) == (synthesized, "error")
    assert "Problem: invalid JSON: Expecting ',' delimiter (line 1, column 18)" in error.text
    assert "Parser message" not in error.text
    assert_every_call_answered(model.requests[1])


def test_error_text_quotes_long_arguments_in_part() -> None:
    raw = '{"text": "' + "x" * 2000
    entry: InvalidToolCall = {
        "name": None,
        "args": raw,
        "id": "c9",
        "error": None,
        "type": "invalid_tool_call",
    }
    rewritten, (error,) = answer_invalid_calls(AIMessage("", id="a1", invalid_tool_calls=[entry]))
    assert rewritten.tool_calls[0]["name"] == error.name == "unnamed_tool"
    assert f"(first {SHOWN_ARGUMENT_CHARS} of {len(raw)} characters)" in error.text
    assert json.dumps(raw[:SHOWN_ARGUMENT_CHARS]) in error.text
    assert "Problem: invalid JSON: Unterminated string" in error.text


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (None, "no arguments were sent"),
        ("  ", "no arguments were sent"),
        ("[1, 2]", "the arguments are a JSON list, not an object"),
        ('{"a": 1}}', "invalid JSON: Extra data (line 1, column 9)"),
        ('{"a": 1}', ""),
    ],
)
def test_argument_problem(args: str | None, problem: str) -> None:
    assert argument_problem(args) == problem


def test_synthesized_ids_are_stable() -> None:
    first = invalid_call_id("msg", 0, "calculator", "{")
    assert first == invalid_call_id("msg", 0, "calculator", "{")
    assert first != invalid_call_id("msg", 1, "calculator", "{")
    assert first.startswith("call_invalid_")


def test_node_refuses_a_state_without_invalid_calls() -> None:
    with pytest.raises(ValueError, match="the state ends with HumanMessage"):
        invalid_calls_node({"messages": [HumanMessage("hi")]})


def test_compaction_keeps_the_answer_and_its_error_together() -> None:
    rewritten, results = answer_invalid_calls(BAD_CALL.model_copy(update={"id": "a1"}))
    history: list[Any] = [
        HumanMessage("one", id="h1"),
        AIMessage("first", id="a0"),
        HumanMessage(QUESTION, id="h2"),
        rewritten,
        *results,
        AIMessage("17 * 23 is 391.", id="a2"),
    ]
    for keep in range(1, 5):
        _, kept = partition_history(history, keep)
        assert ("a1" in {m.id for m in kept}) == (
            "call_1-invalid-arguments" in {m.id for m in kept}
        ), keep
        assert_every_call_answered(kept)


# The real client: ChatOpenAI against the local OpenAI-compatible server.


@dataclass(frozen=True)
class RawCallReply(Reply):
    """A reply whose one tool call carries ``arguments`` as raw text, valid JSON or not."""

    name: str = "calculator"
    arguments: str = ""
    call_id: str = "call_1"

    def message(self) -> dict[str, Any]:
        function = {"name": self.name, "arguments": self.arguments}
        call = {"id": self.call_id, "type": "function", "function": function}
        return {"role": "assistant", "content": None, "tool_calls": [call]}

    def deltas(self) -> list[dict[str, Any]]:
        half = len(self.arguments) // 2
        function = {"name": self.name, "arguments": self.arguments[:half]}
        head = {"index": 0, "id": self.call_id, "type": "function", "function": function}
        tail = {"index": 0, "function": {"arguments": self.arguments[half:]}}
        return [
            {"role": "assistant", "content": ""},
            {"tool_calls": [head]},
            {"tool_calls": [tail]},
        ]

    @property
    def finish_reason(self) -> str:
        return "tool_calls"


UNREADABLE = '{"expression": 17 * 23}'
OPENING = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
ANSWERED_CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "calculator", "arguments": "{}"}}
    ],
}


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as running:
        yield running


def openai_graph(server: OpenAIServer) -> Graph:
    return graph_for(Models.openai("gpt-test", base_url=server.base_url, api_key="test-key"))


def assert_requests_answer_every_call(requests: Sequence[dict[str, Any]]) -> None:
    """In each request body, every assistant tool call is followed by its tool result."""
    for body in requests:
        messages = body["messages"]
        for index, message in enumerate(messages):
            wanted = {call["id"] for call in message.get("tool_calls") or []}
            following = []
            for later in messages[index + 1 :]:
                if later["role"] != "tool":
                    break
                following.append(later["tool_call_id"])
            assert wanted <= set(following), (message, following)


def test_streamed_unreadable_call_is_answered_and_retried(server: OpenAIServer) -> None:
    server.script(RawCallReply(arguments=UNREADABLE), "17 * 23 is 391.", "You are welcome.")
    graph = openai_graph(server)
    ctx = Context(user_id="u")

    chunks: list[AIMessageChunk] = []
    updated: list[str] = []
    for mode, payload in graph.stream(
        {"messages": [HumanMessage(QUESTION)]},
        config(),
        context=ctx,
        stream_mode=["messages", "updates"],
    ):
        if mode == "messages":
            message, _ = cast(tuple[BaseMessage, dict[str, Any]], payload)
            if isinstance(message, AIMessageChunk):
                chunks.append(message)
        else:
            updated.extend(cast(dict[str, Any], payload))

    assert updated == ["load_memory", "model", "invalid_calls", "model"]
    assert "".join(str(c.content) for c in chunks) == "17 * 23 is 391."
    first, second = server.requests
    assert first["stream"] and second["stream"]
    tool_result = second["messages"][-1]
    assert second["messages"] == [*OPENING, ANSWERED_CALL, tool_result]
    assert tool_result["role"] == "tool" and tool_result["tool_call_id"] == "call_1"
    problem = "Problem: invalid JSON: Expecting ',' delimiter (line 1, column 19)"
    assert problem in tool_result["content"]
    assert json.dumps(UNREADABLE) in tool_result["content"]

    graph.invoke({"messages": [HumanMessage("Thanks.")]}, config(), context=ctx)
    assert len(server.requests) == 3
    assert_requests_answer_every_call(server.requests)
    assert [m["role"] for m in server.requests[2]["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]


@dataclass(frozen=True)
class CutOffReply(RawCallReply):
    """A reply the output token limit cut off in the middle of its call's arguments."""

    @property
    def finish_reason(self) -> str:
        return "length"


def test_streamed_call_cut_off_at_the_output_limit_is_not_run(server: OpenAIServer) -> None:
    """The client completes the partial JSON; the cut-off answer's call still must not run."""
    server.script(CutOffReply(arguments='{"expression": "17 *'), "17 * 23 is 391.")
    graph = openai_graph(server)

    updated = [
        node
        for mode, update in graph.stream(
            {"messages": [HumanMessage(QUESTION)]},
            config(),
            context=Context(user_id="u"),
            stream_mode=["messages", "updates"],
        )
        if mode == "updates"
        for node in cast(dict[str, Any], update)
    ]

    assert updated == ["load_memory", "model", "invalid_calls", "model"]
    assert server.requests[0]["stream"]
    second = server.requests[1]["messages"]
    assert second[2] == ANSWERED_CALL
    error = second[3]["content"]
    assert "Problem: the answer was cut off at the model's output token limit" in error
    assert "(finish_reason 'length')" in error
    assert json.dumps('{"expression": "17 *"}') in error
    assert_requests_answer_every_call(server.requests)


async def test_unreadable_call_without_streaming_async(server: OpenAIServer) -> None:
    """Without streaming the client parses strictly and reports its own error message."""
    server.script(RawCallReply(arguments="{bad json"), "Sorry, once more: 391.")
    graph = openai_graph(server)

    result = await graph.ainvoke(
        {"messages": [HumanMessage(QUESTION)]}, config(), context=Context(user_id="u")
    )

    assert result["messages"][-1].text == "Sorry, once more: 391."
    second = server.requests[1]
    assert second["messages"][2] == ANSWERED_CALL
    error = second["messages"][3]["content"]
    assert "Problem: invalid JSON: Expecting property name enclosed in double quotes" in error
    assert "Parser message: Function calculator arguments:" in error
    assert_requests_answer_every_call(server.requests)
