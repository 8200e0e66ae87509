"""Smoke test of bench/cost_bench.py: real figures on a small session, peers optional."""

from __future__ import annotations

import json
from importlib.util import find_spec

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from bench import cost_bench, cost_systems
from bench.cost_bench import (
    BenchConfig,
    BillCounter,
    Stream,
    breakdown,
    message_part,
    parse_args,
    prefix_target,
    report,
    request_total,
    run_scenario,
    schema_text,
    shared_prefix,
    to_json,
)
from bench.cost_record import RECORD_BLOCKS, record_blocks
from bench.cost_session import SESSION_KINDS, order_session, order_tools, user_facts
from bench.cost_summary import (
    SUMMARY_REQUEST_ORIGIN,
    folded_text,
    is_summary_call,
    shared_summary,
    summary_aware,
)
from bench.cost_systems import (
    CTX_MEMORY,
    CTX_MIDDLEWARE,
    CTX_NO_EXTRACTION,
    DEEPAGENTS,
    PEER,
    PEER_LANGMEM,
    System,
    recording_model,
)
from ctxgraph.nodes.compaction.plan import SummaryJob
from ctxgraph.nodes.compaction.sections import find_sections
from ctxgraph.nodes.compaction.summarizer import build_prompt
from ctxgraph.state.messages import ORIGIN_KEY
from ctxgraph.state.tokens import count_text, message_text

TURNS = 40
SMALL = cost_systems.Triggers(tokens=4000, messages=20, keep=8)
MEASURED = (CTX_MEMORY, CTX_NO_EXTRACTION, CTX_MIDDLEWARE, PEER)


def test_counts_a_request_like_a_bill() -> None:
    counter = BillCounter()
    messages = [SystemMessage("rules"), HumanMessage("hello there")]
    tools = [{"type": "function", "function": {"name": "lookup_order", "parameters": {}}}]
    expected = (
        count_text(json.dumps(tools, ensure_ascii=False, sort_keys=True))
        + sum(count_text(message_text(m)) + 3 for m in messages)
        + 3
    )
    assert request_total(counter.segments(messages, tools)) == expected


def test_prefix_stops_at_the_first_difference() -> None:
    counter = BillCounter()
    rules = SystemMessage("rules " * 50)
    first = counter.segments([rules, HumanMessage("one"), AIMessage("two")], [])
    same_start = counter.segments([rules, HumanMessage("one"), AIMessage("three")], [])
    changed_rules = counter.segments([SystemMessage("other"), HumanMessage("one")], [])
    head = sum(s.tokens + s.framing for s in first[:2])
    shared = shared_prefix(first, same_start)
    # The two requests share the rules, "one" and the start of the AI message ("ai\n").
    assert head < shared < request_total(same_start)
    assert shared_prefix(first, changed_rules) < first[0].tokens
    appended = counter.segments(
        [rules, HumanMessage("one"), AIMessage("two"), HumanMessage("x")], []
    )
    assert shared_prefix(first, appended) == request_total(first) - 3


def test_parts_are_found_by_marker_not_by_position() -> None:
    memory = HumanMessage("facts", id="ctxgraph-memory-abc", additional_kwargs={"origin": "memory"})
    summary = HumanMessage("record", id="ctxgraph-summary-v3")
    skills = HumanMessage("skills", additional_kwargs={"origin": "skills"})
    unknown = HumanMessage("data", additional_kwargs={"origin": "delegations"})
    peer_summary = HumanMessage("s", additional_kwargs={"lc_source": "summarization"})
    tool = ToolMessage("result", tool_call_id="c1")
    assert message_part(memory) == "memory view"
    assert message_part(summary) == "summary record"
    # The active-skill record is data of its own; the listing rides in the system message.
    assert message_part(skills) == "other"
    assert message_part(unknown) == "other"
    assert message_part(peer_summary) == "summary record"
    assert message_part(tool) == "window"
    # Any order: a summary before the system prompt, a listing inside the system message.
    system = SystemMessage("RULES\n\nLISTING of skills", id="ctxgraph-system-prompt-1234")
    request = [summary, system, memory, HumanMessage("hi")]
    counter = BillCounter()
    parts = breakdown(request, [], "RULES", counter)
    assert parts["skill listing"] > 0
    assert parts["system prompt"] == count_text(message_text(SystemMessage("RULES"))) + 3
    assert sum(parts.values()) == request_total(counter.segments(request, []))


