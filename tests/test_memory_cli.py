"""``ctxgraph memory list|search|forget|export`` on facts stored in the session Postgres."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest

from ctxgraph.graph.cli.main import SEARCH_LIMITS
from ctxgraph.nodes.memory.search_tool import MAX_LIMIT, MIN_LIMIT
from ctxgraph.state.context import Context
from ctxgraph.store.memory.repository import MemoryRepository
from ctxgraph.store.memory.rules import ProfileUpdate
from ctxgraph.store.persistence.connection import Persistence
from tests.support.cli import run_ctxgraph


def _user() -> str:
    return f"u-{uuid.uuid4().hex[:10]}"


def _seed(persistence: Persistence, user: str, project: str | None = None) -> Context:
    context = Context(user_id=user, agent_name="coder", project_id=project)
    repository = MemoryRepository(persistence.store)
    repository.add_fact(
        context,
        "Prefers Python for backend work.",
        key="preferred_language",
        category="preference",
        confidence=0.92,
        created_at=datetime(2025, 3, 4, 10, 0, tzinfo=UTC),
    )
    repository.add_fact(
        context,
        "Is not a Java developer any more.",
        key="role",
        category="correction",
        confidence=0.8,
        created_at=datetime(2025, 3, 5, 10, 0, tzinfo=UTC),
    )
    if project is not None:
        repository.add_fact(
            context,
            "The service deploys with Helm.",
            key="deploy_tool",
            scope="project",
            created_at=datetime(2025, 3, 6, 10, 0, tzinfo=UTC),
        )
    return context


def test_list_shows_each_fact_on_one_line(
    python: str, subprocess_env: dict[str, str], persistence: Persistence
) -> None:
    user = _user()
    _seed(persistence, user, project="svc")
    result = run_ctxgraph(
        python,
        subprocess_env,
        *("memory", "list", "--user", user, "--agent", "coder", "--project", "svc"),
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    language = next(line for line in lines if "preferred_language" in line)
    assert "Prefers Python for backend work." in language
    assert "preference" in language
    assert "0.92" in language
    assert "2025-03-04" in language
    assert "[correction]" not in language
    role = next(line for line in lines if line.startswith("- role:"))
    assert role.endswith("[correction]")
    heading = lines.index("Project svc facts:")
    deploy = next(i for i, line in enumerate(lines) if "deploy_tool" in line)
    assert deploy > heading
    assert "The service deploys with Helm." in lines[deploy]


def test_list_is_per_agent_and_unknown_user_lists_nothing(
    python: str, subprocess_env: dict[str, str], persistence: Persistence
) -> None:
    user = _user()
    _seed(persistence, user)
    other_agent = run_ctxgraph(python, subprocess_env, "memory", "list", "--user", user)
    assert other_agent.returncode == 0, other_agent.stderr
    assert "preferred_language" not in other_agent.stdout
    unknown = run_ctxgraph(python, subprocess_env, "memory", "list", "--user", _user())
    assert unknown.returncode == 0, unknown.stderr
    assert not [line for line in unknown.stdout.splitlines() if line.startswith("- ")]
    assert "No facts remembered" in unknown.stdout


def test_forget_deletes_a_fact(
    python: str, subprocess_env: dict[str, str], persistence: Persistence
) -> None:
    user = _user()
    context = _seed(persistence, user)
    identity = ("--user", user, "--agent", "coder")
    result = run_ctxgraph(
        python, subprocess_env, "memory", "forget", *identity, "preferred_language"
    )
    assert result.returncode == 0, result.stderr
    first, *receipt = result.stdout.splitlines()
    assert first == "forgot preferred_language"
    assert receipt[0].startswith(f"forget {user} at ")
    assert "memory fact memory/" in result.stdout and "receipt " in receipt[-1]
    keys = [fact.key for fact in MemoryRepository(persistence.store).list_facts(context)]
    assert keys == ["role"]
    listed = run_ctxgraph(python, subprocess_env, "memory", "list", *identity)
    assert "preferred_language" not in listed.stdout
    assert "role" in listed.stdout


def test_forget_of_a_missing_key_exits_2(
    python: str, subprocess_env: dict[str, str], persistence: Persistence
) -> None:
    user = _user()
    _seed(persistence, user)
    result = run_ctxgraph(
        python, subprocess_env, "memory", "forget", "--user", user, "--agent", "coder", "nope"
    )
    assert result.returncode == 2
    assert result.stderr.strip() == f"ctxgraph: no fact with key nope for user {user}"
    assert result.stdout == ""


def test_export_prints_the_memory_bundle(
    python: str, subprocess_env: dict[str, str], persistence: Persistence
) -> None:
    user = _user()
    _seed(persistence, user, project="svc")
    result = run_ctxgraph(
        python,
        subprocess_env,
        *("memory", "export", "--user", user, "--agent", "coder", "--project", "svc"),
    )
    assert result.returncode == 0, result.stderr
    exported = json.loads(result.stdout)
    assert exported["user_id"] == user
    assert exported["agent_name"] == "coder"
    assert exported["project_id"] == "svc"
    assert exported["format"] == "ctxgraph.memory" and exported["schema_version"] == 1
    facts = {fact["key"]: fact["value"] for fact in exported["facts"] if fact["scope"] == "user"}
    assert set(facts) == {"preferred_language", "role"}
    assert facts["preferred_language"]["confidence"] == 0.92
    assert facts["role"]["is_correction"] is True
    shared = [fact["key"] for fact in exported["facts"] if fact["scope"] == "project"]
    assert shared == ["deploy_tool"]


def test_bad_user_id_exits_2(python: str, subprocess_env: dict[str, str]) -> None:
    result = run_ctxgraph(python, subprocess_env, "memory", "list", "--user", "a b")
    assert result.returncode == 2
    assert "Context.user_id" in result.stderr


def test_search_ranks_facts_with_scores_and_stays_in_the_users_namespaces(
    python: str, subprocess_env: dict[str, str], persistence: Persistence
) -> None:
    user = _user()
    _seed(persistence, user, project="svc")
    args = ("memory", "search", "--user", user, "--agent", "coder", "--project", "svc")
    result = run_ctxgraph(python, subprocess_env, *args, "python backend", "--limit", "10")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    score, line = lines[0].split(maxsplit=1)
    assert float(score) > 0
    assert line.startswith("- preferred_language: Prefers Python for backend work.")
    helm = run_ctxgraph(python, subprocess_env, *args, "helm")
    assert helm.stdout.splitlines()[0].split(maxsplit=1)[1].startswith("- deploy_tool:")
    # Another agent of the same user has no facts to find.
    other = run_ctxgraph(
        python, subprocess_env, "memory", "search", "--user", user, "--agent", "x", "python"
    )
    assert other.returncode == 0, other.stderr
    assert other.stdout == f"No remembered fact of user {user} (agent x) matches 'python'.\n"


@pytest.mark.parametrize("limit", ["0", "11", "50", "-1", "five", "2.5"])
def test_search_refuses_a_limit_outside_1_to_10_as_a_usage_error(
    python: str, subprocess_env: dict[str, str], limit: str
) -> None:
    args = ("memory", "search", "--user", _user(), "python", "--limit", limit)
    result = run_ctxgraph(python, subprocess_env, *args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("usage: ctxgraph memory search ")
    assert result.stderr.endswith(
        "ctxgraph memory search: error: argument --limit: must be a whole number from 1 to "
        f"10, got {limit!r}\n"
    )


def test_the_search_limits_are_those_of_the_memory_search_tool() -> None:
    assert SEARCH_LIMITS == (MIN_LIMIT, MAX_LIMIT)


def test_a_broken_embedding_configuration_is_a_user_error(
    python: str, subprocess_env: dict[str, str]
) -> None:
    env = {
        **subprocess_env,
        "CTXGRAPH_EMBEDDING_MODEL": "text-embedding-3-small",
        "CTXGRAPH_EMBEDDING_DIMS": "many",
    }
    result = run_ctxgraph(python, env, "memory", "search", "--user", _user(), "anything")
    assert result.returncode == 2
    assert result.stderr.startswith("ctxgraph: CTXGRAPH_EMBEDDING_DIMS must be a whole number")


def test_a_profile_over_the_memory_budget_stops_the_turn_with_advice(
    python: str, subprocess_env: dict[str, str], persistence: Persistence
) -> None:
    user = _user()
    services = ", ".join(f"service {i}" for i in range(40))
    MemoryRepository(persistence.store).update_profile(
        Context(user_id=user),
        ProfileUpdate(
            section="work_context",
            content=f"Works on {services}.",
            scope="user",
            durability="durable",
            authority="descriptive",
            confidence=0.9,
            evidence_message_id="m1",
            evidence_text="Works on",
        ),
    )
    env = {**subprocess_env, "CTXGRAPH_MEMORY_BUDGET": "60"}
    thread = f"t-{uuid.uuid4().hex[:8]}"
    result = run_ctxgraph(python, env, "run", "--user", user, "--thread", thread, "hello")
    assert result.returncode == 2
    assert "ctxgraph: the memory profile is" in result.stderr
    assert "shorten the profile sections" in result.stderr
    # The message is kept in the thread.
    shown = run_ctxgraph(python, subprocess_env, "threads", "show", thread)
    assert "[1] user: hello" in shown.stdout


def test_search_ages_facts_as_the_environment_says(
    python: str, subprocess_env: dict[str, str], persistence: Persistence
) -> None:
    """``CTXGRAPH_MEMORY_AGE_FROM`` reaches ``ctxgraph memory search`` as it reaches the graph."""
    from datetime import timedelta

    from tests.test_memory_search import reconfirmed_and_unconfirmed

    user = _user()
    context = Context(user_id=user)
    reconfirmed_and_unconfirmed(
        MemoryRepository(persistence.store), context, now=datetime.now(UTC) - timedelta(hours=1)
    )

    def order(age_from: str) -> list[str]:
        env = {**subprocess_env, "CTXGRAPH_MEMORY_AGE_FROM": age_from}
        result = run_ctxgraph(python, env, "memory", "search", "--user", user, "prefers")
        assert result.returncode == 0, result.stderr
        return [line.split("- ", 1)[1].split(":", 1)[0] for line in result.stdout.splitlines()]

    assert order("confirmed") == ["drink_tea", "drink_coffee"]
    assert order("created") == ["drink_coffee", "drink_tea"]
    bad = run_ctxgraph(
        python,
        {**subprocess_env, "CTXGRAPH_MEMORY_AGE_FROM": "seen"},
        "memory",
        "search",
        "--user",
        user,
        "prefers",
    )
    assert bad.returncode == 2
    assert "memory_age_from" in bad.stderr
