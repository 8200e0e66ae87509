"""A failing model endpoint gives one line, a documented exit status and a known thread state."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any, cast

import pytest

from ctxgraph.graph.cli.main import MODEL_ERROR_EXIT
from ctxgraph.state.models import ModelConfigError, Models
from ctxgraph.store.persistence.vector_index import EmbeddingConfigError, embedding_index
from tests.support.cli import run_ctxgraph
from tests.support.openai_server import OpenAIServer

MODEL = "gpt-test"


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    """A local OpenAI-compatible server."""
    with OpenAIServer() as running:
        yield running


def model_env(subprocess_env: dict[str, str], base_url: str, **extra: str) -> dict[str, str]:
    """The child environment for a real model at ``base_url``: 1 s timeout, no retries."""
    return {
        **subprocess_env,
        "CTXGRAPH_MODEL": MODEL,
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": "x",
        "CTXGRAPH_REQUEST_TIMEOUT": "1",
        "CTXGRAPH_MAX_RETRIES": "0",
        **extra,
    }


def closed_port() -> int:
    """A port nothing listens on: bound, then closed."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize(
    ("status", "cause"),
    [
        (401, "authentication failed (HTTP 401: Incorrect API key"),
        (403, "access denied (HTTP 403"),
        (404, "not found (HTTP 404: The model does not exist"),
        (429, "rate limited or out of quota (HTTP 429"),
        (500, "server error (HTTP 500"),
    ],
)
def test_http_errors_of_the_main_model_are_one_line(
    python: str,
    subprocess_env: dict[str, str],
    server: OpenAIServer,
    thread_id: str,
    status: int,
    cause: str,
) -> None:
    server.fail(status)
    env = model_env(subprocess_env, server.base_url)
    result = run_ctxgraph(python, env, "run", "--user", "u", "--thread", thread_id, "hi", "more")

    assert result.returncode == MODEL_ERROR_EXIT
    line = one_line(result.stderr)
    assert line.startswith(f"ctxgraph: main model '{MODEL}' at {server.base_url}: ")
    assert cause in line
    assert "you: more" not in result.stdout  # the later turns are not run
    assert len(server.requests) == 1  # CTXGRAPH_MAX_RETRIES=0


def test_a_closed_port_is_connection_refused(
    python: str, subprocess_env: dict[str, str], thread_id: str
) -> None:
    base_url = f"http://127.0.0.1:{closed_port()}/v1"
    env = model_env(subprocess_env, base_url)
    result = run_ctxgraph(python, env, "run", "--user", "u", "--thread", thread_id, "hi")

    assert result.returncode == MODEL_ERROR_EXIT
    line = one_line(result.stderr)
    assert line.startswith(f"ctxgraph: main model '{MODEL}' at {base_url}: connection refused")


def test_a_server_that_never_answers_times_out(
    python: str, subprocess_env: dict[str, str], server: OpenAIServer, thread_id: str
) -> None:
    server.hang()
    env = model_env(subprocess_env, server.base_url)
    result = run_ctxgraph(python, env, "run", "--user", "u", "--thread", thread_id, "hi")

    assert result.returncode == MODEL_ERROR_EXIT
    line = one_line(result.stderr)
    assert f"main model '{MODEL}' at {server.base_url}: timed out" in line
    assert "within 1 s" in line
    assert "CTXGRAPH_REQUEST_TIMEOUT" in line


@pytest.mark.parametrize("how", ["variable", "option"])
def test_debug_shows_the_traceback(
    python: str, subprocess_env: dict[str, str], server: OpenAIServer, thread_id: str, how: str
) -> None:
    server.fail(401)
    env = model_env(subprocess_env, server.base_url)
    args = ["run", "--user", "u", "--thread", thread_id, "hi"]
    if how == "variable":
        env["CTXGRAPH_DEBUG"] = "1"
    else:
        args.insert(0, "--debug")
    result = run_ctxgraph(python, env, *args)

    assert result.returncode == MODEL_ERROR_EXIT
    assert "Traceback (most recent call last)" in result.stderr
    assert "openai.AuthenticationError" in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ctxgraph: main model '{MODEL}' at {server.base_url}: authentication")