@pytest.fixture(scope="module")
def scenario() -> cost_bench.Scenario:
    config = BenchConfig(
        turns=TURNS, systems=MEASURED, sessions=("orders",), facts=(60,), triggers=SMALL
    )
    return run_scenario(config, "orders", 60)


def test_ctxgraph_and_plain_peer_report_real_figures(scenario: cost_bench.Scenario) -> None:
    results = {name: scenario.outcomes[name] for name in MEASURED}
    for name, result in results.items():
        assert isinstance(result, cost_bench.SystemResult), name
        streams = result.streams
        # Every turn: the tool call, then the answer; nothing else goes to the main model.
        assert streams["main"].calls == 2 * TURNS, name
        assert streams["summary"].calls >= 1, name
        assert result.per_turn() > 0
        assert result.per_turn() == pytest.approx(
            sum(result.per_turn(role) for role in cost_bench.ROLES)
        )
        assert 0.0 <= result.prefix_share <= 1.0
        assert result.schema_per_main_call > 0
        assert result.largest >= result.main_median > 0
        assert sum(result.breakdown.values()) == result.breakdown_total > 0, name
        assert result.breakdown["window"] > 0
        assert result.overheads and all(value >= 0 for value in result.overheads)
    memory_on = results[CTX_MEMORY]
    assert isinstance(memory_on, cost_bench.SystemResult)
    assert memory_on.streams["memory"].calls >= 1
    assert memory_on.per_turn("memory") > 0
    # The 60 stored facts reach ctxgraph's requests as the memory view.
    assert memory_on.breakdown["memory view"] > 0
    no_extraction = results[CTX_NO_EXTRACTION]
    assert isinstance(no_extraction, cost_bench.SystemResult)
    assert no_extraction.streams["memory"].calls == 0
    assert no_extraction.breakdown["memory view"] > 0
    peer = results[PEER]
    assert isinstance(peer, cost_bench.SystemResult)
    assert peer.streams["memory"].calls == 0
    assert peer.breakdown["memory view"] == 0
    # Every summary call is counted with its input: the tokens are billed.
    for result in (memory_on, no_extraction, peer):
        assert result.per_turn("summary") > 0


def test_the_middleware_sends_what_ctxgraphs_graph_sends(scenario: cost_bench.Scenario) -> None:
    # create_agent + ctxgraph_middleware runs the graph's nodes with the same settings,
    # models and system prompt: the main and summary requests are the graph's, byte for
    # byte, so their billed and cached tokens are equal.
    graph, middleware = scenario.outcomes[CTX_MEMORY], scenario.outcomes[CTX_MIDDLEWARE]
    assert isinstance(graph, cost_bench.SystemResult)
    assert isinstance(middleware, cost_bench.SystemResult)
    for role in ("main", "summary"):
        ours, theirs = graph.streams[role], middleware.streams[role]
        assert (theirs.calls, theirs.tokens, theirs.cached) == (
            ours.calls,
            ours.tokens,
            ours.cached,
        )
        assert theirs.sizes == ours.sizes, role
    assert middleware.breakdown == graph.breakdown
    assert middleware.record == graph.record and middleware.summary_text == graph.summary_text
    # The extraction prompts quote each message's id, which is random in both systems.
    memory = middleware.streams["memory"]
    assert memory.calls == graph.streams["memory"].calls >= 1
    assert memory.tokens == pytest.approx(graph.streams["memory"].tokens, rel=0.01)


def test_the_middleware_requests_are_the_graphs_byte_for_byte() -> None:
    session = order_session(16, SESSION_KINDS["orders"])
    sent: dict[str, list[tuple[list[str], str]]] = {}
    for name in (CTX_MEMORY, CTX_MIDDLEWARE):
        system = cost_systems.build_system(
            name, session, order_tools(session), user_facts(5), SMALL
        )
        for turn in session.turns:
            system.send(turn.text)
        main = system.models["main"]
        sent[name] = [
            ([message_text(m) for m in messages], schema_text(tools))
            for messages, tools in zip(main.requests, main.tool_requests, strict=True)
        ]
    graph, middleware = sent[CTX_MEMORY], sent[CTX_MIDDLEWARE]
    assert len(graph) > 2 * len(session.turns)  # the main model wrote summaries too
    # The tools in the graph's order (lookup_order, then read_history once there is an
    # archive), not create_agent's, which puts the middleware's first.
    assert any("read_history" in tools for _, tools in graph)
    assert middleware == graph


