"""Edges of what a person gives the command line: standard input, huge or unencodable
messages, control characters in what is printed, and settings error messages."""

from __future__ import annotations

import re
import subprocess
from typing import Any

import pytest

from ctxgraph.graph.cli.input import UTF8_HOW_TO
from ctxgraph.graph.cli.render import escape_control
from ctxgraph.state.settings import Settings, SettingsError
from tests.support.cli import REPO_ROOT, run_ctxgraph

USER_ERROR = 2


def _run(
    python: str, env: dict[str, str], thread_id: str, *messages: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return run_ctxgraph(
        python, env, "run", "--user", "u1", "--thread", thread_id, *messages, stdin=stdin
    )


def _untouched(python: str, env: dict[str, str], thread_id: str) -> None:
    shown = run_ctxgraph(python, env, "threads", "show", thread_id)
    assert shown.returncode == USER_ERROR
    assert f"no thread '{thread_id}' has been saved" in shown.stderr


def test_run_dash_reads_one_message_from_standard_input(
    python: str, subprocess_env: dict[str, str], thread_id: str
) -> None:
    text = "first line of the message\nsecond line\tafter a tab"
    result = _run(python, subprocess_env, thread_id, "-", stdin=text)
    assert result.returncode == 0, result.stderr
    shown = run_ctxgraph(python, subprocess_env, "threads", "show", thread_id)
    assert f"[1] user: {text}\n[2] assistant: " in shown.stdout


def test_a_message_over_the_input_window_is_refused_before_anything_is_written(
    python: str, subprocess_env: dict[str, str], thread_id: str
) -> None:
    env = {**subprocess_env, "CTXGRAPH_CONTEXT_WINDOW": "1000"}
    result = _run(python, env, thread_id, "-", stdin="word " * 5000)
    assert result.returncode == USER_ERROR
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert re.match(r"ctxgraph: message 1 is 50\d\d tokens \(25000 characters\)", result.stderr)
    assert "over the model's input window of 1000 tokens; nothing was written" in result.stderr
    _untouched(python, env, thread_id)


def test_a_large_message_without_a_known_window_is_offloaded_not_refused(
    python: str, subprocess_env: dict[str, str], thread_id: str
) -> None:
    # 40,000 lines of "row N": far over trigger_tokens (18,000) and the 9,000-token input
    # threshold of an unknown window, so the graph stores it as an artifact.
    rows = [f"row {i}" for i in range(40_000)]
    rows[20_000] = "MIDDLE-SENTINEL-4411 only the artifact keeps this line"
    text = "\n".join(rows)
    result = _run(python, subprocess_env, thread_id, "hello", "-", stdin=text)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr

    # The model saw the stand-in, not the text; the thread shows the text from its artifact.
    assert "assistant: Noted: [user input offloaded] This user message is " in result.stdout
    shown = run_ctxgraph(python, subprocess_env, "threads", "show", thread_id)
    assert shown.returncode == 0, shown.stderr
    refs = re.findall(r"\(full text from artifact (art-[0-9a-f]+);", shown.stdout)
    assert len(refs) == 1, shown.stdout[-2000:]
    read = run_ctxgraph(python, subprocess_env, "threads", "artifact", thread_id, refs[0])
    assert read.returncode == 0, read.stderr
    assert read.stdout.rstrip("\n") == text


def test_chat_refuses_a_huge_line_and_goes_on(
    python: str, subprocess_env: dict[str, str], thread_id: str
) -> None:
    env = {**subprocess_env, "CTXGRAPH_CONTEXT_WINDOW": "1000"}
    chat = run_ctxgraph(
        python, env, "chat", "--user", "u1", "--thread", thread_id, stdin="y " * 3000 + "\nhi\n"
    )
    assert chat.returncode == 0, chat.stderr
    assert "Traceback" not in chat.stderr
    assert re.search(
        r"ctxgraph: the message is 30\d\d tokens \(6000 characters\), over", chat.stderr
    )
    shown = run_ctxgraph(python, env, "threads", "show", thread_id)
    assert f"thread {thread_id}: 2 messages\n[1] user: hi\n" in shown.stdout


def test_undecodable_bytes_are_refused_with_their_position(
    python: str, subprocess_env: dict[str, str], thread_id: str
) -> None:
    argv = [python.encode(), b"-m", b"ctxgraph.graph.cli", b"run", b"--user", b"u1"]
    argv += [b"--thread", thread_id.encode(), b"caf\xe9 au lait"]
    result = subprocess.run(
        argv, env=subprocess_env, cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == USER_ERROR
    assert result.stderr == (
        "ctxgraph: message 1 cannot be encoded as UTF-8: character 4 is a lone surrogate "
        f"(U+DCE9), as from undecodable bytes; nothing was written; {UTF8_HOW_TO}\n"
    )
    assert "iconv" in UTF8_HOW_TO and "LANG=C.UTF-8" in UTF8_HOW_TO
    _untouched(python, subprocess_env, thread_id)

    piped = subprocess.run(
        [*argv[:-1], b"-"],
        env=subprocess_env,
        cwd=REPO_ROOT,
        input=b"ok \xff",
        capture_output=True,
        check=False,
    )
    assert piped.returncode == USER_ERROR
    assert b"character 4 is a lone surrogate (U+DCFF)" in piped.stderr
    _untouched(python, subprocess_env, thread_id)


def test_chat_refuses_undecodable_bytes_and_goes_on(
    python: str, subprocess_env: dict[str, str], thread_id: str
) -> None:
    argv = [python, "-m", "ctxgraph.graph.cli", "chat", "--user", "u1", "--thread", thread_id]
    chat = subprocess.run(
        argv,
        env=subprocess_env,
        cwd=REPO_ROOT,
        input=b"ab\xffc\nhi\n",
        capture_output=True,
        check=False,
    )
    assert chat.returncode == 0, chat.stderr
    assert chat.stderr == (
        b"ctxgraph: the message cannot be encoded as UTF-8: character 3 is a lone surrogate "
        b"(U+DCFF), as from undecodable bytes; nothing was written; " + UTF8_HOW_TO.encode() + b"\n"
    )
    shown = run_ctxgraph(python, subprocess_env, "threads", "show", thread_id)
    assert f"thread {thread_id}: 2 messages\n[1] user: hi\n" in shown.stdout


def test_control_characters_are_escaped_when_printed(
    python: str, subprocess_env: dict[str, str], thread_id: str
) -> None:
    text = "red \x1b[31mALERT\x1b[0m\rover\x07 line\nnext\ttab"
    result = _run(python, subprocess_env, thread_id, text)
    assert result.returncode == 0, result.stderr
    shown = run_ctxgraph(python, subprocess_env, "threads", "show", thread_id)
    resumed = run_ctxgraph(python, subprocess_env, "chat", "--user", "u1", "--thread", thread_id)
    for output in (result.stdout, shown.stdout, resumed.stdout):
        assert "\x1b" not in output and "\r" not in output and "\x07" not in output
    escaped = r"red \x1b[31mALERT\x1b[0m\x0dover\x07 line"
    assert f"you: {escaped}\nnext\ttab\n" in result.stdout
    assert f"[1] user: {escaped}\nnext\ttab\n" in shown.stdout
    assert f"[1] user: {escaped} next tab\n" in resumed.stdout  # the preview is one line


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain", "plain"),
        ("a\nb\tc", "a\nb\tc"),
        ("\x1b]0;title\x07", r"\x1b]0;title\x07"),
        ("\x00\x7f\x9b", r"\x00\x7f\x9b"),
    ],
)
def test_escape_control(text: str, shown: str) -> None:
    assert escape_control(text) == shown


def test_settings_suggest_a_value_that_satisfies_the_rule() -> None:
    with pytest.raises(SettingsError) as raised:
        Settings(keep_messages=59, trigger_messages=60)
    assert str(raised.value) == (
        "Settings.trigger_messages must be a whole number of at least 61 (for example 61), got 60"
    )
    Settings(keep_messages=59, trigger_messages=61)  # the suggestion works


@pytest.mark.parametrize(
    "name",
    [
        "keep_messages",
        "trigger_tokens",
        "summary_max_tokens",
        "summary_input_budget",
        "ledger_max_tool_calls",
        "ledger_max_identifiers",
        "ledger_max_tokens",
        "memory_budget",
        "correction_budget",
        "memory_search_max_tokens",
    ],
)
def test_every_suggested_whole_number_is_accepted(name: str) -> None:
    too_small: dict[str, Any] = {name: 0}
    with pytest.raises(SettingsError) as raised:
        Settings(**too_small)
    message = str(raised.value)
    suggested: dict[str, Any] = {name: int(message.split("(for example ")[1].split(")")[0])}
    Settings(**suggested)
