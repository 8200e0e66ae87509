"""The Store's optional vector index (an embedding model), configured from the environment."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from langgraph.store.postgres.base import PostgresIndexConfig

FACT_INDEX_FIELDS = ["content"]
"""The part of a stored fact that is embedded when the Store has a vector index."""

DEFAULT_DIMS = 1536
"""Vector size of OpenAI's ``text-embedding-3-small``."""


class EmbeddingConfigError(ValueError):
    """The embedding environment variables cannot work; the message says which and why."""


def embedding_index(environ: Mapping[str, str]) -> PostgresIndexConfig | None:
    """The Store ``index`` config for ``CTXGRAPH_EMBEDDING_MODEL``, or None when it is unset.

    The model is served by the same OpenAI-compatible endpoint as the chat models
    (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``); ``CTXGRAPH_EMBEDDING_DIMS`` gives its vector
    size; ``CTXGRAPH_REQUEST_TIMEOUT`` and ``CTXGRAPH_MAX_RETRIES`` apply as to the chat
    models. Inputs are not pre-counted with a tokenizer, so nothing but that endpoint is
    contacted.
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
    return {"dims": int(raw), "embed": embeddings, "fields": list(FACT_INDEX_FIELDS)}
