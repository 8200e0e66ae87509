"""The Store's optional vector index (an embedding model), configured from the environment."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from langchain_core.embeddings import Embeddings

if TYPE_CHECKING:
    from langgraph.store.postgres.base import PostgresIndexConfig

__all__ = [
    "DEFAULT_DIMS",
    "DOCUMENT_PREFIX_ENV",
    "FACT_INDEX_FIELDS",
    "QUERY_PREFIX_ENV",
    "EmbeddingConfigError",
    "InstructedEmbeddings",
    "embedding_index",
]

QUERY_PREFIX_ENV = "CTXGRAPH_EMBEDDING_QUERY_PREFIX"
DOCUMENT_PREFIX_ENV = "CTXGRAPH_EMBEDDING_DOCUMENT_PREFIX"

FACT_INDEX_FIELDS = ["content"]
"""The part of a stored fact that is embedded when the Store has a vector index."""

DEFAULT_DIMS = 1536
"""Vector size of OpenAI's ``text-embedding-3-small``."""


class EmbeddingConfigError(ValueError):
    """The embedding environment variables cannot work; the message says which and why."""


class InstructedEmbeddings(Embeddings):
    """An embedder whose queries and documents get their own instruction prefix.

    Asymmetric models want one (e5: ``"query: "`` / ``"passage: "``); whether it helps
    depends on the data, so it is a setting. Give it in code as the Store's embedder
    (``index={"embed": InstructedEmbeddings(inner, query_prefix="query: ", ...)}``) or
    through ``CTXGRAPH_EMBEDDING_QUERY_PREFIX`` / ``CTXGRAPH_EMBEDDING_DOCUMENT_PREFIX``.
    The Store embeds facts with ``embed_documents``; a memory search embeds its query with
    ``embed_query``, on every Store.
    """

    def __init__(
        self, inner: Embeddings, *, query_prefix: str = "", document_prefix: str = ""
    ) -> None:
        self.inner = inner
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """The inner embedder's vectors of ``texts``, each after the document prefix."""
        return self.inner.embed_documents([self.document_prefix + text for text in texts])

    def embed_query(self, text: str) -> list[float]:
        """The inner embedder's vector of ``text`` after the query prefix."""
        return self.inner.embed_query(self.query_prefix + text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """Async :meth:`embed_documents`."""
        return await self.inner.aembed_documents([self.document_prefix + t for t in texts])

    async def aembed_query(self, text: str) -> list[float]:
        """Async :meth:`embed_query`."""
        return await self.inner.aembed_query(self.query_prefix + text)

    def __repr__(self) -> str:
        return (
            f"InstructedEmbeddings({self.inner!r}, query_prefix={self.query_prefix!r}, "
            f"document_prefix={self.document_prefix!r})"
        )


def embedding_index(
    environ: Mapping[str, str],
    *,
    query_prefix: str | None = None,
    document_prefix: str | None = None,
) -> PostgresIndexConfig | None:
    """The Store ``index`` config for ``CTXGRAPH_EMBEDDING_MODEL``, or None when it is unset.

    The model is served by the same OpenAI-compatible endpoint as the chat models
    (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``); ``CTXGRAPH_EMBEDDING_DIMS`` gives its vector
    size; ``CTXGRAPH_REQUEST_TIMEOUT`` and ``CTXGRAPH_MAX_RETRIES`` apply as to the chat
    models. Inputs are not pre-counted with a tokenizer, so nothing but that endpoint is
    contacted. ``query_prefix`` / ``document_prefix`` (default:
    ``CTXGRAPH_EMBEDDING_QUERY_PREFIX`` / ``CTXGRAPH_EMBEDDING_DOCUMENT_PREFIX``, taken
    verbatim, trailing space included) wrap the model in :class:`InstructedEmbeddings`.
    """
    model = environ.get("CTXGRAPH_EMBEDDING_MODEL", "").strip()
    if not model:
        return None
    # Imported here: the model settings (and LangChain's model classes) are only needed
    # when an embedding model is set, not by every command that opens the database.
    from ctxgraph.state.models import (
        OPENAI_BASE_URL,
        is_local_endpoint,
        missing_key_message,
        request_limits,
    )

    raw = environ.get("CTXGRAPH_EMBEDDING_DIMS", "").strip() or str(DEFAULT_DIMS)
    if not raw.isdigit() or int(raw) < 1:
        raise EmbeddingConfigError(
            f"CTXGRAPH_EMBEDDING_DIMS must be a whole number of dimensions (for example "
            f"{DEFAULT_DIMS}), got {raw!r}"
        )
    base_url = environ.get("OPENAI_BASE_URL", "").strip()
    api_key = environ.get("OPENAI_API_KEY", "").strip()
    if not api_key and not is_local_endpoint(base_url):
        raise EmbeddingConfigError(
            f"CTXGRAPH_EMBEDDING_MODEL={model}: {missing_key_message(base_url or None)}"
        )
    timeout, retries = request_limits(environ)  # the same limits as the chat models
    # Imported here: the client library is only needed when an embedding model is set.
    from langchain_openai import OpenAIEmbeddings
    from pydantic import SecretStr

    embeddings = OpenAIEmbeddings(
        model=model,
        # Explicit, so the client does not fall back to variables outside ``environ``.
        base_url=base_url or OPENAI_BASE_URL,
        # Local OpenAI-compatible servers usually accept any key; the client insists on one.
        api_key=SecretStr(api_key or "not-needed"),
        check_embedding_ctx_length=False,
        timeout=timeout,
        max_retries=retries,
    )
    queries = environ.get(QUERY_PREFIX_ENV, "") if query_prefix is None else query_prefix
    documents = environ.get(DOCUMENT_PREFIX_ENV, "") if document_prefix is None else document_prefix
    embed: Embeddings = embeddings
    if queries or documents:
        embed = InstructedEmbeddings(embeddings, query_prefix=queries, document_prefix=documents)
    return {"dims": int(raw), "embed": embed, "fields": list(FACT_INDEX_FIELDS)}
