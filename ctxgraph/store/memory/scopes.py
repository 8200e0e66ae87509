"""Where a context's facts live: the namespace of each scope and the ones a search reads."""

from __future__ import annotations

from ctxgraph.state.context import Context, ContextError
from ctxgraph.store.memory.facts import FactScope
from ctxgraph.store.namespaces import project_facts, user_facts

Namespace = tuple[str, ...]


def fact_namespace(context: Context, scope: str) -> Namespace:
    """The namespace of ``context``'s facts in ``scope`` (``"user"`` or ``"project"``).

    Raises:
        ContextError: ``scope="project"`` with a context without a ``project_id``.
        ValueError: Any other scope.

    """
    if scope == "project":
        if context.project_id is None:
            raise ContextError("a project fact needs a context with a project_id")
        return project_facts(context.project_id)
    if scope == "user":
        return user_facts(context.user_id, context.agent_name)
    raise ValueError(f"facts are stored for scope 'user' or 'project', got {scope!r}")


def search_scopes(context: Context) -> list[tuple[Namespace, FactScope]]:
    """The user's namespace for the agent, then the project's when the context has one."""
    scopes: list[tuple[Namespace, FactScope]] = [(fact_namespace(context, "user"), "user")]
    if context.project_id is not None:
        scopes.append((fact_namespace(context, "project"), "project"))
    return scopes
