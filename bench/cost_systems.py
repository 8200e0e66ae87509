"""The six systems the cost benchmark compares, each built on recording scripted models.

Every system gets one ``ScriptedChatModel`` per model it uses, which records the exact
messages and tool schemas of every call (``bind_tools`` and ``with_structured_output``
both bind schemas). The main model is the same pure function of the messages for all
systems (``bench.session.make_main_responder``). Every summary is the same prose
(``bench.cost_summary``): ctxgraph runs with the default model setup, its main model
writing the summaries (``Models(main=main, memory=memory)``), while the peers'
summarization middleware gets a summary model of its own, as it needs. The memory
models return what each system expects. ``ctxgraph-middleware`` is ``ctxgraph-memory``
built as ``create_agent(..., middleware=ctxgraph_middleware(...))``: the same settings,
models, Store and system prompt, so the same nodes send the same requests.

A peer whose package is missing raises ``NotInstalled`` with the command that installs it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib.util import find_spec
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import BaseTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from bench.compaction_bench import TimedResponder
from bench.cost_summary import summary_aware, summary_responder
from bench.session import Session, make_main_responder
from ctxgraph import Context, MemoryRepository, Models, Settings, build_graph
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.tokens import TokenCounter

CTX_MEMORY = "ctxgraph-memory"
CTX_NO_EXTRACTION = "ctxgraph-no-extraction"
CTX_MIDDLEWARE = "ctxgraph-middleware"
PEER = "peer"
PEER_LANGMEM = "peer-langmem"
DEEPAGENTS = "deepagents"

SYSTEMS: dict[str, str] = {
    CTX_MEMORY: "ctxgraph, memory on",
    CTX_NO_EXTRACTION: "ctxgraph, memory extraction off",
    CTX_MIDDLEWARE: "create_agent + ctxgraph middleware, memory on",
    PEER: "create_agent + SummarizationMiddleware",
    PEER_LANGMEM: "create_agent + SummarizationMiddleware + LangMem manager",
    DEEPAGENTS: "Deep Agents (create_deep_agent)",
}
"""Every system by name (``--systems``), with its label."""

INSTALL_LANGMEM = "pip install -c constraints.txt -e '.[bench]'"
INSTALL_DEEPAGENTS = "pip install --no-deps -c constraints.txt -r bench/requirements-peers.txt"

USER_ID = "bench-user"
"""The user whose facts are stored (ctxgraph) or passed as existing memories (LangMem)."""


class NotInstalledError(RuntimeError):
    """A peer's package is missing; ``command`` installs it."""

    def __init__(self, package: str, command: str) -> None:
        super().__init__(f"{package} is not installed ({command})")
        self.package = package
        self.command = command


@dataclass(frozen=True)
class Triggers:
    """The same triggers for every system."""

    tokens: int = 18_000
    messages: int = 60
    keep: int = 8


@dataclass
class System:
    """A built system: how to send a user turn, and its recording models by role."""

    name: str
    send: Callable[[str], None]
    models: dict[str, ScriptedChatModel]
    timers: list[TimedResponder]
    system_prompt: str
    after_turn: Callable[[str], None] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def model_seconds(self) -> float:
        """Time spent inside the fake models so far."""
        return sum(timer.seconds for timer in self.timers)


def recording_model(
    respond: Callable[[list[BaseMessage]], AIMessage], role: str
) -> tuple[ScriptedChatModel, TimedResponder]:
    """A recording scripted model for ``role`` and the timer around its responder."""
    timer = TimedResponder(respond)
    return ScriptedChatModel(responder=timer, model_name=f"bench-{role}"), timer


def empty_memory_update(messages: list[BaseMessage]) -> AIMessage:
    """ctxgraph's memory model finding nothing new: an empty ``MemoryUpdate`` tool call."""
    update: dict[str, list[Any]] = {"facts": [], "profile_updates": []}
    return AIMessage(
        content="", tool_calls=[{"name": "MemoryUpdate", "args": update, "id": "call_memory_0"}]
    )


def langmem_nothing_new(messages: list[BaseMessage]) -> AIMessage:
    """LangMem's extractor finding nothing new: no tool call, so existing memories stay."""
    return AIMessage(content="No new memories.")


def _exact_counter() -> Any:
    """The peers' token counter: ctxgraph's tiktoken count, so triggers fire alike."""
    return TokenCounter().count_messages


