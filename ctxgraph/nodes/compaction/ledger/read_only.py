"""Which tools change nothing: those named read-only, and those named with a read verb.

Sentences are classified for the ledger in ``sentences``; tools are here. A read-only
call's successes fold first and its result is not copied into the ledger (it can be read
again).
"""

from __future__ import annotations

READ_ONLY_PREFIXES = (
    "get", "list", "read", "search", "lookup", "look_up", "fetch", "query", "find", "view",
    "show", "describe", "count", "check", "inspect", "calculator",
)  # fmt: skip


def is_read_only(name: str, read_only_tools: frozenset[str] = frozenset()) -> bool:
    """True for tools named in ``read_only_tools`` or whose name starts with a read verb.

    The verb must be a whole word (``get_order``, ``getOrder``, ``search``), so that
    ``checkout`` or ``showcase_item`` count as side effects.
    """
    if name in read_only_tools:
        return True
    for prefix in READ_ONLY_PREFIXES:
        at = len(prefix)
        if name.lower().startswith(prefix) and (
            at == len(name)
            or not name[at].isalpha()
            or (name[at].isupper() and name[at - 1].islower())
        ):
            return True
    return False
