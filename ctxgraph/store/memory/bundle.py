"""Memory bundles: export a user's facts and profile with digests, verify and import them.

A bundle is JSON: ``format`` (``BUNDLE_FORMAT``), ``schema_version`` (``SCHEMA_VERSION``),
``exported_at``, ``user_id``, ``agent_name``, ``project_id`` (or null), ``facts`` (each
``{"scope", "key", "value", "sha256"}``, the value as the Store keeps it: the fields
``parse_fact`` reads, text encoded by ``store.text_codec``),
``profile`` (``{"value", "sha256"}`` or null) and ``bundle_sha256``. Every digest is the
SHA-256 of canonical JSON (:func:`canonical_digest`): a fact's over its scope, key and
value, the profile's over its value, the bundle's over everything but ``bundle_sha256``.

Import rules (:func:`import_bundle`):

- Every digest and every fact is checked first (:func:`verify_bundle`); one bad digest,
  an unknown schema version or a malformed fact refuses the whole bundle, nothing written.
- The acceptance rules still hold: a fact under the confidence threshold, of a category the
  gate never stores, claiming ``"extraction"`` without the evidence and source thread
  extraction records, with a key that is not snake_case, or with empty content is
  *refused* (not written). Whether a fact was transactional or temporary is not in
  a stored value; the gate refused those before they were ever stored.
- Every fact written is *unverified*: ``provenance="import"``, with the provenance it had
  in ``imported["from_provenance"]`` (kept through re-imports), the bundle and fact digests
  and the import time. Its content, category, confidence, times, evidence, history and
  correction flag are the bundle's, so it ranks exactly as it did.
- A key already stored with the same content (ignoring case and whitespace) is
  *unchanged*: the stored fact is kept as it is and nothing is written, so importing a
  bundle twice writes nothing the second time. A key stored with other content is a
  *conflict*: the stored fact is kept and reported (``ctxgraph memory forget`` it, then
  import again, to take the bundle's). The profile follows the same rules as a whole.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypedDict, Unpack, get_args

from langgraph.store.base import BaseStore, GetOp, Item, PutOp

from ctxgraph.state.context import Context
from ctxgraph.state.sans_io import Flow, arun, io, run
from ctxgraph.store.memory.exchange import BATCH
from ctxgraph.store.memory.facts import (
    PROVENANCES,
    Fact,
    FactScope,
    Problem,
    Provenance,
    parse_fact,
    parse_profile,
)
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.memory.rules import DEFAULT_THRESHOLD, Category, normalize_text, slug_key
from ctxgraph.store.memory.writes import PROFILE_KEY, PROFILE_SECTIONS, FactWrite, utc
from ctxgraph.store.namespaces import project_facts, user_facts, user_profile
from ctxgraph.store.search.vectors import aput_facts, put_facts
from ctxgraph.store.text_codec import encoded

__all__ = [
    "BUNDLE_FORMAT",
    "SCHEMA_VERSION",
    "BundleError",
    "ImportOptions",
    "ImportResult",
    "aexport_bundle",
    "aimport_bundle",
    "canonical_digest",
    "export_bundle",
    "fact_digest",
    "import_bundle",
    "verify_bundle",
]

BUNDLE_FORMAT = "ctxgraph.memory"
"""The ``format`` of every memory bundle."""

SCHEMA_VERSION = 1
"""The bundle schema this ctxgraph writes and reads."""

FACT_FIELDS = ("scope", "key", "value", "sha256")
"""The fields of one fact entry of a bundle."""

CATEGORIES: tuple[str, ...] = get_args(Category)

Outcome = Literal["imported", "unchanged", "refused", "conflict"]


class BundleError(ValueError):
    """A memory bundle that cannot be imported; the message names the first problem."""


def canonical_digest(value: object) -> str:
    """SHA-256 (hex) of ``value`` as canonical JSON: sorted keys, no spaces, UTF-8 text."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def fact_digest(scope: str, key: str, value: object) -> str:
    """The ``sha256`` of one fact entry: over its scope, key and value."""
    return canonical_digest({"scope": scope, "key": key, "value": value})


