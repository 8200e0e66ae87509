"""A ready ``Auth`` for local development: bearer tokens from ``CTXGRAPH_AUTH_TOKENS``.

``CTXGRAPH_AUTH_TOKENS`` is a comma-separated list of ``token:identity`` or
``token:identity:operator`` entries, for example
``CTXGRAPH_AUTH_TOKENS="token1:alice,token2:bob,token3:ops:operator"``. A request must
send ``Authorization: Bearer <token>``; its user is the token's identity, and an
``operator`` entry also gets the ``ctxgraph:operator`` permission. The variable is read
at each request. With no token configured every request is refused (401) with a message
saying so. Point ``langgraph.json`` at it with
``"auth": {"path": "ctxgraph.graph.dev_auth:auth"}``; ``add_handlers`` supplies the rules.
Tokens in an environment variable suit development only.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping

from langgraph_sdk import Auth

from ctxgraph.graph.auth import OPERATOR_PERMISSION, add_handlers

TOKENS_VARIABLE = "CTXGRAPH_AUTH_TOKENS"
"""The environment variable holding the development tokens."""

OPERATOR_ROLE = "operator"
"""The third part of a token entry that makes its user an operator."""


class TokenConfigError(ValueError):
    """``CTXGRAPH_AUTH_TOKENS`` holds an entry that is not ``token:identity[:operator]``."""


def _unauthorized(detail: str) -> Auth.exceptions.HTTPException:
    return Auth.exceptions.HTTPException(status_code=401, detail=detail)


def parse_tokens(text: str) -> dict[str, Auth.types.MinimalUserDict]:
    """The users of a ``CTXGRAPH_AUTH_TOKENS`` value, by token.

    Raises:
        TokenConfigError: An entry is not ``token:identity`` or ``token:identity:operator``
            (the message gives the entry's position, never the token).

    """
    users: dict[str, Auth.types.MinimalUserDict] = {}
    for position, entry in enumerate(part.strip() for part in text.split(",")):
        if not entry:
            continue
        parts = entry.split(":")
        if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
            raise TokenConfigError(
                f"{TOKENS_VARIABLE} entry {position + 1} is not token:identity[:operator]"
            )
        if len(parts) == 3 and parts[2] != OPERATOR_ROLE:
            raise TokenConfigError(
                f"{TOKENS_VARIABLE} entry {position + 1} has role {parts[2]!r}; "
                f"the only role is {OPERATOR_ROLE!r}"
            )
        permissions = [OPERATOR_PERMISSION] if len(parts) == 3 else []
        users[parts[0]] = {"identity": parts[1], "permissions": permissions}
    return users


def user_for(authorization: str | None, environ: Mapping[str, str]) -> Auth.types.MinimalUserDict:
    """The user of an ``Authorization`` header under ``environ``'s tokens.

    Raises:
        Auth.exceptions.HTTPException: 401 when no token is configured, the header is
            missing or not ``Bearer <token>``, or the token is unknown.

    """
    try:
        users = parse_tokens(environ.get(TOKENS_VARIABLE, ""))
    except TokenConfigError as error:
        raise _unauthorized(str(error)) from None
    if not users:
        raise _unauthorized(
            f"no token is configured: set {TOKENS_VARIABLE}="
            '"token1:alice,token2:bob,token3:ops:operator" for the server'
        )
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _unauthorized("send the header Authorization: Bearer <token>")
    found = None
    for known, user in users.items():
        if hmac.compare_digest(known.encode(), token.strip().encode()):
            found = user
    if found is None:
        raise _unauthorized("unknown token")
    return found


auth = add_handlers(Auth())
"""The development ``Auth``: tokens from ``CTXGRAPH_AUTH_TOKENS``, ctxgraph's rules."""


@auth.authenticate
async def authenticate(authorization: str | None) -> Auth.types.MinimalUserDict:
    """The request's user, from its bearer token."""
    return user_for(authorization, os.environ)
