"""The agent's own system prompt is part of the request the compaction measures.

``create_agent(system_prompt=...)`` puts the agent's prompt first in every request, not
ctxgraph's ``Settings.system_prompt``: the triggers must count it (a long prompt leaves
less room for the window), and the shared-prefix summary request must begin with it, as
the main request it repeats does.
"""

from __future__ import annotations

from langchain.agents import create_agent
from langchain_core.messages import BaseMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from ctxgraph.middleware import ctxgraph_middleware
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.state.tokens import TokenCounter, count_text
from tests.support.agents import config, lookup, provider_problems, session_reply, user_turn
from tests.support.scripted import Dispatch, is_summary_request, main_requests, summary_requests

HANDBOOK = "Follow the warehouse handbook: every rule of it applies to each order. " * 120
SETTINGS = Settings(
    trigger_tokens=3_000, trigger_messages=200, keep_messages=6, memory_extraction="off"
)
CTX = Context(user_id="u-prompt")


def run_agent(main: ScriptedChatModel, models: Models | None, turns: int) -> None:
    agent = create_agent(
        main,
        [lookup],
        system_prompt=HANDBOOK,
        middleware=ctxgraph_middleware(models=models, settings=SETTINGS),
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
        context_schema=Context,
    )
    for n in range(1, turns + 1):
        agent.invoke(user_turn(n), config("t-prompt"), context=CTX)


def opens_with_handbook(request: list[BaseMessage]) -> bool:
    return isinstance(request[0], SystemMessage) and request[0].text == HANDBOOK


def sizes(model: ScriptedChatModel) -> list[int]:
    counter = TokenCounter()
    return [
        counter.count_messages(request) + counter.count_tools(tools)
        for request, tools in zip(model.requests, model.tool_requests, strict=True)
        if not is_summary_request(request)
    ]


def test_a_long_agent_prompt_counts_toward_the_token_trigger() -> None:
    assert count_text(HANDBOOK) > SETTINGS.trigger_tokens // 2
    for given in (False, True):  # the host learns the model at its first call, or is told
        main = ScriptedChatModel(responder=Dispatch(session_reply))
        run_agent(main, Models(main=main) if given else None, turns=40)
        requests = main_requests(main)
        assert all(opens_with_handbook(r) for r in requests)
        assert max(sizes(main)) < SETTINGS.trigger_tokens, (given, max(sizes(main)))
        assert len(summary_requests(main)) >= 2
        assert [p for r in requests if (p := provider_problems(r))] == []


def test_the_shared_prefix_summary_request_begins_like_the_main_request() -> None:
    main = ScriptedChatModel(responder=Dispatch(session_reply))
    run_agent(main, None, turns=20)
    calls = main.requests
    compactions = [i for i, request in enumerate(calls) if is_summary_request(request)]
    assert compactions
    for i in compactions:
        # The main request before it; the summary repeats it (and the messages since).
        summary, before = calls[i], calls[i - 1]
        assert opens_with_handbook(summary)
        shared = min(len(before), len(summary) - 1)
        assert shared > len(summary) // 2
        assert summary[:shared] == before[:shared]
