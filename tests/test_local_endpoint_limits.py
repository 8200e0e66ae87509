"""Limits that suit a local model: streamed usage, long timeouts, no retry of a slow answer."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import openai
import pytest
from langchain_core.messages import AIMessageChunk
from langchain_openai import ChatOpenAI

from ctxgraph.state.local_retries import RetryRule
from ctxgraph.state.models import DEFAULT_LOCAL_TIMEOUT, DEFAULT_TIMEOUT, Models
from tests.support.cli import run_ctxgraph
from tests.support.openai_server import OpenAIServer

MODEL = "local-test"


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as running:
        yield running


def env(server: OpenAIServer, **extra: str) -> dict[str, str]:
    return {"CTXGRAPH_MODEL": MODEL, "OPENAI_BASE_URL": server.base_url, **extra}


def main_model(environ: dict[str, str]) -> ChatOpenAI:
    model = Models.from_env(environ).main
    assert isinstance(model, ChatOpenAI)
    return model


def test_a_streamed_answer_asks_a_local_server_for_its_usage(server: OpenAIServer) -> None:
    server.script("Counted reply here.")
    chunks = list(main_model(env(server)).stream("Count please."))
    merged = sum(chunks[1:], chunks[0])

    assert server.requests[0]["stream_options"] == {"include_usage": True}
    assert isinstance(merged, AIMessageChunk)
    assert merged.usage_metadata is not None  # the server's counts, not a local estimate
    assert merged.usage_metadata["total_tokens"] == 15


def test_stream_usage_can_be_turned_off_for_a_server_that_refuses_it(
    server: OpenAIServer,
) -> None:
    server.script("Plain reply.")
    list(main_model(env(server, CTXGRAPH_STREAM_USAGE="0")).stream("Hello."))
    assert "stream_options" not in server.requests[0]


def test_a_local_endpoint_waits_longer_by_default_and_a_set_timeout_wins(
    server: OpenAIServer,
) -> None:
    assert main_model(env(server)).request_timeout == DEFAULT_LOCAL_TIMEOUT
    assert main_model(env(server, CTXGRAPH_REQUEST_TIMEOUT="30")).request_timeout == 30.0
    remote = Models.openai(MODEL, base_url="https://models.example/v1", api_key="k").main
    assert isinstance(remote, ChatOpenAI)
    assert remote.request_timeout == DEFAULT_TIMEOUT
    local = Models.openai(MODEL, base_url=server.base_url).main
    assert isinstance(local, ChatOpenAI)
    assert local.request_timeout == DEFAULT_LOCAL_TIMEOUT


def test_a_timed_out_local_request_is_sent_once_whatever_the_retries(
    server: OpenAIServer,
) -> None:
    server.hang()
    model = main_model(env(server, CTXGRAPH_REQUEST_TIMEOUT="0.5", CTXGRAPH_MAX_RETRIES="3"))
    with pytest.raises(openai.APITimeoutError):
        model.invoke("Summarize the thread.")
    assert len(server.requests) == 1


def test_a_local_server_that_is_still_loading_is_asked_again(server: OpenAIServer) -> None:
    server.fail(503, message="Loading model", times=2)
    server.script("Ready now.")
    model = main_model(env(server, CTXGRAPH_MAX_RETRIES="2"))
    assert model.invoke("Hello?").text == "Ready now."
    assert len(server.requests) == 3


def test_the_async_path_retries_a_quick_failure_too(server: OpenAIServer) -> None:
    server.fail(503, message="Loading model", times=1)
    server.script("Ready now.")
    model = main_model(env(server, CTXGRAPH_MAX_RETRIES="1"))
    assert asyncio.run(model.ainvoke("Hello?")).text == "Ready now."
    assert len(server.requests) == 2


def test_retries_stop_when_used_up(server: OpenAIServer) -> None:
    server.fail(503, message="Loading model")
    model = main_model(env(server, CTXGRAPH_MAX_RETRIES="1"))
    with pytest.raises(openai.InternalServerError):
        model.invoke("Hello?")
    assert len(server.requests) == 2


def test_the_rule_retries_quick_failures_only() -> None:
    rule = RetryRule(2, first_delay=0.5, max_delay=8.0)
    request = httpx.Request("POST", "http://127.0.0.1:1/v1/chat/completions")
    refused = httpx.ConnectError("refused", request=request)
    slow = httpx.ReadTimeout("no answer", request=request)

    assert rule.delay(0, error=refused) == 0.5
    assert rule.delay(1, status=503) == 1.0
    assert rule.delay(2, status=503) is None  # used up
    assert rule.delay(0, error=slow) is None  # the model is slow: asking again repeats it
    assert rule.delay(0, status=400) is None
    assert rule.delay(0, status=200) is None


def test_the_cli_bills_a_local_servers_own_counts(
    python: str, subprocess_env: dict[str, str], thread_id: str, server: OpenAIServer
) -> None:
    server.script("First answer.", "Second answer.")
    child_env = {
        **subprocess_env,
        **env(server),
        "CTXGRAPH_MEMORY_EXTRACTION": "off",
        "CTXGRAPH_MEMORY_MODE": "off",
    }
    ran = run_ctxgraph(
        python, child_env, "run", "--user", "u1", "--thread", thread_id, "Hello.", "Again."
    )
    assert ran.returncode == 0, ran.stderr
    assert [r.get("stream_options") for r in server.requests] == [{"include_usage": True}] * 2

    shown = run_ctxgraph(python, child_env, "threads", "show", thread_id, "--usage")
    assert shown.returncode == 0, shown.stderr
    main_row = next(line for line in shown.stdout.splitlines() if line.startswith("main "))
    calls, input_tokens, output_tokens, _cached, local_calls = map(int, main_row.split()[1:])
    assert (calls, local_calls) == (2, 0)  # the server's counts, none counted locally
    assert (input_tokens, output_tokens) == (2 * 10, 2 * 5)  # what the test server reports
