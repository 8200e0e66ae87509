"""``ctxgraph memory list|search|forget|export|import|process``: inspect and manage memory."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ctxgraph.graph.cli.options import SEARCH_LIMITS, OptionError
from ctxgraph.graph.cli.text import plural
from ctxgraph.state.context import Context
from ctxgraph.state.settings import Settings
from ctxgraph.store.memory.bundle import (
    BundleError,
    ImportResult,
    export_bundle,
    import_bundle,
    verify_bundle,
)
from ctxgraph.store.memory.facts import Fact
from ctxgraph.store.memory.ranking import Ranker
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.memory.rules import DEFAULT_THRESHOLD
from ctxgraph.store.search.hybrid import semantic_enabled

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore

    from ctxgraph.nodes.memory.extract import MemoryExtractor
    from ctxgraph.nodes.memory.worker import Processed
    from ctxgraph.store.persistence.connection import Persistence

# The extraction worker (with the model layer) is imported by the functions that process
# extractions, so the read-only subcommands (list, search, export) do not load it.


class UnknownFactError(LookupError):
    """``memory forget`` named a key that no fact of the user (or project) has."""


def fact_line(fact: Fact) -> str:
    """One fact as a line: key, content, category, confidence, created date, correction mark."""
    line = (
        f"- {fact.key}: {fact.content} ({fact.category}, confidence {fact.confidence:.2f}, "
        f"created {fact.created_at.date().isoformat()})"
    )
    return f"{line} [correction]" if fact.is_correction else line


def _who(context: Context) -> str:
    return f"user {context.user_id} (agent {context.agent_name})"


logger = logging.getLogger("ctxgraph.cli.memory")
VALUES_LOGGER = "ctxgraph.memory.values"
"""The logger that reports each malformed stored item (``store.memory.facts``)."""


class _Mute(logging.Filter):
    """Drops every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        """False: the record is not shown."""
        return False


@contextmanager
def _per_item_warnings_muted() -> Iterator[None]:
    """Within the block, the per-item reports of malformed stored items are not shown."""
    mute = _Mute()
    values = logging.getLogger(VALUES_LOGGER)
    values.addFilter(mute)
    try:
        yield
    finally:
        values.removeFilter(mute)


def list_problems(store: BaseStore, context: Context, out: TextIO) -> int:
    """Print every malformed memory item of the user (namespace, key, problem); exit 0."""
    problems = MemoryRepository(store).problems(context)
    if not problems:
        out.write(f"No malformed memory items for {_who(context)}.\n")
        return 0
    out.write(f"Malformed memory items for {_who(context)} (skipped by every reader):\n")
    out.write("".join(f"- {'/'.join(p.namespace)} {p.key}: {p.problem}\n" for p in problems))
    return 0


def list_memory(store: BaseStore, context: Context, out: TextIO, *, problems: bool = False) -> int:
    """Print the user's facts for this agent, then the project's facts under a heading.

    Malformed items are skipped, with one warning saying how many; ``problems`` prints
    them instead (:func:`list_problems`).
    """
    if problems:
        return list_problems(store, context, out)
    repository = MemoryRepository(store)
    # One summary line instead of a warning per malformed item.
    with _per_item_warnings_muted():
        facts = repository.list_user_facts(context)
        shared = repository.list_project_facts(context)
        skipped = len(repository.problems(context))
    if skipped:
        logger.warning(
            "skipped %s; see them with `ctxgraph memory list --problems`",
            plural(skipped, "malformed memory item"),
        )
    if facts:
        out.write(f"Facts about {_who(context)}:\n")
        out.write("".join(fact_line(fact) + "\n" for fact in facts))
    else:
        out.write(f"No facts remembered about {_who(context)}.\n")
    if context.project_id is not None:
        out.write(f"Project {context.project_id} facts:\n")
        out.write("".join(fact_line(fact) + "\n" for fact in shared) or "(none)\n")
    return 0