def test_the_report_and_json_carry_every_row(scenario: cost_bench.Scenario) -> None:
    config = BenchConfig(turns=TURNS, systems=MEASURED, sessions=("orders",), triggers=SMALL)
    text = report([scenario], config)
    for name in MEASURED:
        assert cost_systems.SYSTEMS[name] in text
    assert "billed input/turn ctxgraph-no-extraction / peer" in text
    assert "cached-prefix share (main) ctxgraph-memory" in text
    assert "cached share of summary calls ctxgraph-memory" in text
    assert "First main request of turn 20" in text
    assert "The summary record in that request of turn 20, by block" in text
    assert "Fidelity: not run" in text
    data = to_json([scenario], config)
    assert set(data["scenarios"][0]["systems"]) == set(MEASURED)
    assert parse_args(["--systems", CTX_MIDDLEWARE])[0].systems == (CTX_MIDDLEWARE,)
    figures = data["scenarios"][0]["systems"][CTX_MEMORY]
    assert figures["calls"]["main"] == 2 * TURNS
    assert figures["billed_per_turn"] > 0
    assert set(figures["summary_record_by_block"]) == set(RECORD_BLOCKS)
    assert figures["prefix_share_by_role"]["summary"] is not None


def test_missing_peers_are_reported_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    real = find_spec

    def hide(name: str, *args: object) -> object:
        return None if name in ("langmem", "deepagents") else real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(cost_systems, "find_spec", hide)
    config = BenchConfig(turns=3, systems=(CTX_NO_EXTRACTION, PEER_LANGMEM, DEEPAGENTS), facts=(0,))
    scenario = run_scenario(config, "orders", 0)
    assert isinstance(scenario.outcomes[CTX_NO_EXTRACTION], cost_bench.SystemResult)
    for name in (PEER_LANGMEM, DEEPAGENTS):
        assert isinstance(scenario.outcomes[name], cost_systems.NotInstalledError)
    text = report([scenario], config)
    assert "not installed (`pip install -c constraints.txt -e '.[bench]'`)" in text
    assert "bench/requirements-peers.txt" in text
    assert "ctxgraph-memory vs peer-langmem: not measured" in text


def test_sessions_are_deterministic_and_one_tool_per_turn() -> None:
    first = order_session(5, SESSION_KINDS["constraints"])
    again = order_session(5, SESSION_KINDS["constraints"])
    assert first == again
    assert all(turn.plan is not None and turn.plan.name == "lookup_order" for turn in first.turns)
    assert all("不要改收货地址" in turn.text for turn in first.turns)
    large = order_session(5, SESSION_KINDS["large-results"])
    assert min(count_text(text) for text in large.results.values()) >= 2900


def test_a_call_is_cached_against_the_same_models_previous_call() -> None:
    # ctxgraph's main model writes the summaries: a summary request that extends the main
    # request's prefix is cached against it, whatever the role; a compact one is not.
    main, timer = recording_model(summary_aware(lambda m: AIMessage("ok")), "main")
    system = System("x", lambda text: None, {"main": main}, [timer], "rules")
    prefix = [SystemMessage("rules " * 200), HumanMessage("第1个问题：订单 X1")]
    ask = HumanMessage("summarize", additional_kwargs={ORIGIN_KEY: SUMMARY_REQUEST_ORIGIN})
    main.invoke(prefix)
    main.invoke([*prefix, AIMessage("answer"), ask])
    compact = build_prompt(
        SummaryJob(None, [HumanMessage("第1个问题：订单 X1")], ""), max_tokens=500, max_chars=999
    )
    assert is_summary_call(compact) and is_summary_call([*prefix, ask])
    main.invoke(compact)
    streams = {role: Stream() for role in cost_bench.ROLES}
    cost_bench._drain(system, streams, BillCounter(), {})
    assert streams["main"].calls == 1 and streams["summary"].calls == 2
    shared = sum(count_text(message_text(m)) + 3 for m in prefix)
    assert streams["summary"].cached >= shared
    assert streams["summary"].share < 1.0  # the compact request shares nothing


