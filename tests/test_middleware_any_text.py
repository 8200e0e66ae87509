"""Any text on the middleware path: NUL and lone surrogates never break a thread or get lost.

``create_agent`` saves a run's input before any middleware runs, so ctxgraph cannot refuse
such text there (``checked_agent`` can, before anything is saved); what ctxgraph writes to
the Store is encoded instead (``store.text_codec``). Built as ``examples/create_agent``
builds an agent, on the embedded Postgres.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from ctxgraph.graph import wait_for_memory
from ctxgraph.graph.cli.main import main
from ctxgraph.middleware import ctxgraph_middleware
from ctxgraph.state import Context, Models, Settings
from ctxgraph.state.scripted_model import ScriptedChatModel
from ctxgraph.store.artifacts import ArtifactStore
from ctxgraph.store.memory.bundle import export_bundle, import_bundle
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.persistence.archive import ThreadArchive, record_messages, verify_thread
from ctxgraph.store.persistence.connection import Persistence
from ctxgraph.store.text_codec import MARKER, decode_text, decoded, encode_text, encoded
from tests.support.scripted import demo_summarizer

USER = "any-text"
NUL = "My badge code is A\x00B-7."
SURROGATE = "My locker tag reads Z\ud800Q."
MARKED = "My token is \ufdd0fdd0 exactly."
"""The codec's marker in a user's text: escaped like NUL, read back as written."""
QUOTES = {NUL: "badge_code", SURROGATE: "locker_tag", MARKED: "token_text"}


def memory_reply(messages: list[BaseMessage]) -> AIMessage:
    """A fact, quoting the user exactly, for each statement in the extraction prompt."""
    prompt = str(messages[-1].content)
    facts = [
        {
            "key": key,
            "content": f"The user said: {quote}",
            "category": "context",
            "confidence": 0.95,
            "scope": "user",
            "durability": "durable",
            "authority": "descriptive",
            "evidence_message_id": f"h-{key}",
            "evidence_text": quote,
        }
        for quote, key in QUOTES.items()
        if quote in prompt
    ]
    args = {"facts": facts, "profile_updates": []}
    return AIMessage(content="", tool_calls=[{"name": "MemoryUpdate", "args": args, "id": "m"}])


def make_agent(persistence: Persistence, settings: Settings) -> Any:
    """``create_agent`` + ``ctxgraph_middleware``, as ``examples/create_agent`` builds it."""
    model = ScriptedChatModel(responder=lambda messages: AIMessage("Noted."))
    models = Models(
        main=model, summary=demo_summarizer(), memory=ScriptedChatModel(responder=memory_reply)
    )
    return create_agent(
        model,
        [],
        middleware=ctxgraph_middleware(models=models, settings=settings),
        checkpointer=persistence.checkpointer,
        store=persistence.store,
        context_schema=Context,
    )


def ask(agent: Any, thread_id: str, text: str, message_id: str) -> list[BaseMessage]:
    config = {"configurable": {"thread_id": thread_id}}
    message = HumanMessage(text, id=message_id)
    result = agent.invoke({"messages": [message]}, config, context=Context(user_id=USER))
    return list(result["messages"])


def test_a_thread_with_nul_and_a_lone_surrogate_answers_and_keeps_everything(
    persistence: Persistence,
    thread_id: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = Settings(trigger_messages=6, keep_messages=2, memory_extraction="inline")
    agent = make_agent(persistence, settings)
    for quote, key in QUOTES.items():
        ask(agent, thread_id, quote, f"h-{key}")
    for n in range(15):
        answer = ask(agent, thread_id, f"Turn {n}: anything new?", f"t-{n}")[-1]
        assert isinstance(answer, AIMessage) and answer.content == "Noted."

    # Compactions folded the statements into the archive, read back exactly.
    state = agent.get_state({"configurable": {"thread_id": thread_id}}).values
    assert state["compaction"]["version"] >= 2
    records = ThreadArchive(persistence.store, thread_id).records()
    archived = {m.id: m.content for r in records for m in record_messages(r)}
    assert archived["h-badge_code"] == NUL
    assert archived["h-token_text"] == MARKED
    # LangGraph's checkpointer saves a lone surrogate in a message as "?" (its serializer
    # replaces surrogates); the archive keeps the message as the thread kept it.
    assert archived["h-locker_tag"] in (SURROGATE, SURROGATE.replace("\ud800", "?"))

    # Extraction ran in the turn itself: each fact's quote is the user's exact text.
    listed = MemoryRepository(persistence.store).list_facts(Context(user_id=USER))
    facts = {f.key: f for f in listed}
    for quote, key in QUOTES.items():
        assert facts[key].evidence == quote
        assert facts[key].content == f"The user said: {quote}"

    # A view of those facts is kept in the checkpoint, so it shows them with U+FFFD.
    ask(agent, thread_id, "What was my badge code, locker tag and token?", "t-view")
    view = agent.get_state({"configurable": {"thread_id": thread_id}}).values["memory_view"]
    assert "A\ufffdB-7" in view and "Z\ufffdQ" in view and "\x00" not in view

    # The archive verifies, by function and by the command line.
    state = agent.get_state({"configurable": {"thread_id": thread_id}}).values
    assert verify_thread(persistence.store, thread_id, state["compaction"]).ok
    monkeypatch.setenv("DATABASE_URI", persistence.uri)
    assert main(["threads", "verify", thread_id, "--user", USER]) == 0
    assert "intact" in capsys.readouterr().out


def test_background_extraction_and_offloaded_inputs_keep_any_text(
    persistence: Persistence, thread_id: str
) -> None:
    pad = " The rest is filler for the offload threshold." * 120
    settings = Settings(trigger_messages=6, keep_messages=2, offload_input_tokens=100)
    agent = make_agent(persistence, settings)  # memory extracted in the background
    texts = {key: quote + pad for quote, key in QUOTES.items()}
    for key, text in texts.items():
        ask(agent, thread_id, text, f"h-{key}")
    answer = ask(agent, thread_id, "Still there?", "t-0")[-1]
    assert isinstance(answer, AIMessage) and answer.content == "Noted."
    assert wait_for_memory(30) == 0

    # Each long input was offloaded in its own turn, so its artifact holds it exactly.
    artifacts = ArtifactStore(persistence.store, thread_id)
    stored = {artifacts.read_text(artifact.ref) for artifact in artifacts.list()}
    assert set(texts.values()) <= stored
    facts = MemoryRepository(persistence.store).list_facts(Context(user_id=USER))
    assert {f.evidence for f in facts} == set(QUOTES)


def test_direct_facts_and_bundles_keep_any_text(persistence: Persistence, thread_id: str) -> None:
    repository = MemoryRepository(persistence.store)
    writer, reader = Context(user_id=f"{thread_id}-a"), Context(user_id=f"{thread_id}-b")
    for quote, key in QUOTES.items():
        repository.add_fact(writer, quote, key=key, evidence=quote)
    bundle = export_bundle(persistence.store, writer)
    assert len(import_bundle(persistence.store, bundle, reader.user_id).imported) == 3
    for context in (writer, reader):
        facts = {f.key: f for f in repository.list_facts(context)}
        assert {key: facts[key].content for key in QUOTES.values()} == {
            key: quote for quote, key in QUOTES.items()
        }
        assert all(facts[key].evidence == quote for quote, key in QUOTES.items())


ALPHABET = ["a", "é", " ", "\x00", "\ud800", "\udfff", MARKER, "0", "f", "\U0001f600", "\n"]


def random_text(chance: random.Random) -> str:
    return "".join(chance.choice(ALPHABET) for _ in range(chance.randrange(12)))


def test_the_codec_round_trips_any_text_and_keeps_clean_text() -> None:
    chance = random.Random(43)
    for _ in range(5_000):
        text = random_text(chance)
        stored = encode_text(text)
        assert decode_text(stored) == text
        assert "\x00" not in stored and not any(0xD800 <= ord(c) <= 0xDFFF for c in stored)
    for clean in ["", "plain", "é 😀", "0000", "fdd0"]:
        assert encode_text(clean) is clean and decode_text(clean) is clean
    value = {"k\x00": ["a\ud800", ("b", 1), {"c": None}], "clean": "x"}
    assert decoded(encoded(value)) == value
    clean_value = {"a": ["b", {"c": 1}]}
    assert encoded(clean_value) is clean_value


def test_postgres_keeps_every_encoded_text(persistence: Persistence, thread_id: str) -> None:
    chance = random.Random(7)
    texts = [random_text(chance) for _ in range(200)]
    persistence.store.put(("codec", thread_id), "k", encoded({"texts": texts}), index=False)
    item = persistence.store.get(("codec", thread_id), "k")
    assert item is not None and decoded(item.value) == {"texts": texts}
