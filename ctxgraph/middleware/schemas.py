"""The state each ctxgraph middleware adds to a ``create_agent`` agent: its part's state.

The keys and reducers are the parts' own (``Part.state``, the core keys of
``ctxgraph.state.graph_state``), so a thread run by ``create_agent`` holds what a ctxgraph
thread holds, and the tools that read ctxgraph threads (``ctxgraph threads show/verify``,
``ctxgraph forget``) read it too. Every key is internal: none is agent input (a caller's
``memory_view`` or ``tools_unlocked`` is dropped), and only what the graph returns
(``summary``) is agent output.
"""

from __future__ import annotations

from typing import Annotated, Any, NotRequired, get_args, get_origin, get_type_hints

from langchain.agents.middleware.types import OmitFromInput, PrivateStateAttr
from typing_extensions import TypedDict

from ctxgraph.state.graph_state import CoreState, OutputState


def private_state(name: str, state: type[Any] | None) -> type[Any]:
    """The core keys and ``state``'s as a middleware schema, none of them agent input."""
    fields: dict[str, Any] = {}
    for source in (CoreState, *([state] if state else [])):
        for key, kind in get_type_hints(source, include_extras=True).items():
            mark = OmitFromInput if key in OutputState.__annotations__ else PrivateStateAttr
            fields[key] = _marked(kind, mark)
    schema: type[Any] = TypedDict(name, fields)  # type: ignore[misc]
    return schema


def _marked(kind: Any, mark: object) -> Any:
    """``NotRequired[Annotated[T, mark, ...]]`` for a ``NotRequired`` field type ``kind``.

    The mark goes first: LangGraph takes a field's reducer from its last annotation.
    """
    inner = get_args(kind)[0] if get_origin(kind) is NotRequired else kind
    if get_origin(inner) is Annotated:
        return NotRequired[Annotated[(inner.__origin__, mark, *inner.__metadata__)]]
    return NotRequired[Annotated[inner, mark]]