def test_every_prompt_form_gets_the_same_prose() -> None:
    folded = [
        HumanMessage("第7个问题：请帮我查一下订单 X7 的物流状态，另外提醒我不要改收货地址。"),
        AIMessage("", tool_calls=[{"name": "lookup_order", "args": {"order_id": "X7"}, "id": "c"}]),
        ToolMessage("订单 X7：已签收。", tool_call_id="c"),
        AIMessage("X7 已签收。"),
    ]
    ours = build_prompt(SummaryJob(None, folded, "next"), max_tokens=500, max_chars=9999)
    xml = "".join(f'<message type="{m.type}">{m.content}</message>' for m in folded)
    theirs = [HumanMessage(f"Summarize.\n<messages>\n{xml}")]
    ask = HumanMessage("summarize", additional_kwargs={ORIGIN_KEY: SUMMARY_REQUEST_ORIGIN})
    shared = [SystemMessage("rules"), *folded, ask]
    texts = {shared_summary(folded_text(form)) for form in (ours, theirs, shared)}
    assert len(texts) == 1
    text = texts.pop()
    assert "X7" in text and "不要改收货地址" in text
    assert len(find_sections(text)) == 4
    assert 250 <= count_text(text) <= 400


@pytest.fixture(scope="module")
def short() -> cost_bench.Scenario:
    config = BenchConfig(
        turns=TURNS, systems=(CTX_NO_EXTRACTION, PEER), sessions=("short",), triggers=SMALL
    )
    return run_scenario(config, "short", 0)


def test_the_short_session_and_the_shared_prose(short: cost_bench.Scenario) -> None:
    session = order_session(TURNS, SESSION_KINDS["short"])
    assert all(
        "\n" not in result and count_text(result) < 30 for result in session.results.values()
    )
    assert session.turns[127 % TURNS].text.startswith(f"第{127 % TURNS + 1}个问题：")
    ours, peer = short.outcomes[CTX_NO_EXTRACTION], short.outcomes[PEER]
    assert isinstance(ours, cost_bench.SystemResult) and isinstance(peer, cost_bench.SystemResult)
    # ctxgraph's main model wrote the summaries (no summary model of its own).
    assert ours.streams["summary"].calls >= 1 and ours.per_turn("summary") > 0
    assert 0.0 <= ours.summary_share <= 1.0 and 0.0 <= peer.summary_share <= 1.0
    for result in (ours, peer):
        sections = find_sections(result.summary_text)
        assert len(sections) == 4, result.system
        assert "Each question named exactly one order" in sections["summary"]
        assert result.record["summary"] > 0 and result.record["next steps"] > 0
    # Same prose: the sections weigh alike; what ctxgraph adds is the ledger.
    for block in ("session intent", "summary", "artifacts", "next steps"):
        assert abs(ours.record[block] - peer.record[block]) <= 5, block
    assert ours.record["user constraints"] > 0 and peer.record["user constraints"] == 0
    assert peer.record["tool calls"] == 0
    assert 0 < ours.effective_per_turn(0.1) < ours.effective_per_turn(0.5) < ours.per_turn()
    assert prefix_target(short) == pytest.approx(
        0.95 if peer.prefix_share >= 0.9 else peer.prefix_share
    )
    text = report([short], BenchConfig(turns=TURNS, systems=(CTX_NO_EXTRACTION, PEER)))
    assert "| short | 0 | ctxgraph, memory extraction off |" in text
    assert "cached (summary)" in text


def test_record_blocks_split_at_the_headings() -> None:
    text = (
        '<conversation_summary version="2">\nintro\n\nSESSION INTENT\na\nSUMMARY\nb\n'
        "ARTIFACTS\nc\nNEXT STEPS\nd\n\nTOOL CALLS (recorded by code, authoritative):\n"
        "- lookup_order x3\nUSER CONSTRAINTS (verbatim):\n- 不要改收货地址\nIDENTIFIERS: X1, X2"
        "\n</conversation_summary>"
    )
    blocks = record_blocks(text, count_text)
    for name in ("frame", "session intent", "tool calls", "user constraints", "identifiers"):
        assert blocks[name] > 0, name
    assert blocks["user decisions"] == blocks["offloaded content"] == 0