def require(package: str, command: str) -> None:
    """Raise ``NotInstalledError`` when ``package`` cannot be imported."""
    if find_spec(package) is None:
        raise NotInstalledError(package, command)


def ctxgraph_settings(triggers: Triggers, *, extraction: bool) -> Settings:
    """ctxgraph's settings on the shared triggers, memory extraction inline or off."""
    values: dict[str, Any] = {
        "trigger_tokens": triggers.tokens,
        "trigger_messages": triggers.messages,
        "keep_messages": triggers.keep,
    }
    # Inline, so each turn's extraction is billed in the turn that caused it (the
    # background default would run it after the turn, possibly after the session ended).
    values["memory_extraction"] = "inline" if extraction else "off"
    return Settings(**values)


def _ctxgraph_parts(
    session: Session, facts: Sequence[str]
) -> tuple[ScriptedChatModel, ScriptedChatModel, list[TimedResponder], InMemoryStore]:
    """The main and memory models of a ctxgraph system, their timers, the facts' Store.

    The default model setup: no summary model of its own, so the main model (which
    answers summary calls with the shared prose) writes the summaries.
    """
    main, main_timer = recording_model(summary_aware(make_main_responder(session)), "main")
    memory, memory_timer = recording_model(empty_memory_update, "memory")
    store = InMemoryStore()
    if facts:
        MemoryRepository(store).add_facts(Context(user_id=USER_ID), list(facts))
    return main, memory, [main_timer, memory_timer], store


def build_ctxgraph(
    session: Session,
    tools: Sequence[BaseTool],
    facts: Sequence[str],
    triggers: Triggers,
    *,
    extraction: bool,
) -> System:
    """ctxgraph with memory on (extraction inline) or with memory extraction off."""
    main, memory, timers, store = _ctxgraph_parts(session, facts)
    settings = ctxgraph_settings(triggers, extraction=extraction)
    context = Context(user_id=USER_ID)
    graph = build_graph(
        checkpointer=InMemorySaver(),
        store=store,
        models=Models(main=main, memory=memory),
        tools=list(tools),
        settings=settings,
    )
    config: Any = {"configurable": {"thread_id": "cost-bench"}}

    def send(text: str) -> None:
        turn: Any = {"messages": [("user", text)]}
        graph.invoke(turn, config, context=context)

    name = CTX_MEMORY if extraction else CTX_NO_EXTRACTION
    return System(name, send, {"main": main, "memory": memory}, timers, settings.system_prompt)


def build_middleware(
    session: Session, tools: Sequence[BaseTool], facts: Sequence[str], triggers: Triggers
) -> System:
    """``create_agent`` with ``ctxgraph_middleware``: ctxgraph, memory on, as middleware.

    The settings, models and Store of ``ctxgraph-memory`` (extraction inline); the agent's
    system prompt is ctxgraph's own, so the requests are those of ctxgraph's graph.
    """
    from langchain.agents import create_agent

    from ctxgraph.middleware import ctxgraph_middleware

    main, memory, timers, store = _ctxgraph_parts(session, facts)
    settings = ctxgraph_settings(triggers, extraction=True)
    agent = create_agent(
        model=main,
        tools=list(tools),
        system_prompt=settings.system_prompt,
        middleware=ctxgraph_middleware(models=Models(main=main, memory=memory), settings=settings),
        checkpointer=InMemorySaver(),
        store=store,
        context_schema=Context,
    )
    context = Context(user_id=USER_ID)
    config: Any = {"configurable": {"thread_id": "cost-bench"}}

    def send(text: str) -> None:
        turn: Any = {"messages": [("user", text)]}
        agent.invoke(turn, config, context=context)

    return System(
        CTX_MIDDLEWARE, send, {"main": main, "memory": memory}, timers, settings.system_prompt
    )


