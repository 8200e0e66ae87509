"""The graph with a real ``ChatOpenAI`` against a local, scripted OpenAI-compatible server."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any, cast

import pytest
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field, SecretStr

from ctxgraph.graph import build_graph
from ctxgraph.state import Context, InputState, ModelConfigError, Models, Settings
from ctxgraph.store.persistence.connection import Persistence
from tests.support.openai_server import EXHAUSTED, OpenAIServer, Reply, ToolCall

SYSTEM = "You are the order desk. Answer in one sentence."
QUESTION = "Where is order A-17?"
ORDER_RESULT = "order A-17: shipped on 2024-05-02 via DHL"
FINAL = "Order A-17 shipped on 2024-05-02 via DHL."
CALL_ID = "call_lookup_a17"
LOOKUP_SCHEMA = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Look up an order's shipping status by its id.",
        "parameters": {
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
            "type": "object",
        },
    },
}
ASSISTANT_CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": CALL_ID,
            "type": "function",
            "function": {"name": "lookup_order", "arguments": json.dumps({"order_id": "A-17"})},
        }
    ],
}
TOOL_RESULT = {"role": "tool", "content": ORDER_RESULT, "tool_call_id": CALL_ID}
OPENING = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
# A fresh thread in memory mode auto binds no built-in tool: the provider receives only the
# caller's tools (no `tools` at all without any).


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as running:
        yield running


def openai_models(server: OpenAIServer, model: str = "gpt-test") -> Models:
    return Models.openai(model, base_url=server.base_url, api_key="test-key")


def order_tool(calls: list[str]) -> BaseTool:
    """A deterministic tool that records the order ids it was called with."""

    @tool
    def lookup_order(order_id: str) -> str:
        """Look up an order's shipping status by its id."""
        calls.append(order_id)
        return f"order {order_id}: shipped on 2024-05-02 via DHL"

    return lookup_order


def tool_flow_script(server: OpenAIServer) -> None:
    server.script(
        Reply(tool_calls=(ToolCall("lookup_order", {"order_id": "A-17"}, CALL_ID),)), FINAL
    )


def ask(question: str = QUESTION) -> InputState:
    return {"messages": [HumanMessage(question)]}


def test_plain_answer_and_exact_request(server: OpenAIServer) -> None:
    server.script("Paris is the capital of France.")
    graph = build_graph(models=openai_models(server), settings=Settings(system_prompt=SYSTEM))

    result = graph.invoke(ask("What is the capital of France?"), context=Context(user_id="u1"))

    assert [m.type for m in result["messages"]] == ["human", "ai"]
    final = result["messages"][-1]
    assert isinstance(final, AIMessage)
    assert final.content == "Paris is the capital of France."
    assert final.response_metadata["model_name"] == "gpt-test"
    assert server.requests == [
        {
            "model": "gpt-test",
            "stream": False,
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": "What is the capital of France?"},
            ],
        }
    ]
    assert server.pending == 0


async def test_plain_answer_async(server: OpenAIServer) -> None:
    server.script("Paris is the capital of France.")
    graph = build_graph(models=openai_models(server), settings=Settings(system_prompt=SYSTEM))

    result = await graph.ainvoke(ask("Capital of France?"), context=Context(user_id="u1"))

    assert result["messages"][-1].content == "Paris is the capital of France."
    assert len(server.requests) == 1
    assert server.requests[0]["model"] == "gpt-test"
    assert server.requests[0]["messages"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Capital of France?"},
    ]


