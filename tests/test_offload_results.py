"""Tool-result offloading: a result over its threshold becomes an artifact and a short stub."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from functools import cache
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.prebuilt import ToolRuntime
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.store.base import BaseStore, GetOp, Item, Op, PutOp, Result
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command

from ctxgraph.graph import build_graph
from ctxgraph.nodes.offload.refs import OFFLOAD_FAILED_KEY, OFFLOAD_KEY
from ctxgraph.nodes.offload.results import NEVER_OFFLOADED, ResultOffloader
from ctxgraph.nodes.offload.stub import MAX_STUB_TOKENS, offload_stub, unsaved_text
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.tokens import TokenCounter, count_text
from ctxgraph.store.artifacts import Artifact, ArtifactStore
from ctxgraph.store.namespaces import thread_artifacts
from ctxgraph.store.persistence.connection import open_async_persistence, open_persistence

CONTEXT = Context(user_id="u1")
MODES = pytest.mark.parametrize("mode", ["sync", "async"])
QUIET = {"memory_extraction": "off", "memory_mode": "off"}
"""Settings that keep memory out of these tests: no extra model calls, no memory tool."""


# --- content -----------------------------------------------------------------------------


@cache
def big_text(size: int = 2 * 1024 * 1024) -> str:
    """About ``size`` characters of access-log lines, the same every time."""
    lines: list[str] = []
    total = 0
    index = 0
    while total < size:
        line = (
            f"{index:06d} GET /api/orders/A-{index * 7919 % 100_000:05d} "
            f"status=200 took={index * 37 % 997}ms user=u{index % 311}"
        )
        lines.append(line)
        total += len(line) + 1
        index += 1
    return "\n".join(lines) + "\n"


@cache
def tokens_of(text: str) -> int:
    return count_text(text)


CHINESE = "上下文卸载把过大的工具结果存入线程的工件库，并在消息里换成一个简短的存根。"


@cache
def chinese_text(tokens: int) -> str:
    """Chinese text of exactly ``tokens`` tokens (the longest prefix that fits, padded)."""
    long = CHINESE * (tokens // count_text(CHINESE) + 2)
    low, high = 0, len(long)
    while low < high:
        middle = (low + high + 1) // 2
        if count_text(long[:middle]) <= tokens:
            low = middle
        else:
            high = middle - 1
    text = long[:low]
    while count_text(text) < tokens:
        text += "。"
    assert count_text(text) == tokens
    return text


def numbered_text(lines: int, width: int = 40) -> str:
    return "\n".join(f"line {i:05d} " + "x" * width for i in range(lines))


# --- tools -------------------------------------------------------------------------------


@tool
def dump_log(part: int = 0) -> str:
    """Return the whole access log (about 2 MB)."""
    return big_text() if part == 0 else big_text().replace("GET", f"P{part}")


@tool
def chinese_report(tokens: int) -> str:
    """Return a Chinese report of exactly ``tokens`` tokens."""
    return chinese_text(tokens)


@tool
def medium_a() -> str:
    """Return about 5,000 tokens."""
    return numbered_text(400)


@tool
def medium_b() -> str:
    """Return about 5,000 tokens."""
    return numbered_text(400)


TOOLS: list[BaseTool] = [dump_log, chinese_report, medium_a, medium_b]


def call(name: str, args: dict[str, Any], call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id}])


def calls(*entries: tuple[str, dict[str, Any], str]) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[{"name": name, "args": args, "id": call_id} for name, args, call_id in entries],
    )


def result_ref(call_id: str) -> str:
    return ArtifactStore.ref_for("tool_result", call_id)


# --- stores ------------------------------------------------------------------------------


class Recording(BaseStore):
    """Passes every op to ``inner``, records it, and can fail or corrupt artifact items."""

    def __init__(self, inner: BaseStore, *, fail_puts: bool = False, corrupt: bool = False):
        self.inner = inner
        self.fail_puts = fail_puts
        self.corrupt = corrupt
        self.ops: list[Op] = []

    def _check(self, ops: list[Op]) -> None:
        self.ops.extend(ops)
        if self.fail_puts and any(
            isinstance(op, PutOp) and op.namespace[-1:] == ("artifacts",) for op in ops
        ):
            raise RuntimeError("disk full: the artifact table refuses writes")

    def _corrupted(self, ops: list[Op], results: list[Result]) -> list[Result]:
        if not self.corrupt:
            return results
        out: list[Result] = []
        for op, result in zip(ops, results, strict=True):
            if (
                isinstance(op, GetOp)
                and op.namespace[-1:] == ("artifacts",)
                and isinstance(result, Item)
                and isinstance(result.value.get("body"), str)
            ):
                value = {**result.value, "body": result.value["body"][::-1] + "!"}
                result = Item(
                    value=value,
                    key=result.key,
                    namespace=result.namespace,
                    created_at=result.created_at,
                    updated_at=result.updated_at,
                )
            out.append(result)
        return out

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        self._check(ops)
        return self._corrupted(ops, self.inner.batch(ops))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        self._check(ops)
        return self._corrupted(ops, await self.inner.abatch(ops))

    def artifact_puts(self, thread_id: str) -> list[PutOp]:
        namespace = thread_artifacts(thread_id)
        return [op for op in self.ops if isinstance(op, PutOp) and op.namespace == namespace]


@asynccontextmanager
async def persistence_for(
    mode: str, database_uri: str
) -> AsyncIterator[tuple[BaseCheckpointSaver[str], BaseStore]]:
    """The Postgres checkpointer and Store a sync or an async run uses."""
    if mode == "sync":
        with open_persistence(database_uri) as opened:
            yield opened.checkpointer, opened.store
    else:
        async with open_async_persistence(database_uri) as aopened:
            yield aopened.checkpointer, aopened.store


class Run:
    """One graph on Postgres, driven the sync or the async way."""

    def __init__(
        self,
        mode: str,
        saver: BaseCheckpointSaver[str],
        store: BaseStore,
        main: ScriptedChatModel,
        thread_id: str,
        **settings: Any,
    ) -> None:
        self.mode = mode
        self.store = store
        self.main = main
        self.thread_id = thread_id
        self.config: dict[str, Any] = {"configurable": {"thread_id": thread_id}}
        self.graph = build_graph(
            checkpointer=saver,
            store=store,
            models=Models(main=main),
            tools=TOOLS,
            settings=Settings(**{**QUIET, **settings}),
        )

    async def invoke(self, payload: Any, config: dict[str, Any] | None = None) -> dict[str, Any]:
        config = config or self.config
        if self.mode == "sync":
            return await asyncio.to_thread(self.graph.invoke, payload, config, context=CONTEXT)
        return await self.graph.ainvoke(payload, config, context=CONTEXT)

    async def ask(self, text: str) -> dict[str, Any]:
        return await self.invoke({"messages": [("user", text)]})

    async def messages(self) -> list[BaseMessage]:
        if self.mode == "sync":
            state = await asyncio.to_thread(self.graph.get_state, self.config)
        else:
            state = await self.graph.aget_state(self.config)
        return list(state.values["messages"])

    async def history(self) -> list[Any]:
        if self.mode == "sync":
            return await asyncio.to_thread(lambda: list(self.graph.get_state_history(self.config)))
        return [snapshot async for snapshot in self.graph.aget_state_history(self.config)]

    def artifacts(self, store: BaseStore | None = None) -> ArtifactStore:
        return ArtifactStore(store or self.store, self.thread_id)

    async def listed(self) -> list[Artifact]:
        if self.mode == "sync":
            return await asyncio.to_thread(self.artifacts().list)
        return await self.artifacts().alist()

    async def read_text(self, ref: str) -> str:
        if self.mode == "sync":
            return await asyncio.to_thread(self.artifacts().read_text, ref)
        return await self.artifacts().aread_text(ref)

    async def first_page(self, ref: str, offset: int) -> str:
        if self.mode == "sync":
            page = await asyncio.to_thread(
                self.artifacts().read_page, ref, offset, 200, max_tokens=4_000
            )
        else:
            page = await self.artifacts().aread_page(ref, offset, 200, max_tokens=4_000)
        return page.text


def tool_messages(messages: Iterable[BaseMessage]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


def request_tokens(request: list[BaseMessage]) -> int:
    return TokenCounter().count_messages(request)


ROW = re.compile(r"^(\d+)\t(.*)$")


def page_rows(page: str) -> dict[int, str]:
    """``offset -> text`` of the rows a ``read_artifact`` page shows."""
    return {int(m.group(1)): m.group(2) for m in map(ROW.match, page.split("\n")) if m}


def next_offset(page: str) -> int:
    found = re.search(r"next offset: (\d+)", page)
    assert found is not None, page[-300:]
    return int(found.group(1))


def assert_stub(message: ToolMessage, ref: str, original: str) -> None:
    """``message`` is the stub of ``original`` stored under ``ref``."""
    text = message.text
    assert count_text(text) <= MAX_STUB_TOKENS
    assert ref in text
    assert f'read_artifact(ref="{ref}", offset=0, limit=200)' in text
    assert f'grep_artifact(ref="{ref}", pattern="...")' in text
    assert message.additional_kwargs[OFFLOAD_KEY] == {
        "ref": ref,
        "sha256": hashlib.sha256(original.encode()).hexdigest(),
        "tokens": tokens_of(original),
    }


# --- the graph on Postgres -----------------------------------------------------------------


@MODES
async def test_a_2_mb_result_becomes_a_stub_and_reads_back_exactly(
    mode: str, database_uri: str, thread_id: str
) -> None:
    original = big_text()
    ref = result_ref("call-big")

    def reader(messages: list[BaseMessage]) -> AIMessage:
        pages = [m for m in tool_messages(messages) if m.name == "read_artifact"]
        if len(pages) == 1:
            offset = next_offset(pages[0].text)
            return call("read_artifact", {"ref": ref, "offset": offset, "limit": 200}, "read-2")
        return AIMessage(content="the log is long; I read two pages")

    main = ScriptedChatModel(
        script=[
            call("dump_log", {}, "call-big"),
            call("read_artifact", {"ref": ref, "offset": 0, "limit": 200}, "read-1"),
        ],
        responder=reader,
    )
    async with persistence_for(mode, database_uri) as (saver, store):
        run = Run(mode, saver, store, main, thread_id)
        result = await run.ask("show me the access log")
        assert result["messages"][-1].content == "the log is long; I read two pages"

        # The model's next request holds the stub, not 2 MB.
        after_tool = main.requests[1]
        stub = after_tool[-1]
        assert isinstance(stub, ToolMessage) and stub.tool_call_id == "call-big"
        assert_stub(stub, ref, original)
        assert stub.name == "dump_log" and stub.status == "success"
        assert len(original) >= 2 * 1024 * 1024 and tokens_of(original) > 500_000
        assert request_tokens(after_tool) < 3_000  # the trigger is 18,000
        assert "synopsis" not in stub.text  # plain log lines: no JSON or table shape
        assert original.split("\n", 1)[0] in stub.text  # the first line

        # The checkpoint keeps the stub, with the offload record.
        stored = tool_messages(await run.messages())
        assert stored[0].text == stub.text
        assert_stub(stored[0], ref, original)

        # read_artifact pages through the real tool and gives the original lines back.
        first, second = (m for m in stored if m.name == "read_artifact")
        assert first.text == await run.first_page(ref, 0)
        lines = original.split("\n")
        rows = page_rows(first.text) | page_rows(second.text)
        assert min(rows) == 0 and len(rows) > 100
        assert rows == {offset: lines[offset] for offset in rows}
        assert max(page_rows(first.text)) + 1 == min(page_rows(second.text))
        assert OFFLOAD_KEY not in first.additional_kwargs  # reading back is never offloaded
        assert await run.read_text(ref) == original
        assert [a.ref for a in await run.listed()] == [ref]


@pytest.mark.parametrize(("tokens", "offloaded"), [(20_001, True), (19_999, False)])
def test_chinese_results_are_measured_in_real_tokens(
    tokens: int, offloaded: bool, persistence: Any, thread_id: str
) -> None:
    text = chinese_text(tokens)
    assert count_text(text) == tokens
    assert len(text) < 40_000  # far under the 80,000 characters a 4-chars-a-token guess needs
    main = ScriptedChatModel(script=[call("chinese_report", {"tokens": tokens}, "zh"), "好的"])
    graph = build_graph(
        checkpointer=persistence.checkpointer,
        store=persistence.store,
        models=Models(main=main),
        tools=TOOLS,
        settings=Settings(trigger_tokens=60_000, **QUIET),
    )
    config = {"configurable": {"thread_id": thread_id}}
    graph.invoke({"messages": [("user", "报告")]}, config, context=CONTEXT)
    (message,) = tool_messages(graph.get_state(config).values["messages"])
    listed = ArtifactStore(persistence.store, thread_id).list()
    if offloaded:
        assert_stub(message, result_ref("zh"), text)
        assert [a.ref for a in listed] == [result_ref("zh")]
        assert ArtifactStore(persistence.store, thread_id).read_text(result_ref("zh")) == text
    else:
        assert message.content == text
        assert OFFLOAD_KEY not in message.additional_kwargs
        assert listed == []
    assert main.requests[1][-1].text == message.text


def test_with_a_16k_window_the_2_mb_turn_succeeds(persistence: Any, thread_id: str) -> None:
    main = ScriptedChatModel(script=[call("dump_log", {}, "big-16k"), "done"])
    settings = Settings(context_window=16_000, **QUIET)
    assert settings.offload_threshold("dump_log", 16_000) == 4_000
    graph = build_graph(
        checkpointer=persistence.checkpointer,
        store=persistence.store,
        models=Models(main=main),
        tools=TOOLS,
        settings=settings,
    )
    config = {"configurable": {"thread_id": thread_id}}
    result = graph.invoke({"messages": [("user", "log please")]}, config, context=CONTEXT)
    assert result["messages"][-1].content == "done"
    assert request_tokens(main.requests[1]) < 4_000
    assert_stub(main.requests[1][-1], result_ref("big-16k"), big_text())


@pytest.mark.parametrize("fault", ["put raises", "reads corrupted"])
@MODES
async def test_a_failing_store_gives_a_bounded_notice_and_no_ref(
    fault: str, mode: str, database_uri: str, thread_id: str
) -> None:
    original = big_text()
    main = ScriptedChatModel(script=[call("dump_log", {}, "call-fail"), "sorry"])
    async with persistence_for(mode, database_uri) as (saver, inner):
        store = Recording(
            inner, fail_puts=fault == "put raises", corrupt=fault == "reads corrupted"
        )
        run = Run(mode, saver, store, main, thread_id)
        await run.ask("show me the access log")
        (message,) = tool_messages(await run.messages())
        assert main.requests[1][-1].text == message.text
        text = message.text
        assert "art-" not in text
        assert OFFLOAD_KEY not in message.additional_kwargs
        failed = message.additional_kwargs[OFFLOAD_FAILED_KEY]
        assert failed["tokens"] == tokens_of(original)
        assert "ArtifactWriteError" in failed["error"] and "art-" not in failed["error"]
        assert "the full output was NOT saved: ArtifactWriteError" in text
        cause = "disk full" if fault == "put raises" else "did not read back"
        assert cause in text
        assert count_text(text) <= MAX_STUB_TOKENS
        assert request_tokens(main.requests[1]) < 3_000
        assert text.split("--- beginning ---\n", 1)[1].startswith(original[:100])
        assert original[-100:].rstrip("\n") in text
        if fault == "put raises":
            assert await run.listed() == []


def test_without_a_store_the_result_is_cut_and_says_why() -> None:
    main = ScriptedChatModel(script=[call("dump_log", {}, "no-store"), "ok"])
    graph = build_graph(models=Models(main=main), tools=TOOLS, settings=Settings(**QUIET))
    graph.invoke({"messages": [("user", "log")]}, context=CONTEXT)
    message = main.requests[1][-1]
    assert isinstance(message, ToolMessage)
    assert "the full output was NOT saved: no store" in message.text
    assert "art-" not in message.text and OFFLOAD_KEY not in message.additional_kwargs
    assert count_text(message.text) <= MAX_STUB_TOKENS


@MODES
async def test_replaying_the_tools_step_writes_no_second_artifact(
    mode: str, database_uri: str, thread_id: str
) -> None:
    main = ScriptedChatModel(
        script=[call("dump_log", {}, "call-replay"), "first answer", "replayed answer"]
    )
    ref = result_ref("call-replay")
    async with persistence_for(mode, database_uri) as (saver, inner):
        store = Recording(inner)
        run = Run(mode, saver, store, main, thread_id)
        await run.ask("log")
        puts = len(store.artifact_puts(thread_id))
        assert puts >= 2  # the record and its chunks
        before_tools = next(s for s in await run.history() if s.next == ("tools",))
        store.ops.clear()

        result = await run.invoke(None, before_tools.config)

        assert result["messages"][-1].content == "replayed answer"
        assert store.artifact_puts(thread_id) == []
        assert [a.ref for a in await run.listed()] == [ref]
        replayed = tool_messages(await run.messages())
        assert len(replayed) == 1
        assert_stub(replayed[0], ref, big_text())


@MODES
async def test_three_parallel_large_results_give_three_artifacts_and_three_stubs(
    mode: str, database_uri: str, thread_id: str
) -> None:
    step = calls(
        ("dump_log", {"part": 1}, "p1"), ("dump_log", {"part": 2}, "p2"), ("dump_log", {}, "p3")
    )
    main = ScriptedChatModel(script=[step, "three logs"])
    async with persistence_for(mode, database_uri) as (saver, store):
        # A quota below one result: eviction runs after each write, yet keeps all three.
        run = Run(mode, saver, store, main, thread_id, artifact_quota_bytes=1_000)
        await run.ask("all three logs")
        stubs = tool_messages(main.requests[1])
        assert sorted(m.tool_call_id for m in stubs) == ["p1", "p2", "p3"]
        originals = {"p1": dump_log.invoke({"part": 1}), "p2": dump_log.invoke({"part": 2})}
        originals["p3"] = big_text()
        for message in stubs:
            assert_stub(message, result_ref(message.tool_call_id), originals[message.tool_call_id])
        assert request_tokens(main.requests[1]) < 6_000
        listed = await run.listed()
        assert sorted(a.ref for a in listed) == sorted(result_ref(c) for c in ("p1", "p2", "p3"))
        for call_id, text in originals.items():
            assert await run.read_text(result_ref(call_id)) == text


def test_over_the_quota_an_unreferenced_artifact_is_evicted(
    persistence: Any, thread_id: str
) -> None:
    artifacts = ArtifactStore(persistence.store, thread_id)
    orphan = artifacts.put("tool_result", "old text\n" * 1_000, source_id="gone", tool_name="x")
    main = ScriptedChatModel(script=[call("dump_log", {}, "call-quota"), "ok"])
    graph = build_graph(
        checkpointer=persistence.checkpointer,
        store=persistence.store,
        models=Models(main=main),
        tools=TOOLS,
        settings=Settings(artifact_quota_bytes=len(big_text()), **QUIET),
    )
    config = {"configurable": {"thread_id": thread_id}}
    graph.invoke({"messages": [("user", "log")]}, config, context=CONTEXT)
    assert [a.ref for a in artifacts.list()] == [result_ref("call-quota")]
    assert artifacts.get(orphan.ref) is None


@pytest.mark.parametrize(
    ("settings", "offloaded"),
    [
        ({"offload_tokens": 1_000}, {"medium_a", "medium_b"}),
        ({"offload_tokens": 1_000, "offload_tool_tokens": {"medium_a": 0}}, {"medium_b"}),
        ({"offload_tokens": 1_000, "offload_tool_tokens": {"medium_b": 50_000}}, {"medium_a"}),
        ({"offload_tokens": 0}, set()),
        ({"offload_tokens": 0, "offload_tool_tokens": {"medium_a": 1_000}}, {"medium_a"}),
    ],
)
def test_per_tool_overrides_and_zero_choose_what_is_offloaded(
    settings: dict[str, Any], offloaded: set[str], persistence: Any, thread_id: str
) -> None:
    assert 4_000 < count_text(numbered_text(400)) < 10_000
    main = ScriptedChatModel(script=[calls(("medium_a", {}, "ma"), ("medium_b", {}, "mb")), "ok"])
    graph = build_graph(
        checkpointer=persistence.checkpointer,
        store=persistence.store,
        models=Models(main=main),
        tools=TOOLS,
        settings=Settings(**settings, **QUIET),
    )
    config = {"configurable": {"thread_id": thread_id}}
    graph.invoke({"messages": [("user", "both")]}, config, context=CONTEXT)
    messages = tool_messages(graph.get_state(config).values["messages"])
    assert {m.name for m in messages if OFFLOAD_KEY in m.additional_kwargs} == offloaded
    for message in messages:
        if message.name not in offloaded:
            assert message.content == numbered_text(400)


def test_a_run_context_can_turn_offloading_off(persistence: Any, thread_id: str) -> None:
    main = ScriptedChatModel(script=[call("medium_a", {}, "ctx"), "ok"])
    graph = build_graph(
        checkpointer=persistence.checkpointer,
        store=persistence.store,
        models=Models(main=main),
        tools=TOOLS,
        settings=Settings(offload_tokens=1_000, **QUIET),
    )
    config = {"configurable": {"thread_id": thread_id}}
    context = Context(user_id="u1", settings={"offload_tokens": 0})
    graph.invoke({"messages": [("user", "a")]}, config, context=context)
    (message,) = tool_messages(graph.get_state(config).values["messages"])
    assert message.content == numbered_text(400)


def test_reading_tools_are_never_offloaded(persistence: Any, thread_id: str) -> None:
    ref = result_ref("call-low")
    main = ScriptedChatModel(
        script=[
            call("dump_log", {}, "call-low"),
            calls(
                ("read_artifact", {"ref": ref, "offset": 0, "limit": 1_000}, "r"),
                ("grep_artifact", {"ref": ref, "pattern": "status=200", "max_matches": 500}, "g"),
                ("read_history", {"query": "anything"}, "h"),
            ),
            "ok",
        ]
    )
    graph = build_graph(
        checkpointer=persistence.checkpointer,
        store=persistence.store,
        models=Models(main=main),
        tools=TOOLS,
        settings=Settings(offload_tokens=100, trigger_tokens=60_000, **QUIET),
    )
    config = {"configurable": {"thread_id": thread_id}}
    graph.invoke({"messages": [("user", "read it")]}, config, context=CONTEXT)
    stub, *readers = tool_messages(graph.get_state(config).values["messages"])
    assert_stub(stub, ref, big_text())
    assert {m.name for m in readers} == {"read_artifact", "grep_artifact", "read_history"}
    for message in readers:
        assert OFFLOAD_KEY not in message.additional_kwargs
        assert OFFLOAD_FAILED_KEY not in message.additional_kwargs
        if message.name != "read_history":
            assert count_text(message.text) > 1_000  # well over the threshold of 100
    assert [a.ref for a in ArtifactStore(persistence.store, thread_id).list()] == [ref]


# --- the wrapper on its own ------------------------------------------------------------------


def tool_request(
    name: str, call_id: str, store: BaseStore | None, thread: str | None = "t-unit"
) -> ToolCallRequest:
    state: dict[str, Any] = {"messages": []}
    configurable = {"thread_id": thread} if thread else {}
    runtime = ToolRuntime(
        state=state,
        context=CONTEXT,
        config={"configurable": configurable},
        stream_writer=lambda _: None,
        tool_call_id=call_id,
        store=store,
    )
    tool_call = {"name": name, "args": {}, "id": call_id, "type": "tool_call"}
    return ToolCallRequest(tool_call=tool_call, tool=None, state=state, runtime=runtime)  # type: ignore[arg-type]


def answering(message: ToolMessage | Command[Any]) -> Callable[[ToolCallRequest], Any]:
    return lambda _request: message


def offloader(**settings: Any) -> ResultOffloader:
    return ResultOffloader(ScriptedChatModel(), Settings(**settings))


@MODES
async def test_the_wrapper_twice_with_one_call_id_writes_once(mode: str) -> None:
    store = Recording(InMemoryStore())
    wrapper = offloader(offload_tokens=1_000)
    result = ToolMessage(content=numbered_text(400), tool_call_id="same", name="medium_a")

    async def execute(_request: ToolCallRequest) -> ToolMessage:
        return result

    async def once() -> Any:
        request = tool_request("medium_a", "same", store)
        if mode == "sync":
            return wrapper.wrap(request, answering(result))
        return await wrapper.awrap(request, execute)

    first = await once()
    puts = len(store.artifact_puts("t-unit"))
    second = await once()
    assert puts >= 1
    assert len(store.artifact_puts("t-unit")) == puts
    assert isinstance(first, ToolMessage) and first.content == second.content
    assert first.additional_kwargs == second.additional_kwargs
    assert [a.ref for a in ArtifactStore(store, "t-unit").list()] == [result_ref("same")]


def test_the_stub_keeps_the_message_identity_and_other_blocks() -> None:
    text = numbered_text(400)
    image = {"type": "image", "url": "https://example.com/chart.png"}
    result = ToolMessage(
        content=[{"type": "text", "text": text}, image],
        tool_call_id="blocks",
        name="medium_a",
        id="tm-blocks",
        status="error",
        additional_kwargs={"trace": "kept"},
        artifact={"raw": 1},
    )
    stubbed = offloader(offload_tokens=1_000).wrap(
        tool_request("medium_a", "blocks", InMemoryStore()), answering(result)
    )
    assert isinstance(stubbed, ToolMessage)
    assert (stubbed.id, stubbed.tool_call_id, stubbed.name, stubbed.status) == (
        "tm-blocks",
        "blocks",
        "medium_a",
        "error",
    )
    assert stubbed.artifact == {"raw": 1}
    assert stubbed.additional_kwargs["trace"] == "kept"
    assert isinstance(stubbed.content, list) and stubbed.content[1] == image
    assert result_ref("blocks") in stubbed.content[0]["text"]  # type: ignore[index]


def test_commands_small_results_and_reading_tools_pass_through() -> None:
    wrapper = offloader(offload_tokens=100)
    store = InMemoryStore()
    command: Command[Any] = Command(update={"messages": []})
    assert wrapper.wrap(tool_request("medium_a", "c", store), answering(command)) is command
    small = ToolMessage(content="short", tool_call_id="s", name="medium_a")
    assert wrapper.wrap(tool_request("medium_a", "s", store), answering(small)) is small
    assert {"read_artifact", "grep_artifact", "read_history"} == NEVER_OFFLOADED
    for name in sorted(NEVER_OFFLOADED):
        big = ToolMessage(content=numbered_text(400), tool_call_id=name, name=name)
        assert wrapper.wrap(tool_request(name, name, store), answering(big)) is big
    assert ArtifactStore(store, "t-unit").list() == []


def test_without_a_thread_id_the_result_is_cut_and_says_why() -> None:
    result = ToolMessage(content=numbered_text(400), tool_call_id="nt", name="medium_a")
    cut = offloader(offload_tokens=1_000).wrap(
        tool_request("medium_a", "nt", InMemoryStore(), thread=None), answering(result)
    )
    assert isinstance(cut, ToolMessage)
    assert "the full output was NOT saved: no thread id" in cut.text
    assert OFFLOAD_KEY not in cut.additional_kwargs and "art-" not in cut.text


# --- the stub text -----------------------------------------------------------------------------


def artifact_of(text: str) -> Artifact:
    return Artifact(
        ref=result_ref("stub"),
        kind="tool_result",
        tool_name="t",
        call_id="stub",
        created_at="2026-01-01T00:00:00+00:00",
        size_bytes=len(text.encode()),
        tokens=count_text(text),
        lines=len(text.splitlines()),
        sha256=hashlib.sha256(text.encode()).hexdigest(),
        chunks=1,
    )


def stub_of(text: str) -> str:
    return offload_stub(artifact_of(text), text, tool_name="t")


def test_the_stub_describes_json_shapes() -> None:
    rows = "[" + ",".join(f'{{"id": {i}, "sku": "S-{i}", "qty": {i % 7}}}' for i in range(5_000))
    stub = stub_of(rows + "]")
    assert "synopsis: valid JSON: an array of 5,000 items (first items: object); " in stub
    assert "keys of the first objects: id, sku, qty" in stub
    keys = '{"' + '": 1, "'.join(f"k{i}" for i in range(30)) + '": 1}'
    assert "an object with 30 keys: k0, k1," in stub_of(keys)
    assert "... (10 more)" in stub_of(keys)


def test_the_stub_describes_tables() -> None:
    csv_text = "id,name,price\n" + "\n".join(f"{i},item {i},{i * 3}" for i in range(2_000))
    assert "a CSV table: 3 columns (id, name, price), 2,000 rows after the header" in stub_of(
        csv_text
    )
    tsv_text = "a\tb\n" + "\n".join(f"{i}\t{i}" for i in range(10))
    assert "a TSV table: 2 columns (a, b), 10 rows" in stub_of(tsv_text)
    markdown = "Results:\n\n| name | size |\n|---|--:|\n" + "\n".join(
        f"| f{i} | {i} |" for i in range(40)
    )
    assert "a Markdown table: 2 columns (name, size), 40 rows" in stub_of(markdown)
    assert "synopsis" not in stub_of("just, some prose\nwith a comma, or two, here\nend")


def test_the_stub_shows_the_edges_and_is_deterministic_and_bounded() -> None:
    text = "\n".join(f"row {i} " + "y" * 500 for i in range(1_000))
    stub = stub_of(text)
    assert stub == stub_of(text)
    assert "row 0 " in stub and "row 999 " in stub
    assert "...[cut, 506 chars]" in stub
    assert "last 5 lines (from read_artifact offset 995):" in stub
    assert count_text(stub) <= MAX_STUB_TOKENS
    # Text of very many tokens per character still fits.
    dense = "\n".join("".join(chr(0x1F600 + (i * j) % 80) for j in range(400)) for i in range(50))
    assert count_text(stub_of(dense)) <= MAX_STUB_TOKENS
    assert result_ref("stub") in stub_of(dense)


def test_the_unsaved_text_is_bounded_and_names_the_error() -> None:
    text = chinese_text(20_001)
    notice = unsaved_text(text, tool_name="t", tokens=20_001, reason="RuntimeError: boom")
    assert count_text(notice) <= MAX_STUB_TOKENS
    assert "the full output was NOT saved: RuntimeError: boom." in notice
    assert "20,001 tokens" in notice
    assert notice.split("--- beginning ---\n", 1)[1].startswith(text[:50])
    assert notice.endswith(text[-50:])
