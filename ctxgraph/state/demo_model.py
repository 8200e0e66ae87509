"""The offline demo model: ``Models`` whose every role replies by rule, and its calculator.

``CTXGRAPH_MODEL=scripted`` selects it (see ``Models.from_env``). It lives in the state
layer so that every layer can resolve that setting. The replies themselves are in
``state.demo_replies``, which both this module and ``state.models`` import.
"""

from __future__ import annotations

from ctxgraph.state.demo_replies import demo_role_models
from ctxgraph.state.models import Models

__all__ = ["demo_models"]


def demo_models() -> Models:
    """The demo model in every role: the chat, summary and memory roles each reply by rule.

    The main model calls only the tools bound to it (``bind_tools``): with a tool list
    that lacks ``calculator``, arithmetic is answered in text. ``Models.from_env`` with
    ``CTXGRAPH_MODEL=scripted`` gives the same.

    Returns:
        ``Models`` with a ``ScriptedChatModel`` in each of the three roles.

    """
    main, summary, memory = demo_role_models()
    return Models(main=main, summary=summary, memory=memory)
