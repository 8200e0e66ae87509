"""Memory bundles: digests, refusal of tampered bundles, idempotent import, round trips."""

from __future__ import annotations

import copy
import io
import json
import logging
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from ctxgraph.graph.cli.main import main
from ctxgraph.graph.cli.memory import export_memory
from ctxgraph.nodes.memory.render import UNVERIFIED_IMPORTED, render_memory
from ctxgraph.state.context import Context
from ctxgraph.store.memory import (
    BundleError,
    Decision,
    FactCandidate,
    MemoryRepository,
    ProfileUpdate,
    aexport_bundle,
    aimport_bundle,
    export_bundle,
    import_bundle,
    verify_bundle,
)
from ctxgraph.store.memory.bundle import canonical_digest, fact_digest
from ctxgraph.store.memory.facts import Fact
from ctxgraph.store.namespaces import project_facts, user_facts, user_profile
from ctxgraph.store.persistence.connection import Persistence

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
QUERIES = ["python backend", "deploys", "editor vim", "tea coffee", "Fridays deploys python"]


def _user() -> str:
    return f"u-{uuid.uuid4().hex[:10]}"


def _seed(store: BaseStore, context: Context) -> None:
    """Facts of every kind: extracted, direct, with history, a correction, a project fact."""
    repository = MemoryRepository(store)
    candidate = FactCandidate(
        key="drink",
        content="Prefers tea over coffee.",
        category="preference",
        scope="user",
        durability="durable",
        authority="descriptive",
        confidence=0.85,
        evidence_message_id="m-1",
        evidence_text="I prefer tea over coffee",
    )
    accepted = Decision(accepted=True, target="user", reason="durable user fact")
    repository.remember(context, candidate, accepted, thread_id="t-1", now=NOW - timedelta(days=90))
    repository.add_fact(
        context,
        "Writes Python backend services.",
        key="language",
        category="context",
        confidence=0.95,
        created_at=NOW - timedelta(days=200),
    )
    repository.add_fact(
        context,
        "Writes Python and Go backend services.",
        key="language",
        category="context",
        confidence=0.8,
        created_at=NOW - timedelta(days=40),
    )
    repository.add_fact(
        context,
        "Uses vim as the editor, not emacs.",
        key="editor",
        category="correction",
        confidence=0.9,
        created_at=NOW - timedelta(days=3),
        provenance="cli",
    )
    repository.add_fact(
        context,
        "Deploys python services on Fridays.",
        key="deploy_day",
        confidence=0.75,
        created_at=NOW - timedelta(days=10),
    )
    repository.add_fact(
        context,
        "The service deploys with Helm.",
        key="deploy_tool",
        scope="project",
        created_at=NOW - timedelta(days=5),
    )
    update = ProfileUpdate(
        section="work_context",
        content="Backend engineer.",
        scope="user",
        durability="durable",
        authority="descriptive",
        confidence=0.9,
        evidence_message_id="m-1",
        evidence_text="I am a backend engineer",
    )
    repository.update_profile(context, update, now=NOW)


def _essentials(fact: Fact) -> tuple[Any, ...]:
    """Everything an import must keep (not provenance, which becomes "import")."""
    return (
        fact.scope,
        fact.id,
        fact.content,
        fact.category,
        fact.confidence,
        fact.created_at,
        fact.confirmed_at,
        fact.last_seen_at,
        fact.source_thread,
        fact.evidence,
        fact.history,
        fact.is_correction,
    )


def _ranking(store: BaseStore, context: Context) -> list[list[tuple[str, float]]]:
    repository = MemoryRepository(store)
    return [
        [(f.id, round(f.score, 9)) for f in repository.search(context, query, top_k=10, now=NOW)]
        for query in QUERIES
    ]


def _all_items(store: BaseStore, context: Context) -> list[Any]:
    spaces = [
        user_facts(context.user_id, context.agent_name),
        user_profile(context.user_id),
        *([project_facts(context.project_id)] if context.project_id else []),
    ]
    return [item for space in spaces for item in store.search(space, limit=100)]