def _fact_value(fact: Fact) -> dict[str, Any]:
    """The value of ``fact`` as the bundle carries it: the fields ``parse_fact`` reads."""
    value: dict[str, Any] = {
        "content": fact.content,
        "category": fact.category,
        "confidence": fact.confidence,
        "created_at": fact.created_at.isoformat(),
        "confirmed_at": fact.confirmed_at.isoformat(),
        "last_seen_at": fact.last_seen_at.isoformat(),
        "source_thread": fact.source_thread,
        "evidence": fact.evidence,
        "history": [dict(entry) for entry in fact.history],
        "is_correction": fact.is_correction,
        "provenance": fact.provenance,
    }
    if fact.imported is not None:
        value["imported"] = dict(fact.imported)
    return value


# -- export -------------------------------------------------------------------------------


def _profile_entry(item: Item | None) -> dict[str, Any] | None:
    """The bundle's profile: its well-formed, non-empty sections, or None."""
    if item is None:
        return None
    parsed = parse_profile(tuple(item.namespace), item.key, item.value)
    if isinstance(parsed, Problem) or not any(text.strip() for text in parsed.values()):
        return None
    value = encoded({"sections": parsed})
    return {"value": value, "sha256": canonical_digest(value)}


def _bundle(
    context: Context, facts: Sequence[Fact], profile: Item | None, now: datetime | None
) -> dict[str, Any]:
    entries = []
    for fact in facts:
        value = encoded(_fact_value(fact))
        entries.append(
            {
                "scope": fact.scope,
                "key": fact.id,
                "value": value,
                "sha256": fact_digest(fact.scope, fact.id, value),
            }
        )
    bundle: dict[str, Any] = {
        "format": BUNDLE_FORMAT,
        "schema_version": SCHEMA_VERSION,
        "exported_at": utc(now).isoformat(),
        "user_id": context.user_id,
        "agent_name": context.agent_name,
        "project_id": context.project_id,
        "facts": entries,
        "profile": _profile_entry(profile),
    }
    bundle["bundle_sha256"] = canonical_digest(bundle)
    return bundle


def export_bundle(
    store: BaseStore, context: Context, *, now: datetime | None = None
) -> dict[str, Any]:
    """Everything remembered for the context's user, agent and project, as a bundle.

    Malformed stored items (``MemoryRepository.problems``) are left out, as every reader
    skips them.

    Args:
        store: The Store to read.
        context: Whose memory: the user's facts for the agent, the project's facts when
            the context has a project, and the user's profile.
        now: The ``exported_at`` time; None is now.

    Returns:
        The bundle (JSON-serialisable), its digests filled in.

    """
    repository = MemoryRepository(store)
    facts = repository.list_facts(context)
    profile = store.get(user_profile(context.user_id), PROFILE_KEY)
    return _bundle(context, facts, profile, now)


async def aexport_bundle(
    store: BaseStore, context: Context, *, now: datetime | None = None
) -> dict[str, Any]:
    """Async :func:`export_bundle`."""
    repository = MemoryRepository(store)
    facts = await repository.alist_facts(context)
    profile = await store.aget(user_profile(context.user_id), PROFILE_KEY)
    return _bundle(context, facts, profile, now)


# -- verification ---------------------------------------------------------------------------