def _turn_messages(messages: Sequence[BaseMessage], text: str) -> list[BaseMessage]:
    """The messages of the turn that began with the user saying ``text``."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, HumanMessage) and message.content == text:
            return list(messages[index:])
    return list(messages[-2:])


def build_peer(
    session: Session,
    tools: Sequence[BaseTool],
    facts: Sequence[str],
    triggers: Triggers,
    *,
    langmem: bool,
) -> System:
    """``create_agent`` + ``SummarizationMiddleware``; with ``langmem``, LangMem after each turn."""
    if langmem:
        require("langmem", INSTALL_LANGMEM)
    from langchain.agents import create_agent
    from langchain.agents.middleware import SummarizationMiddleware

    main, main_timer = recording_model(make_main_responder(session), "main")
    summary, summary_timer = recording_model(summary_responder, "summary")
    prompt = Settings().system_prompt
    middleware = SummarizationMiddleware(
        model=summary,
        trigger=[("tokens", triggers.tokens), ("messages", triggers.messages)],
        keep=("messages", triggers.keep),
        token_counter=_exact_counter(),
    )
    agent = create_agent(
        model=main,
        tools=list(tools),
        system_prompt=prompt,
        middleware=[middleware],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "cost-bench"}}
    models = {"main": main, "summary": summary}
    timers = [main_timer, summary_timer]
    last: dict[str, list[BaseMessage]] = {"messages": []}

    def send(text: str) -> None:
        turn: Any = {"messages": [("user", text)]}
        result = agent.invoke(turn, config)
        last["messages"] = list(result.get("messages") or [])

    system = System(PEER_LANGMEM if langmem else PEER, send, models, timers, prompt)
    if langmem:
        system.after_turn = _langmem_step(system, facts, last)
    return system


def _langmem_step(
    system: System, facts: Sequence[str], last: dict[str, list[BaseMessage]]
) -> Callable[[str], None]:
    """Run LangMem's memory manager on the turn's messages, with the stored memories."""
    from langmem import create_memory_manager  # type: ignore[import-untyped,unused-ignore]

    memory, memory_timer = recording_model(langmem_nothing_new, "memory")
    system.models["memory"] = memory
    system.timers.append(memory_timer)
    manager = create_memory_manager(memory)
    existing: list[tuple[str, str, Any]] = [
        (f"fact-{index:03d}", "Memory", {"content": fact}) for index, fact in enumerate(facts)
    ]

    def step(text: str) -> None:
        found = manager.invoke(
            {"messages": _turn_messages(last["messages"], text), "existing": list(existing)}
        )
        existing[:] = [(item.id, "Memory", item.content) for item in found]

    return step


def build_deepagents(
    session: Session, tools: Sequence[BaseTool], facts: Sequence[str], triggers: Triggers
) -> System:
    """``create_deep_agent`` with its summarization middleware on the same triggers."""
    require("deepagents", INSTALL_DEEPAGENTS)
    from deepagents import create_deep_agent
    from deepagents.backends import StateBackend
    from deepagents.middleware.summarization import SummarizationMiddleware

    main, main_timer = recording_model(make_main_responder(session), "main")
    summary, summary_timer = recording_model(summary_responder, "summary")
    prompt = Settings().system_prompt
    backend = StateBackend()
    middleware = SummarizationMiddleware(
        model=summary,
        backend=backend,
        trigger=[("tokens", triggers.tokens), ("messages", triggers.messages)],
        keep=("messages", triggers.keep),
        token_counter=_exact_counter(),
    )
    agent = create_deep_agent(
        model=main,
        tools=list(tools),
        system_prompt=prompt,
        middleware=[middleware],
        backend=backend,
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "cost-bench"}}

    def send(text: str) -> None:
        turn: Any = {"messages": [("user", text)]}
        agent.invoke(turn, config)

    return System(
        DEEPAGENTS, send, {"main": main, "summary": summary}, [main_timer, summary_timer], prompt
    )


def build_system(
    name: str,
    session: Session,
    tools: Sequence[BaseTool],
    facts: Sequence[str],
    triggers: Triggers,
) -> System:
    """Build the system called ``name`` (one of ``SYSTEMS``)."""
    if name in (CTX_MEMORY, CTX_NO_EXTRACTION):
        return build_ctxgraph(session, tools, facts, triggers, extraction=name == CTX_MEMORY)
    if name == CTX_MIDDLEWARE:
        return build_middleware(session, tools, facts, triggers)
    if name in (PEER, PEER_LANGMEM):
        return build_peer(session, tools, facts, triggers, langmem=name == PEER_LANGMEM)
    if name == DEEPAGENTS:
        return build_deepagents(session, tools, facts, triggers)
    raise ValueError(f"unknown system {name!r}; choose from {', '.join(SYSTEMS)}")
