"""ctxgraph's authorization handlers for a LangGraph server with custom auth.

``add_handlers(auth)`` registers, on an ``Auth`` whose ``@auth.authenticate`` the
deployment writes, the rules of ctxgraph's tenancy. The authenticated user's
``identity`` is the user; it must follow the user id rule (``Context.user_id``) and may
not be ``projects`` (that word is the project part of the ``memory`` namespace).

- Threads, runs and crons: creating one stamps ``metadata["owner"] = identity``; reading,
  searching, updating, deleting and running are filtered by ``{"owner": identity}``, so
  another user's thread answers 404. A run's ``context.user_id`` is set to the identity
  when missing and refused (403) when it names someone else.
- Assistants: every authenticated user may read and search them; only an operator may
  create, update or delete one.
- Store: ``("memory", identity, ...)``; ``("memory", "projects", P, ...)`` when the
  ``projects`` policy allows the user project ``P``; ``("threads", T, ...)`` when the user
  owns thread ``T`` (checked with one in-process ``threads.get``, which the threads rule
  above filters). ``list_namespaces`` without a prefix lists ``("memory", identity)``.
- Operators (permission ``ctxgraph:operator``, or an identity in ``operators``) pass every
  filter, may use any namespace and may run the ``memory_worker`` and
  ``compaction_worker`` graphs. A non-operator may run ``compaction_worker`` only for a
  thread they own: that is how the ``compact`` node's background jobs
  (``ServerJobQueue``) run, as the user of the run that queued them.
- ``forget``: every user may run it for themselves, as a stateless run only (a run on a
  thread is refused for everyone, 403). An input ``user_id`` naming someone else, or a
  ``thread_id`` the caller does not own, is refused (403) unless the caller is an
  operator.
- Anything else is refused by a default-deny global handler (kept when the deployment
  registered its own global handler first).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Mapping
from typing import Any
from uuid import UUID, uuid5

from langgraph_sdk import Auth, get_client
from langgraph_sdk.errors import LangGraphError

from ctxgraph.state.context import ContextError, validate_label

OPERATOR_PERMISSION = "ctxgraph:operator"
"""The permission (from ``@auth.authenticate``) that makes a user an operator."""

OWNER = "owner"
"""The metadata key holding the identity that created a thread, run or cron."""

MEMORY_WORKER = "memory_worker"
COMPACTION_WORKER = "compaction_worker"
WORKER_GRAPHS = frozenset({MEMORY_WORKER, COMPACTION_WORKER})
"""Graph ids (as in ``langgraph.json``) only operators may run."""

FORGET_GRAPH = "forget"
"""The graph id (as in ``langgraph.json``) of the forget graph."""

PROJECTS = "projects"
"""The second part of the project namespaces ``("memory", "projects", P, ...)``."""

ProjectPolicy = Callable[[str, str], bool]
"""``(identity, project_id) -> allowed``: whether a user may use a project's namespaces."""

Projects = ProjectPolicy | Mapping[str, Collection[str]] | None
"""A policy, a mapping identity → project ids, or None (no project namespaces)."""


def _forbidden(detail: str) -> Auth.exceptions.HTTPException:
    return Auth.exceptions.HTTPException(status_code=403, detail=detail)


_GRAPH_NAMESPACE = UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8")
"""The namespace of the ``uuid5`` a LangGraph server names a graph's default assistant by.

Only a shortcut: an assistant id not found this way is looked up on the server.
"""


def _graph_assistant(graph_id: str) -> str:
    """The id of the assistant a LangGraph server creates for ``graph_id``."""
    return str(uuid5(_GRAPH_NAMESPACE, graph_id))


