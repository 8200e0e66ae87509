"""Token counting: exact counts, per-id caching, and no network access ever."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool

from ctxgraph.state.tokens import (
    REPLY_PRIMING,
    TOKENS_PER_MESSAGE,
    TokenCounter,
    count_text,
    encoding,
)


def test_counts_match_cl100k_reference_values() -> None:
    # Reference values of the cl100k_base encoding.
    assert count_text("hello world") == 2
    assert count_text("tiktoken is great!") == 6
    assert encoding().decode(encoding().encode("用户偏好用中文")) == "用户偏好用中文"


def test_message_count_includes_framing_and_tool_calls() -> None:
    counter = TokenCounter()
    plain = AIMessage(content="hello world", id="a1")
    with_call = AIMessage(
        content="hello world",
        id="a2",
        tool_calls=[{"name": "lookup", "args": {"order_id": "A-1001"}, "id": "call_1"}],
    )
    assert counter.count_message(plain) == count_text("ai\nhello world") + TOKENS_PER_MESSAGE
    assert counter.count_message(with_call) > counter.count_message(plain) + 5
    both = counter.count_messages([plain, with_call])
    expected = counter.count_message(plain) + counter.count_message(with_call) + REPLY_PRIMING
    assert both == expected


def test_counts_are_cached_per_message_id_and_refreshed_on_change() -> None:
    counter = TokenCounter()
    first = HumanMessage(content="short", id="m1")
    counter.count_message(first)
    counter.count_message(first)
    assert counter.cached_entries == 1
    replaced = HumanMessage(content="a much longer text under the same id " * 5, id="m1")
    assert counter.count_message(replaced) > counter.count_message(first)
    assert counter.cached_entries == 2
    anonymous = HumanMessage(content="no id")
    counter.count_message(anonymous)
    assert counter.cached_entries == 2


def test_cache_is_bounded() -> None:
    counter = TokenCounter(max_entries=3)
    for index in range(5):
        counter.count_message(HumanMessage(content=f"m{index}", id=f"id{index}"))
    assert counter.cached_entries == 3


def test_tool_schemas_are_counted() -> None:
    @tool
    def lookup_order(order_id: str) -> str:
        """Look up an order's shipping status."""
        return order_id

    counter = TokenCounter()
    assert counter.count_tools([]) == 0
    assert counter.count_tools([lookup_order]) > 10


CHILD = textwrap.dedent(
    """
    import socket

    def refuse(*args, **kwargs):
        raise OSError("network access attempted: " + repr(args[:2]))

    socket.socket.connect = refuse
    socket.create_connection = refuse
    socket.getaddrinfo = refuse

    from ctxgraph.state.tokens import TokenCounter, count_text
    from langchain_core.messages import HumanMessage

    print(count_text("hello world"), TokenCounter().count_message(HumanMessage("hi", id="x")))
    """
)


def test_encoding_loads_with_networking_disabled(tmp_path: Path) -> None:
    """A fresh process with no tiktoken cache and no network still counts tokens."""
    cache = tmp_path / "empty-tiktoken-cache"
    cache.mkdir()
    command = [sys.executable, "-c", CHILD]
    isolated = shutil.which("unshare") is not None and (
        subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False).returncode == 0
    )
    if isolated:
        command = ["unshare", "-n", *command]  # no network namespace access at all
    repo = Path(__file__).resolve().parent.parent
    completed = subprocess.run(
        command,
        capture_output=True,
        text=True,
        check=False,
        cwd=repo,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(repo),
            "TIKTOKEN_CACHE_DIR": str(cache),
            "DATA_GYM_CACHE_DIR": str(cache),
        },
    )
    assert completed.returncode == 0, completed.stderr
    words, message = completed.stdout.split()
    assert words == "2"
    assert int(message) > 3