def _label(value: object, name: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        kind = "a non-empty string or null" if optional else "a non-empty string"
        raise BundleError(f"the bundle's {name!r} must be {kind}, got {value!r:.80}")
    return value


def _verify_fact(index: int, entry: object, project_id: str | None) -> tuple[str, str]:
    """The scope and key of a well-formed fact entry whose digest matches."""
    where = f"fact {index + 1}"
    if not isinstance(entry, Mapping) or set(entry) != set(FACT_FIELDS):
        raise BundleError(f"{where} must be an object with exactly {', '.join(FACT_FIELDS)}")
    scope, key, value = entry["scope"], entry["key"], entry["value"]
    if scope not in ("user", "project"):
        raise BundleError(f"{where}: 'scope' must be 'user' or 'project', got {scope!r:.80}")
    if not isinstance(key, str) or not key:
        raise BundleError(f"{where}: 'key' must be a non-empty string, got {key!r:.80}")
    where = f"fact {scope}:{key}"
    if scope == "project" and project_id is None:
        raise BundleError(f"{where} is a project fact but the bundle has no project_id")
    if entry["sha256"] != fact_digest(scope, key, value):
        raise BundleError(f"{where}: sha256 does not match its scope, key and value")
    parsed = parse_fact((), key, value, scope)
    if isinstance(parsed, Problem):
        raise BundleError(f"{where} is malformed: {parsed.problem}")
    return scope, key


def _verify_profile(entry: object) -> None:
    if entry is None:
        return
    if not isinstance(entry, Mapping) or set(entry) != {"value", "sha256"}:
        raise BundleError("the bundle's 'profile' must be null or an object with value, sha256")
    if entry["sha256"] != canonical_digest(entry["value"]):
        raise BundleError("the profile's sha256 does not match its value")
    parsed = parse_profile((), PROFILE_KEY, entry["value"])
    if isinstance(parsed, Problem):
        raise BundleError(f"the profile is malformed: {parsed.problem}")


def verify_bundle(bundle: object) -> None:
    """Check a bundle's format, schema version, facts and every digest.

    Args:
        bundle: The bundle, as read from JSON.

    Raises:
        BundleError: The first problem: not a ctxgraph memory bundle, an unknown
            ``schema_version``, a missing or ill-typed field, a malformed or duplicate fact
            or profile, or a digest (a fact's, the profile's or ``bundle_sha256``) that does
            not match.

    """
    if not isinstance(bundle, Mapping):
        raise BundleError(f"a memory bundle is a JSON object, got a {type(bundle).__name__}")
    _verify_header(bundle)
    _label(bundle.get("user_id"), "user_id")
    _label(bundle.get("agent_name"), "agent_name")
    project_id = _label(bundle.get("project_id"), "project_id", optional=True)
    _verify_facts(bundle.get("facts"), project_id)
    _verify_profile(bundle.get("profile"))
    claimed = bundle.get("bundle_sha256")
    rest = {name: part for name, part in bundle.items() if name != "bundle_sha256"}
    if claimed != canonical_digest(rest):
        raise BundleError("bundle_sha256 does not match the bundle's content")


def _verify_header(bundle: Mapping[str, Any]) -> None:
    """Check the format, the schema version and the export time."""
    if bundle.get("format") != BUNDLE_FORMAT:
        raise BundleError(
            f"not a ctxgraph memory bundle: 'format' is {bundle.get('format')!r:.80}, "
            f"expected {BUNDLE_FORMAT!r}"
        )
    version = bundle.get("schema_version")
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        raise BundleError(
            f"unknown schema_version {version!r:.40}: this ctxgraph reads version {SCHEMA_VERSION}"
        )
    exported_at = bundle.get("exported_at")
    try:
        datetime.fromisoformat(str(_label(exported_at, "exported_at")))
    except ValueError:
        raise BundleError(f"'exported_at' is not an ISO 8601 time: {exported_at!r:.80}") from None


def _verify_facts(facts: object, project_id: str | None) -> None:
    """Check every fact entry, and that none appears twice."""
    if not isinstance(facts, list):
        raise BundleError(f"the bundle's 'facts' must be a list, got {facts!r:.80}")
    seen: set[tuple[str, str]] = set()
    for index, entry in enumerate(facts):
        marker = _verify_fact(index, entry, project_id)
        if marker in seen:
            raise BundleError(f"fact {marker[0]}:{marker[1]} appears twice")
        seen.add(marker)


# -- import ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImportResult:
    """What an import did (or, with ``dry_run``, would do), per fact and for the profile.

    Each entry names a fact as ``scope:key`` (``"profile"`` for the profile); ``refused``
    and ``conflicts`` give the reason too.
    """

    imported: list[str] = field(default_factory=list)
    """Written (absent before, or replacing a malformed stored item)."""
    unchanged: list[str] = field(default_factory=list)
    """Already stored with the same content; nothing written."""
    refused: list[tuple[str, str]] = field(default_factory=list)
    """Refused by the acceptance rules; nothing written."""
    conflicts: list[tuple[str, str]] = field(default_factory=list)
    """Stored with other content, which is kept; nothing written."""
    dry_run: bool = False
    """Nothing was written: the counts say what an import would do."""


@dataclass(frozen=True)
class _Entry:
    """One fact or the profile of a bundle: where it goes and what would be written."""

    label: str
    namespace: tuple[str, ...]
    key: str
    scope: FactScope | None
    value: dict[str, Any] | None
    refusal: str | None = None


def _refusal(entry: Mapping[str, Any], fact: Fact, threshold: float) -> str | None:
    """Why the acceptance rules refuse a verified bundle fact, or None."""
    key = str(entry["key"])
    if slug_key(key) != key or len(key) > 80:
        return f"the key {key!r:.80} is not 1-80 snake_case characters"
    if fact.category not in CATEGORIES:
        return f"category {fact.category!r:.40} is not one of {', '.join(CATEGORIES)}"
    if fact.confidence < threshold:
        return f"low confidence: {fact.confidence:.2f} is below {threshold:.2f}"
    if entry["value"].get("provenance") == "extraction" and fact.provenance != "extraction":
        return "it claims extraction without the evidence and source thread extraction records"
    return None if normalize_text(fact.content) else "its content is empty"


def _origin(fact: Fact) -> Provenance:
    """Who wrote ``fact`` before it was exported; through re-imports, the first writer."""
    if fact.provenance is None:
        return "unknown"
    if fact.provenance != "import" or fact.imported is None:
        return fact.provenance
    origin = fact.imported["from_provenance"]
    return next((known for known in PROVENANCES if known == origin), "unknown")


def _imported_value(
    entry: Mapping[str, Any], fact: Fact, bundle_sha256: str, at: str
) -> dict[str, Any]:
    value = _fact_value(fact)
    value.update(
        key=entry["key"],
        provenance="import",
        imported={
            "from_provenance": _origin(fact),
            "bundle_sha256": bundle_sha256,
            "fact_sha256": str(entry["sha256"]),
            "at": at,
        },
    )
    return value


def _profile_plan(bundle: Mapping[str, Any], user_id: str, at: str) -> _Entry | None:
    profile = bundle.get("profile")
    if profile is None:
        return None
    namespace = user_profile(user_id)
    sections = parse_profile((), PROFILE_KEY, profile["value"])
    assert not isinstance(sections, Problem)  # verified
    unknown = [name for name in sections if name not in PROFILE_SECTIONS]
    refusal = None
    if unknown:
        refusal = f"unknown profile section {unknown[0]!r:.40}"
    value = {
        "sections": {name: sections.get(name, "") for name in PROFILE_SECTIONS},
        "updated_at": at,
        "imported": {"bundle_sha256": str(bundle["bundle_sha256"]), "at": at},
    }
    return _Entry("profile", namespace, PROFILE_KEY, None, value, refusal)


def _plan(
    bundle: object,
    user_id: str,
    agent_name: str | None,
    project_id: str | None,
    threshold: float,
    now: datetime | None,
) -> list[_Entry]:
    """Every fact and the profile of a verified bundle, with what would be written."""
    verify_bundle(bundle)
    assert isinstance(bundle, Mapping)
    context = Context(
        user_id=user_id,
        agent_name=agent_name or str(bundle["agent_name"]),
        project_id=project_id or bundle["project_id"],
    )
    at = utc(now).isoformat()
    digest = str(bundle["bundle_sha256"])
    entries = [_fact_entry(raw, context, threshold, digest, at) for raw in bundle["facts"]]
    profile = _profile_plan(bundle, context.user_id, at)
    return entries if profile is None else [*entries, profile]


def _fact_entry(
    raw: Mapping[str, Any], context: Context, threshold: float, digest: str, at: str
) -> _Entry:
    """The entry of one verified fact of the bundle, in the receiving context."""
    scope: FactScope = "project" if raw["scope"] == "project" else "user"
    if scope == "project":
        assert context.project_id is not None  # verified
        namespace = project_facts(context.project_id)
    else:
        namespace = user_facts(context.user_id, context.agent_name)
    fact = parse_fact((), raw["key"], raw["value"], scope)
    assert isinstance(fact, Fact)  # verified
    refusal = _refusal(raw, fact, threshold)
    value = None if refusal else _imported_value(raw, fact, digest, at)
    return _Entry(f"{scope}:{raw['key']}", namespace, raw["key"], scope, value, refusal)


def _same(a: str, b: str) -> bool:
    return normalize_text(a).casefold() == normalize_text(b).casefold()


def _nonempty(sections: Mapping[str, str]) -> dict[str, str]:
    return {name: normalize_text(text) for name, text in sections.items() if text.strip()}


def _outcome(entry: _Entry, stored: Item | None) -> tuple[Outcome, str]:
    """What importing ``entry`` does, given what the Store holds under its key."""
    if entry.refusal is not None:
        return "refused", entry.refusal
    assert entry.value is not None
    if stored is None:
        return "imported", ""
    if entry.scope is None:
        held = parse_profile(tuple(stored.namespace), stored.key, stored.value)
        if isinstance(held, Problem) or not _nonempty(held):
            return "imported", ""
        if _nonempty(held) == _nonempty(entry.value["sections"]):
            return "unchanged", ""
        return "conflict", "the stored profile differs; it is kept"
    parsed = parse_fact(tuple(stored.namespace), stored.key, stored.value, entry.scope)
    if isinstance(parsed, Problem):
        return "imported", ""
    if _same(parsed.content, entry.value["content"]):
        return "unchanged", ""
    return "conflict", f"stored with other content ({parsed.content!r:.60}), which is kept"


def _decide(
    entries: Sequence[_Entry], stored: Sequence[Item | None], dry_run: bool
) -> tuple[ImportResult, list[PutOp]]:
    result = ImportResult(dry_run=dry_run)
    writes: list[PutOp] = []
    for entry, item in zip(entries, stored, strict=True):
        outcome, reason = _outcome(entry, item)
        if outcome == "imported":
            assert entry.value is not None
            result.imported.append(entry.label)
            index: list[str] | Literal[False] = False if entry.scope is None else FactWrite.index
            writes.append(PutOp(entry.namespace, entry.key, encoded(entry.value), index=index))
        elif outcome == "unchanged":
            result.unchanged.append(entry.label)
        elif outcome == "refused":
            result.refused.append((entry.label, reason))
        else:
            result.conflicts.append((entry.label, reason))
    return result, [] if dry_run else writes


def _reads(entries: Sequence[_Entry]) -> list[GetOp]:
    return [GetOp(entry.namespace, entry.key) for entry in entries]


def _items(results: Sequence[object]) -> list[Item | None]:
    return [found if isinstance(found, Item) else None for found in results]


class ImportOptions(TypedDict, total=False):
    """What :func:`import_bundle` and :func:`aimport_bundle` take by keyword, each optional."""

    agent_name: str | None
    """The agent whose user facts they become; None (the default) is the bundle's."""
    project_id: str | None
    """The project that receives the project facts; None (the default) is the bundle's."""
    dry_run: bool
    """Decide everything, write nothing (default False)."""
    threshold: float
    """The lowest confidence the acceptance rules keep (``Settings.confidence_threshold``)."""
    now: datetime | None
    """The import time recorded on each fact; None (the default) is now."""


def _import(
    store: BaseStore,
    bundle: object,
    user_id: str,
    *,
    agent_name: str | None = None,
    project_id: str | None = None,
    dry_run: bool = False,
    threshold: float = DEFAULT_THRESHOLD,
    now: datetime | None = None,
) -> Flow[ImportResult]:
    """The import, run by ``run`` (:func:`import_bundle`) or ``arun``."""
    entries = _plan(bundle, user_id, agent_name, project_id, threshold, now)
    found = (yield from io(store.batch, store.abatch, _reads(entries))) if entries else []
    result, writes = _decide(entries, _items(found), dry_run)
    for start in range(0, len(writes), BATCH):
        yield from io(put_facts, aput_facts, store, writes[start : start + BATCH])
    return result


def import_bundle(
    store: BaseStore, bundle: object, user_id: str, **options: Unpack[ImportOptions]
) -> ImportResult:
    """Import a verified bundle into the memory of ``user_id`` (see the module docstring).

    Args:
        store: The Store to write.
        bundle: The bundle, as read from JSON.
        user_id: Whose memory receives the facts and the profile.
        **options: ``agent_name``, ``project_id``, ``dry_run``, ``threshold`` and ``now``,
            each described at :class:`ImportOptions`.

    Returns:
        What was imported, unchanged, refused and in conflict.

    Raises:
        BundleError: The bundle fails :func:`verify_bundle`; nothing was written.
        ContextError: ``user_id``, the agent or the project is not a valid label.

    """
    return run(_import(store, bundle, user_id, **options))


async def aimport_bundle(
    store: BaseStore, bundle: object, user_id: str, **options: Unpack[ImportOptions]
) -> ImportResult:
    """Async :func:`import_bundle`."""
    return await arun(_import(store, bundle, user_id, **options))