class _Handlers:
    """The handlers ``add_handlers`` registers, sharing one configuration."""

    def __init__(self, operators: Collection[str], projects: Projects) -> None:
        self._operators = frozenset(operators)
        self._projects = projects
        self._workers = {_graph_assistant(graph): graph for graph in (*WORKER_GRAPHS, FORGET_GRAPH)}

    # --- who ---------------------------------------------------------------

    def identity(self, ctx: Auth.types.AuthContext) -> str:
        """The caller's identity, checked against the user id rule."""
        identity = ctx.user.identity
        try:
            validate_label("the authenticated identity", identity)
        except ContextError as error:
            raise _forbidden(str(error)) from None
        if identity == PROJECTS:
            raise _forbidden(f"the identity {PROJECTS!r} is reserved for project namespaces")
        return identity

    def is_operator(self, ctx: Auth.types.AuthContext) -> bool:
        """Whether the caller has the operator permission or is a configured operator."""
        return OPERATOR_PERMISSION in ctx.permissions or ctx.user.identity in self._operators

    def may_use_project(self, identity: str, project_id: str) -> bool:
        """Whether the project policy gives ``identity`` the project ``project_id``."""
        policy = self._projects
        if policy is None:
            return False
        if isinstance(policy, Mapping):
            return project_id in policy.get(identity, ())
        return bool(policy(identity, project_id))

    def owner_filter(self, ctx: Auth.types.AuthContext) -> Auth.types.FilterType | None:
        """``{"owner": identity}``, or no filter for an operator."""
        if self.is_operator(ctx):
            return None
        return {OWNER: self.identity(ctx)}

    def stamp(self, ctx: Auth.types.AuthContext, value: Any) -> Auth.types.FilterType:
        """Set ``value["metadata"]["owner"]`` to the caller; return the owner filter."""
        identity = self.identity(ctx)
        metadata = value.get("metadata")
        if metadata is None:
            metadata = value["metadata"] = {}
        metadata[OWNER] = identity
        return {OWNER: identity}

    # --- threads and runs ----------------------------------------------------

    async def thread_create(self, *, ctx: Auth.types.AuthContext, value: Any) -> Any:
        """A new thread belongs to its creator."""
        return self.stamp(ctx, value)

    async def thread_access(self, *, ctx: Auth.types.AuthContext, value: Any) -> Any:
        """Read, search and delete see only the caller's threads (operators: all)."""
        return self.owner_filter(ctx)

    async def thread_update(self, *, ctx: Auth.types.AuthContext, value: Any) -> Any:
        """Update only the caller's threads, and never their owner."""
        if self.is_operator(ctx):
            return None
        metadata = value.get("metadata")
        if isinstance(metadata, dict) and OWNER in metadata:
            metadata[OWNER] = self.identity(ctx)
        return self.owner_filter(ctx)

    async def create_run(self, *, ctx: Auth.types.AuthContext, value: Any) -> Any:
        """A run: on the caller's thread, as the caller, of a graph the caller may run."""
        identity = self.identity(ctx)
        kwargs = value.get("kwargs")
        kwargs = kwargs if isinstance(kwargs, dict) else {}
        self.bind_context(identity, kwargs)
        graph = await self.graph_of(value.get("assistant_id"))
        if graph in WORKER_GRAPHS and not self.is_operator(ctx):
            await self.check_worker_run(graph, kwargs.get("input"))
        if graph == FORGET_GRAPH:
            await self.check_forget_run(ctx, identity, value, kwargs.get("input"))
        self.stamp(ctx, value)
        return self.owner_filter(ctx)

    def bind_context(self, identity: str, kwargs: dict[str, Any]) -> None:
        """Make ``context.user_id`` the identity; refuse a context naming another user."""
        context = kwargs.get("context")
        if context is None:
            kwargs["context"] = {"user_id": identity}
            return
        if not isinstance(context, dict):
            return
        named = context.get("user_id")
        if named in (None, ""):
            context["user_id"] = identity
        elif named != identity:
            raise _forbidden(
                f"context.user_id {named!r} is not the authenticated user {identity!r}: "
                "omit user_id or pass your own"
            )

    async def graph_of(self, assistant_id: object) -> str | None:
        """The graph id of the run's assistant (a graph id, or an assistant's UUID)."""
        if assistant_id is None:
            return None
        text = str(assistant_id)
        if text in self._workers:
            return self._workers[text]
        try:
            UUID(text)
        except ValueError:
            return text  # a graph id
        try:
            assistant = await get_client().assistants.get(text)
        except LangGraphError:
            return None  # the server answers this run with its own 404
        return str(assistant["graph_id"])

    async def check_worker_run(self, graph: str, payload: object) -> None:
        """A non-operator may run ``compaction_worker`` for a thread they own only."""
        thread_id = payload.get("thread_id") if isinstance(payload, dict) else None
        if (
            graph == COMPACTION_WORKER
            and isinstance(thread_id, str)
            and await self.owns_thread(thread_id)
        ):
            return
        raise _forbidden(
            f"only an operator (permission {OPERATOR_PERMISSION!r}) may run the {graph!r} "
            "graph, except compaction jobs for the caller's own threads"
        )

    async def check_forget_run(
        self, ctx: Auth.types.AuthContext, identity: str, value: Any, payload: object
    ) -> None:
        """``forget``: stateless, for the caller, on the caller's threads (operators: any)."""
        if value.get("thread_id") is not None:
            raise _forbidden(
                f"run the {FORGET_GRAPH!r} graph as a stateless run "
                f"(runs.wait(None, {FORGET_GRAPH!r}, input=...)), not on a thread"
            )
        if self.is_operator(ctx):
            return
        payload = payload if isinstance(payload, dict) else {}
        named = payload.get("user_id")
        if named not in (None, "", identity):
            raise _forbidden(
                f"forget for user {named!r}: only an operator (permission "
                f"{OPERATOR_PERMISSION!r}) may forget for another user than {identity!r}"
            )
        thread_id = payload.get("thread_id")
        if thread_id is not None and not (
            isinstance(thread_id, str) and await self.owns_thread(thread_id)
        ):
            raise _forbidden(f"forget in thread {thread_id!r}: not a thread of {identity!r}")

    async def owns_thread(self, thread_id: str) -> bool:
        """Whether the caller may read ``thread_id`` (the thread rule filters by owner)."""
        try:
            UUID(thread_id)
            await get_client().threads.get(thread_id)
        except (ValueError, LangGraphError):
            return False
        return True

    # --- crons ---------------------------------------------------------------

    async def cron_create(self, *, ctx: Auth.types.AuthContext, value: Any) -> Any:
        """A cron belongs to its creator and runs as the creator."""
        identity = self.identity(ctx)
        if not isinstance(value.get("metadata"), dict):
            if not self.is_operator(ctx):
                raise _forbidden("a cron without metadata cannot record its owner")
        else:
            value["metadata"][OWNER] = identity
        payload = value.get("payload")
        if isinstance(payload, dict):
            self.bind_context(identity, payload)
            graph = await self.graph_of(payload.get("assistant_id"))
            if graph in WORKER_GRAPHS and not self.is_operator(ctx):
                raise _forbidden(f"only an operator may schedule the {graph!r} graph")
        return self.owner_filter(ctx)

    # --- assistants ----------------------------------------------------------

    async def assistant_read(self, *, ctx: Auth.types.AuthContext, value: Any) -> Any:
        """Every authenticated user may read and search assistants."""
        self.identity(ctx)
        return None

    async def assistant_write(self, *, ctx: Auth.types.AuthContext, value: Any) -> Any:
        """Only operators create, update or delete assistants."""
        if not self.is_operator(ctx):
            raise _forbidden(
                f"only an operator (permission {OPERATOR_PERMISSION!r}) may change assistants"
            )
        return None

    # --- store ---------------------------------------------------------------

    async def store(self, *, ctx: Auth.types.AuthContext, value: Any) -> Any:
        """Store access only in the caller's memory, projects and threads."""
        identity = self.identity(ctx)
        if self.is_operator(ctx):
            return None
        namespace = tuple(value.get("namespace") or ())
        if ctx.action == "list_namespaces" and not namespace:
            value["namespace"] = ("memory", identity)
            return None
        if await self.may_use(identity, namespace):
            return None
        raise _forbidden(
            f"namespace {list(namespace)!r} is not yours: use ['memory', {identity!r}, ...], "
            "a project the deployment gives you, or ['threads', <your thread id>, ...]"
        )

    async def may_use(self, identity: str, namespace: tuple[str, ...]) -> bool:
        """Whether ``namespace`` (or a prefix of it) is the caller's to use."""
        match namespace:
            case ("memory", str(user), *_) if user == identity:
                return True
            case ("memory", "projects", str(project), *_):
                return self.may_use_project(identity, project)
            case ("threads", str(thread_id), *_):
                return await self.owns_thread(thread_id)
        return False

    async def deny(self, *, ctx: Auth.types.AuthContext, value: Any) -> Any:
        """Default deny: a resource or action ctxgraph has no rule for."""
        if self.is_operator(ctx):
            return None
        raise _forbidden(f"no ctxgraph rule allows {ctx.resource}.{ctx.action}")


