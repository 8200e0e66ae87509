"""Ctrl-C and SIGTERM during a turn, on the real command line against a slow model server.

An interrupted turn keeps the user's message and drops the partial answer: ``threads
show``, a resumed ``chat`` and the next turn's model request all see the same messages.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxgraph.graph.cli.chat import INTERRUPTED_NOTE
from ctxgraph.graph.cli.exit_status import SIGINT_EXIT, SIGTERM_EXIT
from tests.support.cli import run_ctxgraph, start_python
from tests.support.embedded import postgres_pids, wait_until_gone
from tests.support.slow_server import SlowReply, SlowServer

SLOW = SlowReply(tuple(f"partial{i}" for i in range(60)), delay=0.25)
"""A 15-second answer, interrupted after its first words."""

FAST = SlowReply(("second", "answer"))
PROMPT = "you: "
LIMIT = 1.0
"""Seconds within which an interrupted turn must be over."""


@pytest.fixture
def server() -> Iterator[SlowServer]:
    """A model server whose first answer is slow and every later one is quick."""
    with SlowServer(SLOW, FAST) as running:
        yield running


@pytest.fixture
def model_env(subprocess_env: dict[str, str], server: SlowServer) -> dict[str, str]:
    """The child environment, with the slow server as the model and memory turned off."""
    env = dict(subprocess_env)
    env.update(
        {
            "CTXGRAPH_MODEL": "slow-model",
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "test-key",
            "CTXGRAPH_MEMORY_EXTRACTION": "off",
            "CTXGRAPH_MEMORY_MODE": "off",
            "CTXGRAPH_MAX_RETRIES": "0",
        }
    )
    return env


class Child:
    """A ``ctxgraph`` child process whose standard output is collected as it arrives."""

    def __init__(self, python: str, env: dict[str, str], *args: str) -> None:
        self.process = start_python(python, env, "-m", "ctxgraph.graph.cli", *args)
        self.output = ""
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        while chunk := self.process.stdout.read(1):
            with self._lock:
                self.output += chunk

    def wait_for(self, text: str, *, after: int = 0, timeout: float = 60.0) -> float:
        """Wait until ``text`` appears in the output past index ``after``; return the time."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if text in self.output[after:]:
                    return time.monotonic()
            time.sleep(0.01)
        self.process.kill()
        raise AssertionError(f"{text!r} did not appear; output so far:\n{self.output}")

    def send(self, line: str) -> None:
        """Type one line."""
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def finish(self, timeout: float = 60.0) -> tuple[int, str, str]:
        """End input and wait for the exit: status, standard output and error."""
        assert self.process.stdin is not None and self.process.stderr is not None
        if not self.process.stdin.closed:
            self.process.stdin.close()
        status = self.process.wait(timeout)
        self._reader.join(timeout)
        return status, self.output, self.process.stderr.read()


def _show(python: str, env: dict[str, str], thread_id: str) -> str:
    shown = run_ctxgraph(python, env, "threads", "show", thread_id)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def _chat_messages(body: dict[str, object]) -> list[tuple[str, str]]:
    """(role, content) of the conversation part of a request (no system message)."""
    messages = body["messages"]
    assert isinstance(messages, list)
    return [(m["role"], str(m.get("content") or "")) for m in messages if m["role"] != "system"]


def _stop_run(run: Child, signum: signal.Signals, expected: int) -> str:
    """Send ``signum`` to a ``run`` mid-answer; check it exits with ``expected`` in time.

    Returns its standard error.
    """
    sent = time.monotonic()
    run.process.send_signal(signum)
    status = run.process.wait(10)
    took = time.monotonic() - sent
    _, output, errors = run.finish()
    assert status == expected, errors
    assert took < LIMIT, f"exited {took:.2f} s after the signal"
    assert INTERRUPTED_NOTE in output
    return errors