def _rehash(bundle: dict[str, Any]) -> dict[str, Any]:
    """``bundle`` with its bundle digest recomputed (fact digests left as they are)."""
    rest = {k: v for k, v in bundle.items() if k != "bundle_sha256"}
    return {**rest, "bundle_sha256": canonical_digest(rest)}


# -- export ---------------------------------------------------------------------------------


def test_export_carries_provenance_and_matching_digests(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = InMemoryStore()
    context = Context(user_id=_user(), agent_name="coder", project_id="svc")
    _seed(store, context)
    store.put(user_facts(context.user_id, "coder"), "broken", {"content": "no created_at"})
    bundle = export_bundle(store, context, now=NOW)

    assert json.loads(json.dumps(bundle)) == bundle
    assert bundle["format"] == "ctxgraph.memory" and bundle["schema_version"] == 1
    assert (bundle["user_id"], bundle["agent_name"], bundle["project_id"]) == (
        context.user_id,
        "coder",
        "svc",
    )
    assert bundle["exported_at"] == NOW.isoformat()
    facts = {(f["scope"], f["key"]): f for f in bundle["facts"]}
    assert set(facts) == {
        ("user", "drink"),
        ("user", "language"),
        ("user", "editor"),
        ("user", "deploy_day"),
        ("project", "deploy_tool"),
    }  # the malformed item is left out
    for entry in bundle["facts"]:
        assert entry["sha256"] == fact_digest(entry["scope"], entry["key"], entry["value"])
    drink = facts[("user", "drink")]["value"]
    assert drink["provenance"] == "extraction"
    assert drink["evidence"] == "I prefer tea over coffee" and drink["source_thread"] == "t-1"
    language = facts[("user", "language")]["value"]
    assert [h["content"] for h in language["history"]] == ["Writes Python backend services."]
    assert facts[("user", "editor")]["value"]["provenance"] == "cli"
    assert facts[("user", "editor")]["value"]["is_correction"] is True
    profile = bundle["profile"]
    assert profile["value"]["sections"]["work_context"] == "Backend engineer."
    assert profile["sha256"] == canonical_digest(profile["value"])
    rest = {k: v for k, v in bundle.items() if k != "bundle_sha256"}
    assert bundle["bundle_sha256"] == canonical_digest(rest)
    verify_bundle(bundle)

    caplog.set_level(logging.WARNING, logger="ctxgraph")
    caplog.clear()
    out = io.StringIO()
    assert export_memory(store, context, out) == 0
    assert [f["key"] for f in json.loads(out.getvalue())["facts"]] == [
        f["key"] for f in bundle["facts"]
    ]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [
        "left 1 malformed memory item out of the bundle; see them with "
        "`ctxgraph memory list --problems`"
    ]


# -- refusal --------------------------------------------------------------------------------


def _tampered_value(bundle: dict[str, Any]) -> dict[str, Any]:
    bundle["facts"][0]["value"]["confidence"] = 1.0
    return _rehash(bundle)  # only the fact's own digest can catch it


def _tampered_digest(bundle: dict[str, Any]) -> dict[str, Any]:
    bundle["bundle_sha256"] = "0" * 64
    return bundle


def _silent_edit(bundle: dict[str, Any]) -> dict[str, Any]:
    bundle["user_id"] = "someone-else"  # no digest recomputed
    return bundle


def _wrong_version(bundle: dict[str, Any]) -> dict[str, Any]:
    bundle["schema_version"] = 2
    return _rehash(bundle)


def _malformed_fact(bundle: dict[str, Any]) -> dict[str, Any]:
    entry = bundle["facts"][-1]
    entry["value"]["created_at"] = "yesterday"
    entry["sha256"] = fact_digest(entry["scope"], entry["key"], entry["value"])
    return _rehash(bundle)


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (_tampered_value, r"fact user:\w+: sha256 does not match"),
        (_tampered_digest, "bundle_sha256 does not match"),
        (_silent_edit, "bundle_sha256 does not match"),
        (_wrong_version, "unknown schema_version 2: this ctxgraph reads version 1"),
        (_malformed_fact, r"fact \w+:\w+ is malformed: 'created_at' is not an ISO 8601 time"),
    ],
    ids=["fact-value", "bundle-digest", "unhashed-edit", "schema-version", "malformed-fact"],
)
def test_a_bad_bundle_is_refused_whole_and_nothing_is_written(
    tamper: Any, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = InMemoryStore()
    context = Context(user_id=_user(), agent_name="coder", project_id="svc")
    _seed(source, context)
    bundle = tamper(copy.deepcopy(export_bundle(source, context, now=NOW)))
    target = InMemoryStore()
    receiver = Context(user_id=_user(), agent_name="coder", project_id="svc")
    with pytest.raises(BundleError, match=message):
        import_bundle(target, bundle, receiver.user_id)
    with pytest.raises(BundleError, match=message):
        import_bundle(target, bundle, receiver.user_id, dry_run=True)
    assert _all_items(target, receiver) == []

    # The CLI refuses it in one line, exit 2, before it opens any database.
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(bundle), encoding="utf-8")
    assert main(["memory", "import", str(path), "--user", receiver.user_id]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "refused, nothing written" in lines[0], captured.err


def test_not_json_and_not_a_bundle_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bundle.json"
    path.write_text("{not json", encoding="utf-8")
    assert main(["memory", "import", str(path), "--user", "u-1"]) == 2
    assert "not JSON" in capsys.readouterr().err
    path.write_text(json.dumps({"facts": []}), encoding="utf-8")
    assert main(["memory", "import", str(path), "--user", "u-1"]) == 2
    assert "not a ctxgraph memory bundle" in capsys.readouterr().err
    assert main(["memory", "import", str(tmp_path / "missing.json"), "--user", "u-1"]) == 2
    assert "cannot read the bundle" in capsys.readouterr().err


# -- import rules ---------------------------------------------------------------------------


def test_import_is_idempotent_and_marks_every_fact_imported() -> None:
    source = InMemoryStore()
    context = Context(user_id=_user(), agent_name="coder", project_id="svc")
    _seed(source, context)
    bundle = export_bundle(source, context, now=NOW)
    target = InMemoryStore()
    receiver = Context(user_id=_user(), agent_name="coder", project_id="svc")

    planned = import_bundle(target, bundle, receiver.user_id, dry_run=True, now=NOW)
    assert planned.dry_run and len(planned.imported) == 6  # five facts and the profile
    assert _all_items(target, receiver) == []

    first = import_bundle(target, bundle, receiver.user_id, now=NOW)
    assert sorted(first.imported) == sorted(
        [f"{f['scope']}:{f['key']}" for f in bundle["facts"]] + ["profile"]
    )
    assert first.unchanged == [] and first.refused == [] and first.conflicts == []
    written = {(tuple(i.namespace), i.key): i.updated_at for i in _all_items(target, receiver)}

    second = import_bundle(target, bundle, receiver.user_id, now=NOW + timedelta(hours=1))
    assert second.imported == [] and len(second.unchanged) == 6
    again = {(tuple(i.namespace), i.key): i.updated_at for i in _all_items(target, receiver)}
    assert again == written  # nothing was written the second time

    facts = {f.id: f for f in MemoryRepository(target).list_facts(receiver)}
    assert {f.provenance for f in facts.values()} == {"import"}
    imported = facts["drink"].imported
    assert imported is not None
    assert imported["from_provenance"] == "extraction"
    assert imported["bundle_sha256"] == bundle["bundle_sha256"]
    assert imported["at"] == NOW.isoformat()
    assert facts["editor"].imported and facts["editor"].imported["from_provenance"] == "cli"
    assert MemoryRepository(target).get_profile(receiver)["work_context"] == "Backend engineer."


async def test_async_import_and_export_match_the_sync_ones() -> None:
    source = InMemoryStore()
    context = Context(user_id=_user(), agent_name="coder", project_id="svc")
    _seed(source, context)
    bundle = await aexport_bundle(source, context, now=NOW)
    assert bundle == export_bundle(source, context, now=NOW)
    target = InMemoryStore()
    first = await aimport_bundle(target, bundle, "u-async", now=NOW)
    assert len(first.imported) == 6
    second = await aimport_bundle(target, bundle, "u-async", now=NOW)
    assert second.imported == [] and len(second.unchanged) == 6


def _with_fact(bundle: dict[str, Any], key: str, **changes: Any) -> dict[str, Any]:
    """``bundle`` plus a copy of its first fact under ``key`` with ``changes``, rehashed."""
    entry = copy.deepcopy(bundle["facts"][0])
    entry["key"] = key
    entry["value"].update(changes)
    entry["sha256"] = fact_digest(entry["scope"], key, entry["value"])
    bundle["facts"].append(entry)
    return _rehash(bundle)


def test_the_acceptance_rules_refuse_facts_the_gate_would_not_keep() -> None:
    source = InMemoryStore()
    context = Context(user_id=_user(), agent_name="coder")
    MemoryRepository(source).add_fact(context, "Likes green.", key="colour", created_at=NOW)
    bundle = export_bundle(source, context, now=NOW)
    bundle = _with_fact(bundle, "unsure", content="Maybe likes red.", confidence=0.4)
    bundle = _with_fact(bundle, "odd", content="Odd category.", category="rumour")
    bundle = _with_fact(
        bundle, "claimed", content="Claims the gate.", provenance="extraction", evidence=None
    )
    bundle = _with_fact(bundle, "Not-Snake", content="Bad key.")
    target = InMemoryStore()
    result = import_bundle(target, bundle, "u-gate", now=NOW)
    assert result.imported == ["user:colour"]
    reasons = dict(result.refused)
    assert reasons["user:unsure"] == "low confidence: 0.40 is below 0.70"
    assert "category 'rumour'" in reasons["user:odd"]
    assert "claims extraction without the evidence" in reasons["user:claimed"]
    assert "snake_case" in reasons["user:Not-Snake"]
    keys = [
        f.id
        for f in MemoryRepository(target).list_facts(Context(user_id="u-gate", agent_name="coder"))
    ]
    assert keys == ["colour"]
    # A lower threshold keeps the unsure fact; the others stay refused.
    lower = import_bundle(target, bundle, "u-gate", threshold=0.3, now=NOW)
    assert lower.imported == ["user:unsure"] and lower.unchanged == ["user:colour"]


def test_a_key_stored_with_other_content_is_a_conflict_and_kept() -> None:
    source = InMemoryStore()
    context = Context(user_id=_user(), agent_name="coder")
    MemoryRepository(source).add_fact(context, "Likes green.", key="colour", created_at=NOW)
    bundle = export_bundle(source, context, now=NOW)
    target = InMemoryStore()
    receiver = Context(user_id=_user(), agent_name="coder")
    MemoryRepository(target).add_fact(receiver, "Likes blue.", key="colour", confidence=0.95)
    MemoryRepository(target).add_fact(receiver, "  likes   GREEN. ", key="same", created_at=NOW)
    bundle = _with_fact(bundle, "same", content="Likes green.")
    result = import_bundle(target, bundle, receiver.user_id, now=NOW)
    assert result.imported == []
    assert result.unchanged == ["user:same"]  # same content, case and spaces aside
    assert [label for label, _ in result.conflicts] == ["user:colour"]
    assert "'Likes blue.'" in result.conflicts[0][1]
    stored = {f.id: f for f in MemoryRepository(target).list_facts(receiver)}
    assert stored["colour"].content == "Likes blue." and stored["colour"].provenance == "api"
    # After forgetting the stored fact, the bundle's is imported.
    assert MemoryRepository(target).forget(receiver, "colour")
    assert import_bundle(target, bundle, receiver.user_id).imported == ["user:colour"]


def test_the_memory_view_marks_an_imported_fact() -> None:
    source = InMemoryStore()
    context = Context(user_id=_user(), agent_name="coder", project_id="svc")
    _seed(source, context)
    target = InMemoryStore()
    receiver = Context(user_id=_user(), agent_name="coder", project_id="svc")
    import_bundle(target, export_bundle(source, context), receiver.user_id)
    repository = MemoryRepository(target)
    facts = repository.memory_candidates(receiver, "tea", now=NOW)
    view = render_memory(repository.get_profile(receiver), facts, query="tea", ranked=True)
    line = next(line for line in view.splitlines() if "tea over coffee" in line)
    assert line.endswith(UNVERIFIED_IMPORTED) and UNVERIFIED_IMPORTED == " (unverified: imported)"
    assert all(
        line.endswith(UNVERIFIED_IMPORTED) for line in view.splitlines() if line.startswith("- [")
    )


# -- round trip -----------------------------------------------------------------------------


def test_round_trip_postgres_memory_postgres_keeps_facts_and_ranking(
    persistence: Persistence,
) -> None:
    origin = Context(user_id=_user(), agent_name="coder", project_id=f"p-{uuid.uuid4().hex[:8]}")
    _seed(persistence.store, origin)
    original = MemoryRepository(persistence.store).list_facts(origin)
    ranking = _ranking(persistence.store, origin)
    assert all(ranking), ranking

    middle = InMemoryStore()
    first = import_bundle(middle, export_bundle(persistence.store, origin), origin.user_id)
    assert first.refused == [] and first.conflicts == []
    assert [_essentials(f) for f in MemoryRepository(middle).list_facts(origin)] == [
        _essentials(f) for f in original
    ]
    assert _ranking(middle, origin) == ranking

    back = Context(user_id=_user(), agent_name="coder", project_id=f"p-{uuid.uuid4().hex[:8]}")
    bundle = export_bundle(middle, origin)
    second = import_bundle(persistence.store, bundle, back.user_id, project_id=back.project_id)
    assert len(second.imported) == 6
    returned = MemoryRepository(persistence.store).list_facts(back)
    assert [_essentials(f) for f in returned] == [_essentials(f) for f in original]
    assert _ranking(persistence.store, back) == ranking
    # The first writer survives the second import.
    origins = {f.id: f.imported["from_provenance"] for f in returned if f.imported}
    assert origins == {f.id: f.provenance for f in original}
    # Importing the bundle back into the original memory changes nothing.
    home = import_bundle(persistence.store, bundle, origin.user_id)
    assert home.imported == [] and len(home.unchanged) == 6
    assert {f.provenance for f in MemoryRepository(persistence.store).list_facts(origin)} == {
        f.provenance for f in original
    }


# -- command line ---------------------------------------------------------------------------


def test_cli_export_then_import(
    persistence: Persistence,
    database_uri: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("DATABASE_URI", database_uri)
    project = f"p-{uuid.uuid4().hex[:8]}"
    origin = Context(user_id=_user(), agent_name="coder", project_id=project)
    _seed(persistence.store, origin)
    identity = ["--user", origin.user_id, "--agent", "coder", "--project", project]

    assert main(["memory", "export", *identity]) == 0
    printed = json.loads(capsys.readouterr().out)
    verify_bundle(printed)
    path = tmp_path / "bundle.json"
    assert main(["memory", "export", *identity, "--out", str(path)]) == 0
    assert capsys.readouterr().out == (
        f"exported 5 facts and the profile of user {origin.user_id} (agent coder) to {path}\n"
    )
    bundle = json.loads(path.read_text(encoding="utf-8"))
    assert [f["sha256"] for f in bundle["facts"]] == [f["sha256"] for f in printed["facts"]]

    receiver = _user()
    importing = ["memory", "import", str(path), "--user", receiver]
    assert main([*importing, "--dry-run"]) == 0
    assert capsys.readouterr().out == (
        f"dry run: would import 5 items into user {receiver} (agent coder); "
        "unchanged 1, refused 0, conflicts 0\n"
    )
    receiving = Context(user_id=receiver, agent_name="coder", project_id=project)
    assert MemoryRepository(persistence.store).list_user_facts(receiving) == []
    assert main(importing) == 0
    # Project facts go to the bundle's project, which already holds them.
    assert capsys.readouterr().out == (
        f"imported 5 items into user {receiver} (agent coder); "
        "unchanged 1, refused 0, conflicts 0\n"
    )
    monkeypatch.setattr("sys.stdin", io.StringIO(path.read_text(encoding="utf-8")))
    assert main(["memory", "import", "-", "--user", receiver]) == 0
    assert capsys.readouterr().out == (
        f"imported 0 items into user {receiver} (agent coder); "
        "unchanged 6, refused 0, conflicts 0\n"
    )
    listed = MemoryRepository(persistence.store).list_facts(receiving)
    assert {f.id for f in listed} == {f["key"] for f in bundle["facts"]}
