"""A thread's artifacts read back for display: offloaded user inputs, transcript texts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from langchain_core.messages import BaseMessage

from ctxgraph.nodes.offload.refs import OFFLOAD_KEY
from ctxgraph.store.artifacts import ArtifactError, ArtifactStore
from ctxgraph.store.artifacts.redaction import prior_hashes


def full_inputs(
    messages: Sequence[BaseMessage], artifacts: ArtifactStore | None
) -> tuple[list[BaseMessage], dict[str, str]]:
    """The messages with each offloaded user input's full text read back from its artifact.

    Also returns a note per such message id: that the text comes from the artifact (the
    model saw its head and tail), or that the artifact is missing or does not match, in
    which case the message is shown as the model saw it. Without ``artifacts``, the
    messages are returned as they are.
    """
    shown: list[BaseMessage] = []
    notes: dict[str, str] = {}
    if artifacts is None:
        return list(messages), notes
    for message in messages:
        offload = message.additional_kwargs.get(OFFLOAD_KEY)
        if message.type != "human" or not isinstance(offload, Mapping):
            shown.append(message)
            continue
        ref = str(offload.get("ref"))
        text, problem = artifact_text(artifacts, ref, offload.get("sha256"))
        if text is None:
            notes[str(message.id)] = (
                f"the full text of this input was offloaded to artifact {ref}, which {problem}; "
                "shown as the model saw it"
            )
            shown.append(message)
            continue
        notes[str(message.id)] = (
            f"full text from artifact {ref}; the model saw its beginning and end and the ref"
        )
        shown.append(message.model_copy(update={"content": text}))
    return shown, notes


def _redacted(artifacts: ArtifactStore, ref: str, sha256: str) -> bool:
    """Whether the artifact held content with ``sha256`` before a forget redacted it."""
    return sha256 in prior_hashes(artifacts.store, artifacts.thread_id, ref)


def artifact_text(artifacts: ArtifactStore, ref: str, sha256: object) -> tuple[str | None, str]:
    """The artifact's text, or None and what is wrong with it."""
    try:
        artifact = artifacts.get(ref)
        if artifact is None:
            return None, "is missing (evicted, or never stored)"
        if (
            isinstance(sha256, str)
            and sha256 != artifact.sha256
            and not _redacted(artifacts, ref, sha256)
        ):
            return None, "holds different content than this message recorded"
        return artifacts.read_text(ref), ""
    except ArtifactError as error:
        return None, f"cannot be read ({error})"