_ROUTES: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    (
        "threads",
        (
            ("create", "thread_create"),
            ("read", "thread_access"),
            ("search", "thread_access"),
            ("delete", "thread_access"),
            ("update", "thread_update"),
            ("create_run", "create_run"),
        ),
    ),
    (
        "crons",
        (
            ("create", "cron_create"),
            ("read", "thread_access"),
            ("search", "thread_access"),
            ("delete", "thread_access"),
            ("update", "thread_update"),
        ),
    ),
    (
        "assistants",
        (
            ("read", "assistant_read"),
            ("search", "assistant_read"),
            ("create", "assistant_write"),
            ("update", "assistant_write"),
            ("delete", "assistant_write"),
        ),
    ),
    (
        "store",
        tuple(
            (action, "store") for action in ("put", "get", "search", "delete", "list_namespaces")
        ),
    ),
)
"""Each resource's actions and the ``_Handlers`` method that authorizes them, in order."""


def add_handlers(
    auth: Auth,
    *,
    operators: Collection[str] = (),
    projects: Projects = None,
) -> Auth:
    """Register ctxgraph's authorization handlers on ``auth`` and return it.

    Args:
        auth: An ``Auth`` with (or about to get) the deployment's ``@auth.authenticate``;
            its users' ``identity`` is the ctxgraph user id.
        operators: Identities that are operators besides users holding the
            ``ctxgraph:operator`` permission.
        projects: Which project namespaces a user may use: a callable
            ``(identity, project_id) -> bool`` or a mapping identity → project ids.
            Default none.

    Returns:
        ``auth``, with handlers for threads, runs, crons, assistants and the Store, and a
        default-deny global handler unless ``auth`` already had one.

    Raises:
        ValueError: ``auth`` already has a handler for one of these resource actions.

    """
    handlers = _Handlers(operators, projects)
    for resource, actions in _ROUTES:
        on = getattr(auth.on, resource)
        for action, name in actions:
            getattr(on, action)(getattr(handlers, name))
    with contextlib.suppress(ValueError):  # the deployment's own global handler stays
        auth.on(handlers.deny)
    return auth
