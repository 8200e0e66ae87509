"""With the embedding endpoint down, memory keeps working: lexical search, facts kept.

The endpoint is a real ``OpenAIEmbeddings`` client pointed at a port nothing listens on,
over the embedded Postgres. A search falls back to lexical ranking with one warning; a
fact written meanwhile is stored without a vector and embedded once the endpoint is back,
by the next search that meets it or by ``ctxgraph memory reindex``.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from langchain_core.embeddings import Embeddings
from langchain_openai import OpenAIEmbeddings
from pydantic import SecretStr

from ctxgraph.graph.cli.main import main
from ctxgraph.state import Context
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.namespaces import user_facts
from ctxgraph.store.persistence.connection import open_async_persistence, open_persistence
from ctxgraph.store.search.hybrid import clear_embedding_cache
from ctxgraph.store.search.vectors import unembedded

QUERY = "alpha beta"


def vector(text: str) -> list[float]:
    return [1.0, len(text) % 5 / 5, text.count("a") / 10, text.count("e") / 10]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def client(port: int) -> OpenAIEmbeddings:
    return OpenAIEmbeddings(
        model="multilingual-e5-small",
        base_url=f"http://127.0.0.1:{port}/v1",
        api_key=SecretStr("not-needed"),
        check_embedding_ctx_length=False,
        max_retries=0,
        timeout=5,
    )


def config(embeddings: Embeddings) -> Any:
    return {"dims": 4, "embed": embeddings, "fields": ["content"]}


class _Handler(BaseHTTPRequestHandler):
    """An OpenAI-compatible embeddings endpoint serving :func:`vector`."""

    texts: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        texts = [body["input"]] if isinstance(body["input"], str) else body["input"]
        _Handler.texts.extend(texts)
        data = [
            {"object": "embedding", "index": i, "embedding": vector(t)} for i, t in enumerate(texts)
        ]
        payload = json.dumps({"object": "list", "data": data, "model": "m", "usage": {}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    _Handler.texts.clear()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
def fresh_embedding_cache() -> None:
    """Each test starts without cached embeddings."""
    clear_embedding_cache()


def warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING and "ctxgraph" in r.name]


def test_endpoint_down_search_is_lexical_and_facts_are_kept(
    database_uri: str, caplog: pytest.LogCaptureFixture, endpoint: int
) -> None:
    ctx = Context(user_id=f"down-{uuid.uuid4().hex[:10]}")
    namespace = user_facts(ctx.user_id, ctx.agent_name)
    with open_persistence(database_uri, index=config(client(closed_port()))) as down:
        repo = MemoryRepository(down.store)
        with caplog.at_level(logging.WARNING):
            fact = repo.add_fact(ctx, "Alpha beta notes.", key="kept")
        assert fact.key == "kept"
        [record] = warnings(caplog)
        assert "stored without a vector" in record.getMessage()
        assert [f.key for f in repo.list_user_facts(ctx)] == ["kept"]
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert [f.key for f in repo.search(ctx, QUERY)] == ["kept"]
        [record] = warnings(caplog)  # exactly one line for the search
        assert "ranking this search lexically" in record.getMessage()
        repo.add_fact(ctx, "Gamma delta ideas.", key="later")
        assert unembedded(down.store, namespace, ["kept", "later"]) == ["kept", "later"]

    with open_persistence(database_uri, index=config(client(endpoint))) as up:
        repo = MemoryRepository(up.store)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert next(f.key for f in repo.search(ctx, QUERY)) == "kept"
        assert warnings(caplog) == []
        # The search met "kept" (a BM25 match) and embedded it, with its query: 2 texts.
        assert _Handler.texts == [QUERY, "Alpha beta notes."]
        assert unembedded(up.store, namespace, ["kept", "later"]) == ["later"]
        assert repo.reindex(ctx) == 1  # the fact no search met
        assert repo.reindex(ctx) == 0
        assert unembedded(up.store, namespace, ["kept", "later"]) == []


async def test_endpoint_down_async(database_uri: str, caplog: pytest.LogCaptureFixture) -> None:
    ctx = Context(user_id=f"down-{uuid.uuid4().hex[:10]}")
    async with open_async_persistence(database_uri, index=config(client(closed_port()))) as down:
        repo = MemoryRepository(down.store)
        with caplog.at_level(logging.WARNING):
            await repo.aadd_fact(ctx, "Alpha beta notes.", key="kept")
            assert [f.key for f in await repo.asearch(ctx, QUERY)] == ["kept"]
        assert len(warnings(caplog)) == 2  # one for the write, one for the search


def test_cli_reindex_embeds_what_the_outage_left(
    database_uri: str,
    endpoint: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ctx = Context(user_id=f"down-{uuid.uuid4().hex[:10]}")
    with open_persistence(database_uri, index=config(client(closed_port()))) as down:
        MemoryRepository(down.store).add_fact(ctx, "Alpha beta notes.", key="kept")
    monkeypatch.setenv("DATABASE_URI", database_uri)
    monkeypatch.setenv("CTXGRAPH_EMBEDDING_MODEL", "multilingual-e5-small")
    monkeypatch.setenv("CTXGRAPH_EMBEDDING_DIMS", "4")
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{endpoint}/v1")
    assert main(["memory", "reindex", "--user", ctx.user_id]) == 0
    assert f"Embedded 1 fact of user {ctx.user_id}" in capsys.readouterr().out
    assert _Handler.texts == ["Alpha beta notes."]
    assert main(["memory", "reindex", "--user", ctx.user_id]) == 0
    assert "Embedded 0 facts" in capsys.readouterr().out


class Flaky(Embeddings):
    """Fails while ``down``; otherwise :func:`vector`."""

    def __init__(self) -> None:
        self.down = False

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.down:
            raise ConnectionError("connection refused")
        return [vector(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        if self.down:
            raise ConnectionError("connection refused")
        return vector(text)


def test_in_memory_store_keeps_a_fact_and_drops_its_stale_vector(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from langgraph.store.memory import InMemoryStore

    embeddings = Flaky()
    store = InMemoryStore(index=config(embeddings))
    repo = MemoryRepository(store)
    ctx = Context(user_id=f"down-{uuid.uuid4().hex[:10]}")
    namespace = user_facts(ctx.user_id, ctx.agent_name)
    repo.add_fact(ctx, "Gamma notes.", key="kept")
    embeddings.down = True
    with caplog.at_level(logging.WARNING):
        repo.add_fact(ctx, "Alpha beta notes.", key="kept")  # new content, no vector
        assert [f.key for f in repo.search(ctx, QUERY)] == ["kept"]
    assert len(warnings(caplog)) == 2
    assert [f.content for f in repo.list_user_facts(ctx)] == ["Alpha beta notes."]
    embeddings.down = False
    assert unembedded(store, namespace, ["kept"]) == ["kept"]  # the old vector is gone
    assert repo.reindex(ctx) == 1
    assert unembedded(store, namespace, ["kept"]) == []