def test_a_failed_turn_keeps_only_the_users_message(
    python: str, subprocess_env: dict[str, str], server: OpenAIServer, thread_id: str
) -> None:
    server.fail(500)
    env = model_env(subprocess_env, server.base_url)
    failed = run_ctxgraph(python, env, "run", "--user", "u", "--thread", thread_id, "first")
    assert failed.returncode == MODEL_ERROR_EXIT

    shown = run_ctxgraph(python, env, "threads", "show", thread_id)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == f"thread {thread_id}: 1 message\n[1] user: first\n"
    verified = run_ctxgraph(python, env, "threads", "verify", thread_id)
    assert verified.returncode == 0, verified.stdout + verified.stderr

    server.serve_normally()
    server.script("Answer two.")
    resumed = run_ctxgraph(python, env, "run", "--user", "u", "--thread", thread_id, "second")
    assert resumed.returncode == 0, resumed.stderr
    assert "Resuming thread" in resumed.stdout and "[1] user: first" in resumed.stdout
    assert "assistant: Answer two." in resumed.stdout
    sent = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "user"]
    assert sent[-2:] == ["first", "second"]  # the unanswered message reaches the model

    shown = run_ctxgraph(python, env, "threads", "show", thread_id)
    assert "[1] user: first\n[2] user: second\n[3] assistant: Answer two.\n" in shown.stdout


def test_chat_reports_a_failed_turn_and_answers_the_next(
    python: str, subprocess_env: dict[str, str], server: OpenAIServer, thread_id: str
) -> None:
    server.fail(503, times=1)
    server.script("Answer two.")
    env = model_env(subprocess_env, server.base_url, CTXGRAPH_MEMORY_EXTRACTION="deferred")
    result = run_ctxgraph(
        python, env, "chat", "--user", "u", "--thread", thread_id, stdin="first\nsecond\n"
    )

    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if "main model" in line]
    assert errors == [
        f"ctxgraph: main model '{MODEL}' at {server.base_url}: "
        "server error (HTTP 503: Service Unavailable)"
    ]
    assert "assistant: Answer two." in result.stdout


def test_a_hanging_summary_model_skips_compaction_and_the_turn_answers(
    python: str, subprocess_env: dict[str, str], server: OpenAIServer, thread_id: str
) -> None:
    server.hang(model="slow-summary")
    server.script(*[f"Answer {n}." for n in range(1, 40)])
    env = model_env(
        subprocess_env,
        server.base_url,
        CTXGRAPH_SUMMARY_MODEL="slow-summary",
        CTXGRAPH_TRIGGER_MESSAGES="4",
        CTXGRAPH_KEEP_MESSAGES="2",
        CTXGRAPH_MEMORY_EXTRACTION="deferred",
        CTXGRAPH_SUMMARY_FALLBACK="off",  # skip, not a model-free record
    )
    turns = [f"Note {n}: order A-{1000 + n}." for n in range(4)]
    result = run_ctxgraph(python, env, "run", "--user", "u", "--thread", thread_id, *turns)

    assert result.returncode == 0, result.stderr
    assert result.stdout.count("assistant: Answer") == 4
    summary_lines = [line for line in result.stderr.splitlines() if "slow-summary" in line]
    assert summary_lines, result.stderr
    assert "compaction skipped, state left as it was" in summary_lines[0]
    assert f"summary model 'slow-summary' at {server.base_url}: timed out" in summary_lines[0]
    assert "Traceback" not in result.stderr

    shown = run_ctxgraph(python, env, "threads", "show", thread_id)
    assert shown.stdout.startswith(f"thread {thread_id}: 8 messages\n")
    assert "compaction v" not in shown.stdout
    for turn in turns:
        assert f"user: {turn}" in shown.stdout


def test_a_missing_key_for_a_remote_endpoint_is_named(
    python: str, subprocess_env: dict[str, str], thread_id: str
) -> None:
    env = {**subprocess_env, "CTXGRAPH_MODEL": MODEL}
    result = run_ctxgraph(python, env, "run", "--user", "u", "--thread", thread_id, "hi")

    assert result.returncode == 2
    line = one_line(result.stderr)
    assert line.startswith("ctxgraph: OPENAI_API_KEY is not set, and the default ")
    assert "no chat model is configured" not in line