def _interrupt_chat(
    python: str, env: dict[str, str], thread_id: str, question: str, *, streamed: str
) -> tuple[Child, int, float, float]:
    """Chat, interrupting the first answer after ``streamed``.

    Returns the child, its output length before the signal, and when the signal was sent
    and the prompt came back.
    """
    chat = Child(python, env, "chat", "--user", "u1", "--thread", thread_id)
    chat.wait_for(PROMPT)
    chat.send(question)
    chat.wait_for(streamed)
    mark = len(chat.output)
    sent = time.monotonic()
    chat.process.send_signal(signal.SIGINT)
    back = chat.wait_for(PROMPT, after=mark, timeout=10)
    return chat, mark, sent, back


def test_ctrl_c_in_chat_returns_to_the_prompt_and_the_views_agree(
    python: str, model_env: dict[str, str], server: SlowServer, thread_id: str
) -> None:
    chat, mark, sent, back = _interrupt_chat(
        python, model_env, thread_id, "first question", streamed="partial2"
    )
    assert back - sent < LIMIT, f"back at the prompt after {back - sent:.2f} s"
    assert INTERRUPTED_NOTE in chat.output[mark:]
    chat.send("second question")
    chat.wait_for("assistant: second answer", after=mark)
    status, output, errors = chat.finish()
    assert status == 0, errors
    assert "Traceback" not in errors
    assert "partial59" not in output  # the slow answer was not streamed to its end

    # The abandoned stream was cut off; the next turn's request has both user messages
    # once and no trace of the dropped partial answer.
    assert server.finished == 1
    assert len(server.requests) == 2
    assert _chat_messages(server.requests[1]) == [
        ("user", "first question"),
        ("user", "second question"),
    ]

    shown = _show(python, model_env, thread_id)
    assert f"thread {thread_id}: 3 messages" in shown
    assert "[1] user: first question" in shown
    assert "[2] user: second question" in shown
    assert "[3] assistant: second answer" in shown
    assert "partial" not in shown

    resumed = Child(python, model_env, "chat", "--user", "u1", "--thread", thread_id)
    status, output, errors = resumed.finish()
    assert status == 0, errors
    assert f"Resuming thread {thread_id} (3 messages). Last 3 messages:" in output
    for line in shown.splitlines()[1:]:
        assert line in output


def test_ctrl_c_then_end_of_input_keeps_only_the_user_message(
    python: str, model_env: dict[str, str], server: SlowServer, thread_id: str
) -> None:
    chat, _, _, _ = _interrupt_chat(
        python, model_env, thread_id, "only question", streamed="partial1"
    )
    started = time.monotonic()
    status, _, errors = chat.finish()
    assert status == 0, errors
    assert time.monotonic() - started < 5
    shown = _show(python, model_env, thread_id)
    assert f"thread {thread_id}: 1 message\n[1] user: only question\n" == shown
    resumed = Child(python, model_env, "chat", "--user", "u1", "--thread", thread_id)
    _, output, _ = resumed.finish()
    assert "(1 message). Last message:\n[1] user: only question\n" in output


def test_second_ctrl_c_at_the_prompt_exits(
    python: str, model_env: dict[str, str], thread_id: str
) -> None:
    chat, _, _, _ = _interrupt_chat(python, model_env, thread_id, "a question", streamed="partial1")
    sent = time.monotonic()
    chat.process.send_signal(signal.SIGINT)
    status = chat.process.wait(10)
    assert time.monotonic() - sent < LIMIT + 1
    assert status == SIGINT_EXIT


@pytest.mark.parametrize(
    ("signum", "expected"), [(signal.SIGINT, SIGINT_EXIT), (signal.SIGTERM, SIGTERM_EXIT)]
)
def test_run_stops_within_a_second_on_a_signal(
    python: str,
    model_env: dict[str, str],
    server: SlowServer,
    thread_id: str,
    signum: signal.Signals,
    expected: int,
) -> None:
    run = Child(python, model_env, "run", "--user", "u1", "--thread", thread_id, "the question")
    run.wait_for("partial1")
    errors = _stop_run(run, signum, expected)
    assert "Traceback" not in errors
    shown = _show(python, model_env, thread_id)
    assert shown == f"thread {thread_id}: 1 message\n[1] user: the question\n"
    assert server.finished == 0


