"""Long-term memory: the acceptance gate, the drawers facts land in, and the repository."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langgraph.store.memory import InMemoryStore
from pydantic import ValidationError

from ctxgraph.state.context import Context, ContextError
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.memory.rules import (
    Decision,
    FactCandidate,
    MemoryUpdate,
    ProfileUpdate,
    accept_candidate,
    accept_profile_update,
)
from ctxgraph.store.memory.writes import HISTORY_LIMIT
from ctxgraph.store.namespaces import project_facts, thread_memory, user_facts, user_profile
from ctxgraph.store.persistence.connection import Persistence

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
T1 = T0 + timedelta(days=3)
T2 = T0 + timedelta(days=7)


def row(message_id: str, role: str, content: str) -> dict[str, str]:
    return {"id": message_id, "role": role, "content": content}


def candidate(**overrides: Any) -> FactCandidate:
    fields: dict[str, Any] = {
        "key": "preferred_language",
        "content": "Prefers technical explanations in Chinese.",
        "category": "preference",
        "scope": "user",
        "durability": "durable",
        "authority": "descriptive",
        "confidence": 0.9,
        "evidence_message_id": "m1",
        "evidence_text": "平时请用中文解释技术问题",
    }
    fields.update(overrides)
    return FactCandidate(**fields)


def profile_update(**overrides: Any) -> ProfileUpdate:
    fields: dict[str, Any] = {
        "section": "work_context",
        "content": "Mainly does Python backend work.",
        "scope": "user",
        "durability": "durable",
        "authority": "descriptive",
        "confidence": 0.9,
        "evidence_message_id": "m1",
        "evidence_text": "I mainly do Python backend work",
    }
    fields.update(overrides)
    return ProfileUpdate(**fields)


@pytest.fixture
def repo() -> MemoryRepository:
    return MemoryRepository(InMemoryStore())


def keys(facts: list[Any]) -> list[str]:
    return [fact.key for fact in facts]


# -- the classification table -------------------------------------------------------------

TABLE = [
    # statement, candidate fields, where it lands without a project, with a project
    (
        "平时请用中文解释技术问题。",
        {"key": "explanation_language", "scope": "user"},
        "user",
        "user",
    ),
    (
        "这一条用英文回复。",
        {"key": "reply_language", "scope": "thread", "durability": "temporary"},
        None,
        None,
    ),
    (
        "这个仓库统一使用 pnpm。",
        {"key": "package_manager", "scope": "project", "category": "context"},
        None,
        "project",
    ),
    (
        "这次可以把修改推送上去。",
        {
            "key": "may_push",
            "scope": "thread",
            "durability": "temporary",
            "authority": "transactional",
        },
        None,
        None,
    ),
    (
        "以后你都可以直接删除旧文件。",
        {"key": "may_delete_old_files", "authority": "transactional"},
        None,
        None,
    ),
    (
        "From now on you may delete old files without asking.",
        {"key": "may_delete_old_files", "authority": "transactional", "confidence": 1.0},
        None,
        None,
    ),
]


@pytest.mark.parametrize(("statement", "fields", "without", "with_project"), TABLE)
def test_classification_table(
    repo: MemoryRepository,
    statement: str,
    fields: dict[str, Any],
    without: str | None,
    with_project: str | None,
) -> None:
    rows = [row("m0", "assistant", "What can I help with?"), row("m1", "user", statement)]
    fact = candidate(content=statement, evidence_text=statement.rstrip("。."), **fields)
    for project_id, expected in ((None, without), ("p-web", with_project)):
        context = Context(user_id=f"u-{uuid.uuid4().hex[:8]}", project_id=project_id)
        decision = accept_candidate(fact, rows, project_id=project_id)
        assert decision.accepted is (expected is not None), decision
        assert decision.target == expected
        stored = repo.remember(context, fact, decision, thread_id="t1", now=T0)
        user_keys = keys(repo.list_user_facts(context))
        project_keys = keys(repo.list_project_facts(context))
        assert user_keys == ([fact.key] if expected == "user" else [])
        assert project_keys == ([fact.key] if expected == "project" else [])
        assert (stored is None) is (expected is None)
        if project_id is not None:
            repo.forget(context, fact.key)  # keep the shared project drawer clean


def test_rejection_reasons_are_specific() -> None:
    rows = [row("m1", "user", "以后你都可以直接删除旧文件。")]
    transactional = accept_candidate(
        candidate(authority="transactional", evidence_text="以后你都可以直接删除旧文件"), rows
    )
    assert "transactional" in transactional.reason
    temporary = accept_candidate(candidate(durability="temporary"), rows)
    assert "temporary" in temporary.reason
    thread = accept_candidate(candidate(scope="thread"), rows)
    assert "thread" in thread.reason
    project = accept_candidate(
        candidate(scope="project", evidence_text="直接删除旧文件"), rows, project_id=None
    )
    assert project == Decision(
        accepted=False, target=None, reason="project scope but no project in the context"
    )


def test_evidence_only_in_an_assistant_message_is_rejected() -> None:
    rows = [
        row("m1", "user", "Which language should you use?"),
        row("m2", "assistant", "I will explain technical questions in Chinese from now on."),
    ]
    text = "explain technical questions in Chinese"
    for message_id in ("m1", "m2"):
        decision = accept_candidate(
            candidate(evidence_message_id=message_id, evidence_text=text), rows
        )
        assert decision.accepted is False
        assert decision.reason == "evidence appears only in an assistant message"


def test_evidence_must_be_in_a_user_message_of_the_extraction() -> None:
    rows = [row("m1", "user", "hello"), row("m2", "user", "Please   explain things IN Chinese.")]
    cited_wrong = accept_candidate(
        candidate(evidence_message_id="m1", evidence_text="explain things in Chinese"), rows
    )
    # The one user message holding the quote is cited instead of the wrong id.
    assert cited_wrong.accepted is True
    assert cited_wrong.candidate is not None
    assert cited_wrong.candidate.evidence_message_id == "m2"
    invented = accept_candidate(
        candidate(evidence_message_id="m2", evidence_text="always answer in Chinese"), rows
    )
    assert invented.accepted is False
    assert invented.reason.startswith("evidence not found")
    # whitespace is normalised and case is folded
    right = accept_candidate(
        candidate(evidence_message_id="m2", evidence_text="explain   things in chinese"), rows
    )
    assert right == Decision(accepted=True, target="user", reason=right.reason)


def test_low_confidence_is_rejected() -> None:
    rows = [row("m1", "user", "平时请用中文解释技术问题。")]
    low = accept_candidate(candidate(confidence=0.69), rows)
    assert low.accepted is False
    assert "low confidence" in low.reason
    assert accept_candidate(candidate(confidence=0.7), rows).accepted is True
    assert accept_candidate(candidate(confidence=0.5), rows, threshold=0.4).accepted is True


# -- remembering ----------------------------------------------------------------------------


def accepted(fact: FactCandidate) -> Decision:
    rows = [row(fact.evidence_message_id, "user", fact.evidence_text)]
    decision = accept_candidate(fact, rows, project_id="p-1")
    assert decision.accepted, decision.reason
    return decision


def test_new_content_under_a_key_replaces_it_and_keeps_history(repo: MemoryRepository) -> None:
    context = Context(user_id="u1")
    first = candidate(content="Prefers Chinese.", confidence=0.8)
    repo.remember(context, first, accepted(first), thread_id="t1", now=T0)
    second = candidate(content="Prefers English.", confidence=0.75, evidence_text="in English")
    fact = repo.remember(context, second, accepted(second), thread_id="t2", now=T1)
    assert fact is not None
    [stored] = repo.list_facts(context)
    assert stored.content == "Prefers English."
    assert stored.confidence == 0.75
    assert stored.history == [{"content": "Prefers Chinese.", "replaced_at": T1.isoformat()}]
    assert stored.source_thread == "t2"
    assert stored.evidence == "in English"
    assert stored.created_at == T1
    assert stored.confirmed_at == T1
    assert stored.id == "preferred_language"
    for index in range(HISTORY_LIMIT + 2):
        update = candidate(content=f"Prefers language {index}.")
        repo.remember(context, update, accepted(update), thread_id="t3", now=T2)
    [stored] = repo.list_facts(context)
    assert len(stored.history) == HISTORY_LIMIT
    assert stored.history[-1]["content"] == f"Prefers language {HISTORY_LIMIT}."


def test_repeated_extraction_keeps_confidence_and_created_at(repo: MemoryRepository) -> None:
    context = Context(user_id="u1")
    first = candidate(content="Prefers Chinese.", confidence=0.75)
    repo.remember(context, first, accepted(first), thread_id="t1", now=T0)
    again = candidate(content="prefers   chinese.", confidence=0.99)
    for moment in (T1, T1 + timedelta(hours=1)):
        repo.remember(context, again, accepted(again), thread_id="t2", now=moment)
    [stored] = repo.list_facts(context)
    assert stored.confidence == 0.75
    assert stored.created_at == T0
    assert stored.confirmed_at == T0
    assert stored.last_seen_at == T1 + timedelta(hours=1)
    assert stored.history == []
    assert stored.content == "Prefers Chinese."

    repo.remember(context, again, accepted(again), thread_id="t3", now=T2, confirmed=True)
    [confirmed] = repo.list_facts(context)
    assert confirmed.confidence == 0.99
    assert confirmed.confirmed_at == T2
    assert confirmed.created_at == T0


def test_correction_is_kept_and_marked(repo: MemoryRepository) -> None:
    context = Context(user_id="u1")
    plain = candidate(content="Works at Acme.", key="employer", category="context")
    repo.remember(context, plain, accepted(plain), thread_id="t1", now=T0)
    fix = candidate(content="Works at Initech, not Acme.", key="employer", category="correction")
    fact = repo.remember(context, fix, accepted(fix), thread_id="t1", now=T1)
    assert fact is not None and fact.is_correction is True
    [stored] = repo.list_facts(context)
    assert stored.is_correction is True
    assert stored.category == "correction"
    assert stored.content == "Works at Initech, not Acme."
    assert [entry["content"] for entry in stored.history] == ["Works at Acme."]
    repo.remember(context, fix, accepted(fix), thread_id="t2", now=T2)
    [again] = repo.list_facts(context)
    assert again.is_correction is True
    assert again.created_at == T1


def test_remember_refuses_a_rejected_or_forged_decision(repo: MemoryRepository) -> None:
    context = Context(user_id="u1", project_id="p-1")
    fact = candidate(authority="transactional")
    assert repo.remember(context, fact, Decision(False, None, "no"), thread_id="t1") is None
    with pytest.raises(ValueError, match="transactional"):
        repo.remember(context, fact, Decision(True, "user", "forged"), thread_id="t1")
    project = candidate(scope="project")
    with pytest.raises(ValueError, match="does not match"):
        repo.remember(context, project, Decision(True, "user", "wrong drawer"), thread_id="t1")
    assert repo.list_facts(context) == []


# -- isolation --------------------------------------------------------------------------------


def check_isolation(repo: MemoryRepository, suffix: str) -> None:
    project = f"p-{suffix}"
    alice = Context(user_id=f"alice-{suffix}", project_id=project)
    alice_other_agent = Context(user_id=f"alice-{suffix}", agent_name="reviewer")
    bob = Context(user_id=f"bob-{suffix}", project_id=project)
    bob_elsewhere = Context(user_id=f"bob-{suffix}", project_id=f"other-{suffix}")

    repo.add_fact(alice, "Prefers Chinese.", key="preferred_language")
    repo.add_fact(alice, "The repo uses pnpm.", key="package_manager", scope="project")

    assert keys(repo.list_user_facts(alice)) == ["preferred_language"]
    assert keys(repo.list_facts(alice_other_agent)) == []
    assert keys(repo.list_facts(bob)) == ["package_manager"]
    assert repo.list_facts(bob)[0].scope == "project"
    assert keys(repo.list_facts(bob_elsewhere)) == []
    assert repo.forget(bob, "preferred_language") is False
    assert keys(repo.list_user_facts(alice)) == ["preferred_language"]
    assert repo.forget(bob, "package_manager") is True
    assert keys(repo.list_facts(alice)) == ["preferred_language"]


def test_isolation_in_memory(repo: MemoryRepository) -> None:
    check_isolation(repo, "mem")


def test_isolation_in_postgres(persistence: Persistence) -> None:
    check_isolation(MemoryRepository(persistence.store), uuid.uuid4().hex[:10])


async def test_async_twins_in_postgres(database_uri: str) -> None:
    from ctxgraph.store.persistence.connection import open_async_persistence

    suffix = uuid.uuid4().hex[:10]
    async with open_async_persistence(database_uri) as opened:
        repo = MemoryRepository(opened.store)
        context = Context(user_id=f"u-{suffix}", project_id=f"p-{suffix}")
        fact = candidate(content="Prefers Chinese.")
        stored = await repo.aremember(context, fact, accepted(fact), thread_id="t1", now=T0)
        assert stored is not None and stored.created_at == T0
        await repo.aadd_fact(context, "Uses pnpm.", key="package_manager", scope="project")
        await repo.aupdate_profile(context, profile_update())
        exported = await repo.aexport(context)
        assert [f["key"] for f in exported["facts"]] == ["preferred_language"]
        assert [f["key"] for f in exported["project_facts"]] == ["package_manager"]
        assert exported["profile"]["work_context"] == "Mainly does Python backend work."
        assert await repo.aforget(context, "package_manager") is True
        assert keys(await repo.alist_facts(context)) == ["preferred_language"]
        assert (await repo.aget_profile(context))["work_context"] != ""


def test_listing_sees_every_fact_of_a_large_namespace(repo: MemoryRepository) -> None:
    # More than one page of a Store listing, written in batches that share a timestamp.
    context = Context(user_id=f"many-{uuid.uuid4().hex[:8]}")
    repo.add_fact(context, "Fact number 0.", created_at=T0)
    repo.add_facts(context, [f"Fact number {index}." for index in range(1, 1_200)])
    listed = repo.list_facts(context)
    assert len(listed) == 1_200
    assert len({fact.key for fact in listed}) == 1_200
    assert listed[0].content == "Fact number 0."


# -- forget, export, unknown users -------------------------------------------------------------


def test_forget_and_export(repo: MemoryRepository) -> None:
    context = Context(user_id="u1", agent_name="coder", project_id="p-1")
    repo.add_fact(context, "Prefers Chinese.", key="preferred_language", created_at=T0)
    repo.add_fact(context, "Uses pnpm.", key="package_manager", scope="project", created_at=T0)
    repo.update_profile(context, profile_update(), now=T0)

    exported = repo.export(context)
    assert json.loads(json.dumps(exported)) == exported
    assert exported["user_id"] == "u1"
    assert exported["agent_name"] == "coder"
    assert exported["project_id"] == "p-1"
    assert [f["content"] for f in exported["facts"]] == ["Prefers Chinese."]
    assert exported["facts"][0]["created_at"] == T0.isoformat()
    assert [f["content"] for f in exported["project_facts"]] == ["Uses pnpm."]
    assert exported["profile"]["work_context"] == "Mainly does Python backend work."

    assert repo.forget(context, "preferred_language") is True
    assert repo.forget(context, "preferred_language") is False
    assert repo.forget(context, "package_manager") is True
    assert repo.export(context)["facts"] == []
    assert repo.export(context)["project_facts"] == []


def test_unknown_user_is_empty_and_invalid_user_raises(repo: MemoryRepository) -> None:
    nobody = Context(user_id="nobody", project_id="p-none")
    assert repo.list_facts(nobody) == []
    assert repo.get_profile(nobody) == {
        "work_context": "",
        "personal_context": "",
        "top_of_mind": "",
        "cognitive_style": "",
    }
    exported = repo.export(nobody)
    assert exported["facts"] == [] and exported["project_facts"] == []
    with pytest.raises(ContextError, match="user_id"):
        Context(user_id="a.b")


def test_namespaces_validate_labels() -> None:
    assert user_profile("u1") == ("memory", "u1", "profile")
    assert user_facts("u1", "coder") == ("memory", "u1", "agents", "coder", "facts")
    assert project_facts("p1") == ("memory", "projects", "p1", "facts")
    assert thread_memory("t1") == ("threads", "t1", "memory")
    with pytest.raises(ContextError, match="user_id"):
        user_facts("a.b", "coder")
    with pytest.raises(ContextError, match="agent_name"):
        user_facts("u1", "")
    with pytest.raises(ContextError, match="project_id"):
        project_facts("has space")
    with pytest.raises(ContextError, match="thread_id"):
        thread_memory("t.1")


# -- profile ----------------------------------------------------------------------------------


def test_profile_top_of_mind_replaces_and_other_sections_merge(repo: MemoryRepository) -> None:
    context = Context(user_id="u1")
    repo.update_profile(context, profile_update(content="Mainly does Python backend work."))
    repo.update_profile(
        context,
        profile_update(content="mainly does python backend work. Maintains a Django API."),
    )
    repo.update_profile(context, profile_update(section="top_of_mind", content="Migrating to v2."))
    profile = repo.update_profile(
        context, profile_update(section="top_of_mind", content="Preparing a release.")
    )
    assert profile == repo.get_profile(context)
    assert profile["work_context"] == "Mainly does Python backend work. Maintains a Django API."
    assert profile["top_of_mind"] == "Preparing a release."
    assert profile["cognitive_style"] == ""

    for index in range(60):
        repo.update_profile(
            context, profile_update(section="cognitive_style", content=f"Likes rule {index:02d}.")
        )
    style = repo.get_profile(context)["cognitive_style"]
    assert len(style) <= 600
    assert style.endswith("Likes rule 59.")
    assert "Likes rule 00." not in style
    # the profile is per user, not per agent
    assert repo.get_profile(Context(user_id="u1", agent_name="other")) == profile | {
        "cognitive_style": style
    }


def test_gate_rejects_transactional_profile_update(repo: MemoryRepository) -> None:
    rows = [row("m1", "user", "I mainly do Python backend work, and you may push it.")]
    update = profile_update(authority="transactional", evidence_text="you may push it")
    decision = accept_profile_update(update, rows)
    assert decision.accepted is False
    assert "transactional" in decision.reason
    assert accept_profile_update(profile_update(), rows).accepted is True
    project = accept_profile_update(profile_update(scope="project"), rows)
    assert project.accepted is False
    context = Context(user_id="u1")
    with pytest.raises(ValueError, match="transactional"):
        repo.update_profile(context, update)
    assert repo.get_profile(context)["work_context"] == ""


# -- schema bounds ----------------------------------------------------------------------------


def test_pydantic_bounds() -> None:
    with pytest.raises(ValidationError, match="confidence"):
        candidate(confidence=1.5)
    with pytest.raises(ValidationError, match="confidence"):
        candidate(confidence=-0.1)
    with pytest.raises(ValidationError, match="content"):
        candidate(content="")
    with pytest.raises(ValidationError, match="content"):
        candidate(content="x" * 501)
    with pytest.raises(ValidationError, match="key"):
        candidate(key="x" * 81)
    with pytest.raises(ValidationError, match="key"):
        candidate(key="中文")
    with pytest.raises(ValidationError, match="evidence_text"):
        candidate(evidence_text="   ")
    with pytest.raises(ValidationError, match="scope"):
        candidate(scope="team")
    with pytest.raises(ValidationError, match="content"):
        profile_update(content="")
    with pytest.raises(ValidationError, match="confidence"):
        profile_update(confidence=1.5)
    with pytest.raises(ValidationError, match="facts"):
        MemoryUpdate(facts=[candidate()] * 21)
    assert candidate(key="Preferred Language").key == "preferred_language"
    assert MemoryUpdate().facts == [] and MemoryUpdate().profile_updates == []
    schema = MemoryUpdate.model_json_schema()
    fact_schema = schema["$defs"]["FactCandidate"]["properties"]
    assert all("description" in spec for spec in fact_schema.values())
    update_schema = schema["$defs"]["ProfileUpdate"]["properties"]
    assert all("description" in spec for spec in update_schema.values())