def test_tool_call_through_tools_node_on_postgres(
    server: OpenAIServer, persistence: Persistence, thread_id: str
) -> None:
    calls: list[str] = []
    tool_flow_script(server)
    graph = build_graph(
        checkpointer=persistence.checkpointer,
        store=persistence.store,
        models=openai_models(server),
        tools=[order_tool(calls)],
        settings=Settings(system_prompt=SYSTEM, memory_extraction="off"),
    )
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}

    graph.invoke(ask(), config, context=Context(user_id="u1"))

    assert calls == ["A-17"]
    state = graph.get_state(config)
    assert state.next == ()
    messages = state.values["messages"]
    assert [type(m) for m in messages] == [HumanMessage, AIMessage, ToolMessage, AIMessage]
    assert messages[1].tool_calls == [
        {"name": "lookup_order", "args": {"order_id": "A-17"}, "id": CALL_ID, "type": "tool_call"}
    ]
    assert messages[2].tool_call_id == CALL_ID
    assert messages[2].content == ORDER_RESULT
    assert messages[2].status == "success"
    assert messages[3].content == FINAL

    first, second = server.requests
    assert first["messages"] == OPENING
    assert first["tools"] == [LOOKUP_SCHEMA]
    assert second["messages"] == [*OPENING, ASSISTANT_CALL, TOOL_RESULT]
    assert second["tools"] == [LOOKUP_SCHEMA]


def test_tool_flow_streams_over_sse(server: OpenAIServer) -> None:
    calls: list[str] = []
    tool_flow_script(server)
    graph = build_graph(
        models=openai_models(server),
        tools=[order_tool(calls)],
        settings=Settings(system_prompt=SYSTEM, memory_extraction="off"),
    )

    chunks: list[AIMessageChunk] = []
    updated: list[str] = []
    for mode, payload in graph.stream(
        ask(), context=Context(user_id="u1"), stream_mode=["messages", "updates"]
    ):
        if mode == "messages":
            message, metadata = cast(tuple[BaseMessage, dict[str, Any]], payload)
            if isinstance(message, AIMessageChunk):
                assert metadata["langgraph_node"] == "model"
                chunks.append(message)
        else:
            updated.extend(cast(dict[str, Any], payload))

    assert calls == ["A-17"]
    assert updated == ["load_memory", "model", "tools", "model"]
    assert [r["stream"] for r in server.requests] == [True, True]
    assert server.requests[0]["messages"] == OPENING
    assert server.requests[0]["tools"] == [LOOKUP_SCHEMA]
    assert server.requests[1]["messages"] == [*OPENING, ASSISTANT_CALL, TOOL_RESULT]
    call_pieces = [c for c in chunks if c.tool_call_chunks]
    assert len(call_pieces) >= 2
    assert (
        "".join(c.tool_call_chunks[0]["args"] or "" for c in call_pieces) == '{"order_id": "A-17"}'
    )
    text_pieces = [c.content for c in chunks if c.content]
    assert len(text_pieces) >= 3
    assert "".join(str(p) for p in text_pieces) == FINAL


class OrderStatus(BaseModel):
    """The shipping status of one order."""

    order_id: str = Field(description="The order's id")
    shipped: bool
    eta_days: int


def test_structured_output_via_function_calling(server: OpenAIServer) -> None:
    arguments = {"order_id": "A-17", "shipped": True, "eta_days": 2}
    server.script(Reply(tool_calls=(ToolCall("OrderStatus", arguments, "call_status"),)))
    structured = openai_models(server).main.with_structured_output(
        OrderStatus, method="function_calling"
    )

    result = structured.invoke("Status of A-17?")

    assert result == OrderStatus(order_id="A-17", shipped=True, eta_days=2)
    (request,) = server.requests
    assert request["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "OrderStatus",
                "description": "The shipping status of one order.",
                "parameters": {
                    "properties": {
                        "order_id": {"description": "The order's id", "type": "string"},
                        "shipped": {"type": "boolean"},
                        "eta_days": {"type": "integer"},
                    },
                    "required": ["order_id", "shipped", "eta_days"],
                    "type": "object",
                },
            },
        }
    ]
    assert request["tool_choice"] == {"type": "function", "function": {"name": "OrderStatus"}}
    assert request["parallel_tool_calls"] is False


def test_from_env_roles_default_to_main(server: OpenAIServer) -> None:
    models = Models.from_env(
        {
            "CTXGRAPH_MODEL": "gpt-main",
            "OPENAI_API_KEY": "test-key",
            "OPENAI_BASE_URL": server.base_url,
        }
    )

    assert isinstance(models.main, ChatOpenAI)
    assert models.main.model_name == "gpt-main"
    assert models.summary_model is models.main
    assert models.memory_model is models.main