def load_ranker(spec: str) -> Ranker:
    """The ranker ``memory search --ranker module:attribute`` names, imported.

    Raises ``OptionError`` (one line, exit status 2) when ``spec`` is not of that form,
    the module cannot be imported, it has no such attribute, or the object is not a
    ``Ranker`` (a callable ``(sources, top_k, now, age_from, *, query) -> list[Fact]``).
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise OptionError(
            f"--ranker must be module:attribute, e.g. my_package.ranking:by_content; got {spec!r}"
        )
    try:
        module = import_module(module_name)
    except Exception as error:  # any failure of the import is the option's problem
        raise OptionError(
            f"--ranker {spec}: cannot import {module_name!r} ({type(error).__name__}: {error})"
        ) from error
    found: object = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise OptionError(f"--ranker {spec}: {module_name} has no attribute {attribute!r}")
        found = getattr(found, part)
    if not isinstance(found, Ranker):
        raise OptionError(
            f"--ranker {spec}: {attribute} is a {type(found).__name__}, not a ranker (a "
            "callable (sources, top_k, now, age_from, *, query) -> list[Fact], see "
            "ctxgraph.store.memory.ranking.Ranker)"
        )
    return found


def search_memory(
    store: BaseStore,
    context: Context,
    query: str,
    limit: int,
    out: TextIO,
    settings: Settings | None = None,
    ranker: Ranker | str | None = None,
) -> int:
    """Print the facts ``memory_search`` would return for ``query``, best first, with scores.

    ``settings`` are the ones the CLI builds its graph with (``Settings.from_env``); their
    ``memory_age_from`` ages the facts as the graph's ``memory_search`` tool does.
    ``ranker`` orders them, as in a graph with ``MemoryPart(ranker=...)``; a string is the
    ``--ranker module:attribute`` option (see :func:`load_ranker`).
    """
    chosen = load_ranker(ranker) if isinstance(ranker, str) else ranker
    low, high = SEARCH_LIMITS
    repository = MemoryRepository(store, ranker=chosen, settings=settings or Settings())
    facts = repository.search(context, query, top_k=max(low, min(int(limit), high)))
    if not facts:
        out.write(f"No remembered fact of {_who(context)} matches {query!r}.\n")
        return 0
    out.write("".join(f"{fact.score:7.3f} {fact_line(fact)}\n" for fact in facts))
    return 0


def reindex_memory(store: BaseStore, context: Context, out: TextIO) -> int:
    """Embed the facts stored without a vector; print how many. 1 without a vector index."""
    if not semantic_enabled(store):
        out.write(
            "No embedding model is configured (CTXGRAPH_EMBEDDING_MODEL): facts have no "
            "vectors to make.\n"
        )
        return 1
    count = MemoryRepository(store).reindex(context)
    out.write(f"Embedded {plural(count, 'fact')} of {_who(context)} that had no vector.\n")
    return 0


def forget_memory(
    persistence: Persistence, context: Context, key: str, out: TextIO, *, wait: float
) -> int:
    """Forget the fact ``key``: a user's fact everywhere, else the project's fact.

    A fact of the user (for the context's agent) is forgotten as ``ctxgraph forget --fact``
    does: its text goes from every thread of the user too, and the receipt is printed. A
    project fact is shared, so only the fact itself is deleted. Raises
    ``UnknownFactError`` when neither holds ``key``.
    """
    from functools import partial

    from ctxgraph.store.forget import forget
    from ctxgraph.store.namespaces import user_facts
    from ctxgraph.store.persistence.thread_lock import thread_lock

    store = persistence.store
    if store.get(user_facts(context.user_id, context.agent_name), key) is not None:
        receipt = forget(
            store,
            persistence.checkpointer,
            context.user_id,
            fact=key,
            agent_name=context.agent_name,
            lock=partial(thread_lock, persistence, wait=wait),
        )
        out.write(f"forgot {key}\n")
        out.writelines(line + "\n" for line in receipt.lines())
        return 0
    if not MemoryRepository(store).forget(context, key):
        raise UnknownFactError(f"no fact with key {key} for user {context.user_id}")
    out.write(f"forgot {key}\n")
    return 0


def export_memory(
    store: BaseStore, context: Context, out: TextIO, *, path: str | None = None
) -> int:
    """Write the memory bundle of the user, agent and project (``store.memory.bundle``).

    The bundle goes to ``out``, or to the file ``path`` (then ``out`` gets one line saying
    what was written). Malformed stored items are left out, with one warning saying how
    many. Raises ``OptionError`` when ``path`` cannot be written.
    """
    with _per_item_warnings_muted():
        bundle = export_bundle(store, context)
        skipped = len(MemoryRepository(store).problems(context))
    if skipped:
        logger.warning(
            "left %s out of the bundle; see them with `ctxgraph memory list --problems`",
            plural(skipped, "malformed memory item"),
        )
    text = json.dumps(bundle, ensure_ascii=False, indent=2) + "\n"
    if path is None:
        out.write(text)
        return 0
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as error:
        raise OptionError(f"--out {path}: cannot write the bundle ({error.strerror})") from error
    profile = " and the profile" if bundle["profile"] is not None else ""
    out.write(
        f"exported {plural(len(bundle['facts']), 'fact')}{profile} of {_who(context)} to {path}\n"
    )
    return 0


def read_bundle(path: str, stdin: TextIO) -> dict[str, Any]:
    """The verified bundle in the file ``path`` (``-`` is ``stdin``), before any database use.

    Raises ``OptionError`` (one line, exit status 2) when the file cannot be read, is not
    JSON, or fails ``verify_bundle`` (its message names the first problem).
    """
    try:
        text = stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
        raise OptionError(f"memory import {path}: cannot read the bundle ({reason})") from error
    try:
        bundle = json.loads(text)
    except json.JSONDecodeError as error:
        raise OptionError(f"memory import {path}: not JSON ({error})") from error
    try:
        verify_bundle(bundle)
    except BundleError as error:
        raise OptionError(f"memory import {path}: refused, nothing written: {error}") from error
    assert isinstance(bundle, dict)
    return bundle


def report_import(result: ImportResult, context: Context, out: TextIO) -> None:
    """One line per refused or conflicting item, then the counts."""
    for label, reason in result.refused:
        out.write(f"refused {label}: {reason}\n")
    for label, reason in result.conflicts:
        out.write(f"conflict {label}: {reason}\n")
    verb = "dry run: would import" if result.dry_run else "imported"
    out.write(
        f"{verb} {plural(len(result.imported), 'item')} into "
        f"{_who(context)}; unchanged {len(result.unchanged)}, refused {len(result.refused)}, "
        f"conflicts {len(result.conflicts)}\n"
    )


def import_memory(
    store: BaseStore,
    bundle: dict[str, Any],
    context: Context,
    out: TextIO,
    *,
    dry_run: bool = False,
    threshold: float = DEFAULT_THRESHOLD,
) -> int:
    """Import a bundle (:func:`read_bundle`) into the memory of ``context``; print the counts.

    ``context`` names the user, the agent of the user facts and the project of the project
    facts. Exit status 0, also when facts were refused or in conflict (each is listed).
    """
    result = import_bundle(
        store,
        bundle,
        context.user_id,
        agent_name=context.agent_name,
        project_id=context.project_id,
        dry_run=dry_run,
        threshold=threshold,
    )
    report_import(result, context, out)
    return 0


def report_processed(processed: Processed, out: TextIO) -> None:
    """One line per processed thread with the keys it stored, then the totals."""
    for item, result in processed:
        keys = ", ".join(fact.key for fact in result.stored) or "nothing"
        line = f"thread {item.thread_id} ({_who(item.context)}): stored {keys}"
        if result.profile_sections:
            line += f"; profile: {', '.join(result.profile_sections)}"
        if result.rejected:
            line += f"; rejected {len(result.rejected)}"
        out.write(line + "\n")
    stored = sum(len(result.stored) for _, result in processed)
    out.write(
        f"processed {plural(len(processed), 'pending extraction')}, "
        f"stored {plural(stored, 'fact')}\n"
    )


def process_memory(
    store: BaseStore,
    extractor: MemoryExtractor,
    settings: Settings,
    out: TextIO,
    *,
    force: bool = True,
) -> int:
    """Run the pending extractions now (all of them when ``force``); 1 if some stay queued."""
    from ctxgraph.nodes.memory.worker import process_pending
    from ctxgraph.store.memory.queue import MemoryQueue

    processed = process_pending(
        store,
        extractor,
        threshold=settings.confidence_threshold,
        quiet_seconds=0.0 if force else settings.memory_quiet_seconds,
    )
    report_processed(processed, out)
    left = MemoryQueue(store).due(quiet_seconds=0.0 if force else settings.memory_quiet_seconds)
    if left:
        threads = ", ".join(item.thread_id for item in left)
        stay = "stays" if len(left) == 1 else "stay"
        out.write(
            f"{plural(len(left), 'pending extraction')} {stay} queued (see errors above): "
            f"{threads}\n"
        )
        return 1
    return 0


def process_due_at_start(
    store: BaseStore, extractor: MemoryExtractor, settings: Settings, out: TextIO
) -> Processed:
    """Before ``chat``/``run``: finish extractions a previous process left queued, if due."""
    from ctxgraph.nodes.memory.worker import process_pending

    processed = process_pending(
        store,
        extractor,
        threshold=settings.confidence_threshold,
        quiet_seconds=settings.memory_quiet_seconds,
    )
    if processed:
        stored = sum(len(result.stored) for _, result in processed)
        out.write(
            f"note: processed {plural(len(processed), 'pending memory extraction')} "
            f"left by an earlier run, stored {plural(stored, 'fact')}\n"
        )
    return processed
