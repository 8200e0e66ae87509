"""Deployment auth for ctxgraph: two bearer tokens, for alice and bob, and ctxgraph's rules.

Replace ``TOKENS`` with your identity provider (verify a JWT, ask your OAuth server):
whatever ``authenticate`` returns as ``identity`` is the ctxgraph user id. A user whose
``permissions`` include ``ctxgraph:operator`` is an operator.
"""

from __future__ import annotations

import os

from langgraph_sdk import Auth

from ctxgraph.graph.auth import add_handlers

TOKENS: dict[str, Auth.types.MinimalUserDict] = {
    os.environ.get("ALICE_TOKEN", "alice-secret"): {"identity": "alice", "permissions": []},
    os.environ.get("BOB_TOKEN", "bob-secret"): {"identity": "bob", "permissions": []},
}

auth = add_handlers(Auth())


@auth.authenticate
async def authenticate(authorization: str | None) -> Auth.types.MinimalUserDict:
    """The user of the request's ``Authorization: Bearer <token>``; 401 otherwise."""
    scheme, _, token = (authorization or "").partition(" ")
    user = TOKENS.get(token) if scheme.lower() == "bearer" else None
    if user is None:
        raise Auth.exceptions.HTTPException(status_code=401, detail="unknown or missing token")
    return user