@pytest.mark.parametrize(
    ("base_url", "local"),
    [
        ("http://localhost:8000/v1", True),
        ("http://127.0.0.2:8000/v1", True),
        ("http://[::1]:8000/v1", True),
        ("https://llm.example.com/v1", False),
        ("", False),
    ],
)
def test_only_local_endpoints_go_without_a_key(base_url: str, local: bool) -> None:
    environ = {"CTXGRAPH_MODEL": MODEL, "OPENAI_BASE_URL": base_url}
    if local:
        assert Models.from_env(environ).main is not None
        assert embedding_index({**environ, "CTXGRAPH_EMBEDDING_MODEL": "e"}) is not None
        return
    with pytest.raises(ModelConfigError, match=r"^OPENAI_API_KEY is not set"):
        Models.from_env(environ)
    with pytest.raises(EmbeddingConfigError, match="OPENAI_API_KEY is not set"):
        embedding_index({**environ, "CTXGRAPH_EMBEDDING_MODEL": "e"})


def test_timeout_and_retries_reach_every_role() -> None:
    environ = {
        "CTXGRAPH_MODEL": MODEL,
        "CTXGRAPH_SUMMARY_MODEL": "s",
        "CTXGRAPH_MEMORY_MODEL": "m",
        "OPENAI_API_KEY": "k",
        "CTXGRAPH_REQUEST_TIMEOUT": "7.5",
        "CTXGRAPH_MAX_RETRIES": "5",
        "CTXGRAPH_EMBEDDING_MODEL": "e",
    }
    models = Models.from_env(environ)
    for model in (models.main, models.summary_model, models.memory_model):
        assert cast(Any, model).request_timeout == 7.5
        assert cast(Any, model).max_retries == 5
    index = embedding_index(environ)
    assert index is not None
    assert cast(Any, index["embed"]).request_timeout == 7.5
    assert cast(Any, index["embed"]).max_retries == 5

    defaults = Models.from_env({"CTXGRAPH_MODEL": MODEL, "OPENAI_API_KEY": "k"})
    assert cast(Any, defaults.main).request_timeout == 120
    assert cast(Any, defaults.main).max_retries == 2
    explicit = Models.openai(MODEL, api_key="k", timeout=3, max_retries=0)
    assert cast(Any, explicit.main).request_timeout == 3
    assert cast(Any, explicit.main).max_retries == 0


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("CTXGRAPH_REQUEST_TIMEOUT", "soon"),
        ("CTXGRAPH_REQUEST_TIMEOUT", "0"),
        ("CTXGRAPH_REQUEST_TIMEOUT", "inf"),
        ("CTXGRAPH_MAX_RETRIES", "-1"),
        ("CTXGRAPH_MAX_RETRIES", "2.5"),
    ],
)
def test_bad_limits_name_the_variable(variable: str, value: str) -> None:
    environ = {"CTXGRAPH_MODEL": MODEL, "OPENAI_API_KEY": "k", variable: value}
    with pytest.raises(ModelConfigError) as raised:
        Models.from_env(environ)
    assert str(raised.value).startswith(f"{variable} must be ")
    assert repr(value) in str(raised.value)


def test_bad_limit_on_the_command_line_is_a_user_error(
    python: str, subprocess_env: dict[str, str], thread_id: str
) -> None:
    env = model_env(subprocess_env, "http://127.0.0.1:9/v1", CTXGRAPH_MAX_RETRIES="many")
    result = run_ctxgraph(python, env, "run", "--user", "u", "--thread", thread_id, "hi")
    assert result.returncode == 2
    assert one_line(result.stderr) == (
        "ctxgraph: CTXGRAPH_MAX_RETRIES must be a whole number >= 0, got 'many'"
    )


def test_a_tls_failure_of_the_main_model_is_one_line(
    python: str, subprocess_env: dict[str, str], server: OpenAIServer, thread_id: str
) -> None:
    # https:// to a server that speaks plain HTTP: the TLS handshake fails locally.
    secure = server.base_url.replace("http://", "https://", 1)
    env = model_env(subprocess_env, secure)
    result = run_ctxgraph(python, env, "run", "--user", "u", "--thread", thread_id, "hi")

    assert result.returncode == MODEL_ERROR_EXIT
    line = one_line(result.stderr)
    assert line.startswith(f"ctxgraph: main model '{MODEL}' at {secure}: ")
    assert "TLS handshake failed" in line
