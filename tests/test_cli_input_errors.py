"""Clear errors for an empty message, a malformed ``DATABASE_URI``; help for every argument."""

from __future__ import annotations

import argparse
import logging

import pytest

from ctxgraph.graph.cli.chat import EMPTY_NOTE
from ctxgraph.graph.cli.main import build_parser
from ctxgraph.graph.cli.notices import NoticeFormatter, QuietFilter, is_routine
from ctxgraph.store.persistence.connection import EXAMPLE_URI
from tests.support.cli import run_ctxgraph

USER_ERROR = 2
EMPTY = (
    "ctxgraph: message {n} is empty: a message needs some text (an argument, or - to read it "
    "from standard input); nothing was written\n"
)


def _untouched(python: str, env: dict[str, str], thread_id: str) -> None:
    shown = run_ctxgraph(python, env, "threads", "show", thread_id)
    assert shown.returncode == USER_ERROR
    assert f"no thread '{thread_id}' has been saved" in shown.stderr


@pytest.mark.parametrize(
    ("messages", "stdin", "number"),
    [([""], "", 1), (["  \t"], "", 1), (["hello", ""], "", 2), (["-"], "", 1), (["-"], "\n \n", 1)],
    ids=["empty", "whitespace", "second", "empty-stdin", "blank-stdin"],
)
def test_run_refuses_an_empty_message_before_anything_is_written(
    python: str,
    subprocess_env: dict[str, str],
    thread_id: str,
    messages: list[str],
    stdin: str,
    number: int,
) -> None:
    args = ("run", "--user", "u1", "--thread", thread_id, *messages)
    result = run_ctxgraph(python, subprocess_env, *args, stdin=stdin)
    assert result.returncode == USER_ERROR
    assert result.stdout == ""
    assert result.stderr == EMPTY.format(n=number)
    _untouched(python, subprocess_env, thread_id)


def test_chat_says_an_empty_line_is_not_sent_and_goes_on(
    python: str, subprocess_env: dict[str, str], thread_id: str
) -> None:
    args = ("chat", "--user", "u1", "--thread", thread_id)
    chat = run_ctxgraph(python, subprocess_env, *args, stdin="\n   \nhi\n")
    assert chat.returncode == 0, chat.stderr
    assert chat.stderr == ""
    lines = chat.stdout.splitlines()
    assert lines[2:6] == ["you: ", EMPTY_NOTE, "you:    ", EMPTY_NOTE]
    assert EMPTY_NOTE == "(nothing sent: the message is empty)"
    shown = run_ctxgraph(python, subprocess_env, "threads", "show", thread_id)
    assert shown.stdout.startswith(f"thread {thread_id}: 2 messages\n[1] user: hi\n")


@pytest.mark.parametrize("uri", ["not a uri", "postgresql://%zz@localhost/db", "http://x"])
def test_a_malformed_database_uri_is_one_line_with_an_example(
    python: str, subprocess_env: dict[str, str], uri: str
) -> None:
    env = {**subprocess_env, "DATABASE_URI": uri}
    result = run_ctxgraph(python, env, "threads", "show", "t-any")
    assert result.returncode == USER_ERROR
    [line] = result.stderr.splitlines()
    assert line.startswith("ctxgraph: DATABASE_URI is not a valid Postgres URI (")
    assert line.endswith(
        f"): set it to a URI such as {EXAMPLE_URI}, or unset it to use the embedded Postgres"
    )
    assert EXAMPLE_URI == "postgresql://user:password@localhost:5432/ctxgraph"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _every_parser() -> list[tuple[str, argparse.ArgumentParser]]:
    found: list[tuple[str, argparse.ArgumentParser]] = []
    pending = [("ctxgraph", build_parser())]
    while pending:
        name, parser = pending.pop()
        found.append((name, parser))
        pending.extend((f"{name} {sub}", child) for sub, child in _subparsers(parser).items())
    return found


def test_every_argument_of_every_command_has_help() -> None:
    missing = [
        f"{name} {action.dest}"
        for name, parser in _every_parser()
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction) and not action.help
    ]
    assert missing == []
    demo = dict(_every_parser())["ctxgraph demo"].format_help()
    assert "user id whose thread and memory the demo uses" in demo
    show = dict(_every_parser())["ctxgraph threads show"].format_help()
    assert "the thread id (as given to chat or run with --thread)" in show


def _record(name: str, level: int, message: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, message, args, None)


@pytest.mark.parametrize(
    ("record", "routine", "shown"),
    [
        (
            _record(
                "ctxgraph.compaction",
                logging.WARNING,
                "compaction skipped, state left as it was: %s",
                "the request would not shrink (984 -> 1086 tokens)",
            ),
            True,
            "note: compaction skipped, state left as it was: the request would not shrink "
            "(984 -> 1086 tokens)",
        ),
        (
            _record(
                "ctxgraph.compaction",
                logging.WARNING,
                "%s%s thread=%s %s",
                "compaction.",
                "discarded",
                "t1",
                "reason=stale",
            ),
            True,
            "note: compaction.discarded thread=t1 reason=stale",
        ),
        (
            _record(
                "ctxgraph.compaction",
                logging.WARNING,
                "compaction skipped, state left as it was: %s",
                "no usable summary (summary model 'm' at http://x: timed out)",
            ),
            False,
            "warning: compaction skipped, state left as it was: no usable summary (summary "
            "model 'm' at http://x: timed out)",
        ),
        (
            _record("ctxgraph.memory", logging.WARNING, "memory extraction failed"),
            False,
            "warning: memory extraction failed",
        ),
        (
            _record("ctxgraph.compaction", logging.INFO, "compaction.started thread=t1"),
            True,
            "note: compaction.started thread=t1",
        ),
        (_record("psycopg", logging.ERROR, "gone"), False, "ctxgraph: gone"),
    ],
    ids=["would-not-shrink", "discarded", "summary-failed", "memory", "started", "error"],
)
def test_log_records_are_notes_warnings_or_errors(
    record: logging.LogRecord, routine: bool, shown: str
) -> None:
    assert is_routine(record) is routine
    assert NoticeFormatter("%(message)s").format(record) == shown
    # Without --verbose only the warnings and errors pass.
    assert QuietFilter().filter(record) is (not routine and record.levelno >= logging.WARNING)


def test_every_user_error_the_cli_reports_in_one_line_exists() -> None:
    import importlib

    cli_main = importlib.import_module("ctxgraph.graph.cli.main")
    for module, name in cli_main._USER_ERRORS:
        error = getattr(importlib.import_module(module), name)
        assert isinstance(error, type) and issubclass(error, Exception), (module, name)