def test_from_env_same_name_as_main_reuses_main(server: OpenAIServer) -> None:
    models = Models.from_env(
        {
            "CTXGRAPH_MODEL": "gpt-main",
            "CTXGRAPH_SUMMARY_MODEL": "gpt-main",
            "OPENAI_API_KEY": "test-key",
            "OPENAI_BASE_URL": server.base_url,
        }
    )

    assert models.summary_model is models.main


def test_from_env_separate_role_models(server: OpenAIServer) -> None:
    models = Models.from_env(
        {
            "CTXGRAPH_MODEL": "gpt-main",
            "CTXGRAPH_SUMMARY_MODEL": "gpt-summary",
            "CTXGRAPH_MEMORY_MODEL": "gpt-memory",
            "OPENAI_API_KEY": "test-key",
            "OPENAI_BASE_URL": server.base_url,
        }
    )
    roles = [models.main, models.summary_model, models.memory_model]

    assert all(isinstance(m, ChatOpenAI) for m in roles)
    assert len({id(m) for m in roles}) == 3
    assert [getattr(m, "model_name", None) for m in roles] == [
        "gpt-main",
        "gpt-summary",
        "gpt-memory",
    ]
    server.script("main", "summary", "memory")
    assert [m.invoke("hi").content for m in roles] == ["main", "summary", "memory"]
    assert [r["model"] for r in server.requests] == ["gpt-main", "gpt-summary", "gpt-memory"]


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"CTXGRAPH_MODEL": "   "},
        {"OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"},
        {"CTXGRAPH_MODEL": "gpt-main"},
    ],
    ids=["empty", "blank-model", "no-model", "model-without-key-or-url"],
)
def test_from_env_missing_configuration(environ: dict[str, str]) -> None:
    with pytest.raises(ModelConfigError) as raised:
        Models.from_env(environ)

    message = str(raised.value)
    assert "\n" not in message
    assert "CTXGRAPH_MODEL" in message
    assert "OPENAI_API_KEY" in message


def test_from_env_base_url_without_key(server: OpenAIServer) -> None:
    models = Models.from_env({"CTXGRAPH_MODEL": "local-model", "OPENAI_BASE_URL": server.base_url})
    server.script("Served locally.")
    graph = build_graph(models=models, settings=Settings(system_prompt=SYSTEM))

    result = graph.invoke(ask("Hello?"), context=Context(user_id="u1"))

    assert result["messages"][-1].content == "Served locally."
    assert [r["model"] for r in server.requests] == ["local-model"]


def test_from_env_reads_only_the_given_mapping(
    server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A base URL in the process environment must not redirect a mapping without one."""
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    models = Models.from_env({"CTXGRAPH_MODEL": "gpt-main", "OPENAI_API_KEY": "k"})
    main = cast(ChatOpenAI, models.main)
    assert main.openai_api_base == "https://api.openai.com/v1"


def post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_server_unknown_path_and_exhausted_script(server: OpenAIServer) -> None:
    status, body = post(f"{server.base_url}/embeddings", {"input": "x"})
    assert status == 404
    assert "/v1/embeddings" in body["error"]["message"]
    assert server.requests == []

    status, body = post(f"{server.base_url}/chat/completions", {"model": "m", "messages": []})
    assert status == 500
    assert body["error"]["message"] == EXHAUSTED
    assert "exhausted" in EXHAUSTED
    assert server.requests == [{"model": "m", "messages": []}]


def test_server_streams_usage_when_asked(server: OpenAIServer) -> None:
    server.script("Counted reply here.")
    model = ChatOpenAI(
        model="gpt-test", base_url=server.base_url, api_key=SecretStr("k"), stream_usage=True
    )

    chunks = list(model.stream("Count please."))
    merged = sum(chunks[1:], chunks[0])

    assert server.requests[0]["stream_options"] == {"include_usage": True}
    assert len([c for c in chunks if c.content]) == 3
    assert merged.content == "Counted reply here."
    assert merged.usage_metadata is not None
    assert merged.usage_metadata["total_tokens"] == 15