def test_run_on_the_embedded_postgres_stops_the_server_and_keeps_the_message(
    python: str, model_env: dict[str, str], server: SlowServer, ctxgraph_home: Path
) -> None:
    # The quick exit after a signal still runs the exit handlers: this process was the
    # embedded server's only client, so the server stops, and what was committed stays.
    env = {k: v for k, v in model_env.items() if k != "DATABASE_URI"}
    env["CTXGRAPH_HOME"] = str(ctxgraph_home)
    run = Child(python, env, "run", "--user", "u1", "--thread", "t-home", "the question")
    run.wait_for("partial1")
    assert postgres_pids(ctxgraph_home / "pgdata")
    errors = _stop_run(run, signal.SIGTERM, SIGTERM_EXIT)
    assert "Traceback" not in errors
    assert wait_until_gone(ctxgraph_home / "pgdata") == []
    assert _show(python, env, "t-home") == "thread t-home: 1 message\n[1] user: the question\n"
    assert wait_until_gone(ctxgraph_home / "pgdata") == []


def test_run_stops_within_a_second_while_the_model_is_silent(
    python: str, subprocess_env: dict[str, str], thread_id: str
) -> None:
    with SlowServer(SlowReply(("late",), pause=30.0)) as silent:
        env = dict(subprocess_env)
        env.update(
            {
                "CTXGRAPH_MODEL": "slow-model",
                "OPENAI_BASE_URL": silent.base_url,
                "OPENAI_API_KEY": "test-key",
                "CTXGRAPH_MEMORY_EXTRACTION": "off",
                "CTXGRAPH_MEMORY_MODE": "off",
            }
        )
        run = Child(python, env, "run", "--user", "u1", "--thread", thread_id, "a question")
        deadline = time.monotonic() + 60
        while not silent.requests and time.monotonic() < deadline:
            time.sleep(0.02)
        assert silent.requests, "the model was never called"
        time.sleep(0.2)
        _stop_run(run, signal.SIGINT, SIGINT_EXIT)
        shown = _show(python, env, thread_id)
        assert shown == f"thread {thread_id}: 1 message\n[1] user: a question\n"


def test_chat_interrupted_while_the_model_is_silent_waits_before_the_next_turn(
    python: str, subprocess_env: dict[str, str], thread_id: str
) -> None:
    with SlowServer(SlowReply(("late", "answer"), pause=4.0), FAST) as silent:
        env = dict(subprocess_env)
        env.update(
            {
                "CTXGRAPH_MODEL": "slow-model",
                "OPENAI_BASE_URL": silent.base_url,
                "OPENAI_API_KEY": "test-key",
                "CTXGRAPH_MEMORY_EXTRACTION": "off",
                "CTXGRAPH_MEMORY_MODE": "off",
            }
        )
        chat = Child(python, env, "chat", "--user", "u1", "--thread", thread_id)
        chat.wait_for(PROMPT)
        chat.send("first question")
        deadline = time.monotonic() + 60
        while not silent.requests and time.monotonic() < deadline:
            time.sleep(0.02)
        # The server sends the empty role chunk at once, then is silent: give the client
        # time to read it, or the abandoned run stops at that chunk and nothing is waited for.
        time.sleep(0.5)
        mark = len(chat.output)
        sent = time.monotonic()
        chat.process.send_signal(signal.SIGINT)
        back = chat.wait_for(PROMPT, after=mark, timeout=10)
        assert back - sent < LIMIT
        chat.send("second question")
        chat.wait_for("waiting for the interrupted turn's model call to stop", after=mark)
        chat.wait_for("assistant: second answer", after=mark)
        status, output, errors = chat.finish()
        assert status == 0, errors
        assert "late" not in output
        assert _chat_messages(silent.requests[1]) == [
            ("user", "first question"),
            ("user", "second question"),
        ]
        shown = _show(python, env, thread_id)
        assert "[3] assistant: second answer" in shown and "late" not in shown
