"""The test server's ``Auth``: fixed bearer tokens for alice, bob and an operator."""

from __future__ import annotations

from langgraph_sdk import Auth

from ctxgraph.graph.auth import OPERATOR_PERMISSION, add_handlers

TOKENS: dict[str, Auth.types.MinimalUserDict] = {
    "alice-token": {"identity": "alice", "permissions": []},
    "bob-token": {"identity": "bob", "permissions": []},
    "ops-token": {"identity": "ops", "permissions": [OPERATOR_PERMISSION]},
}

auth = add_handlers(Auth())


@auth.authenticate
async def authenticate(authorization: str | None) -> Auth.types.MinimalUserDict:
    """The user of the request's bearer token; 401 without a known one."""
    scheme, _, token = (authorization or "").partition(" ")
    user = TOKENS.get(token) if scheme.lower() == "bearer" else None
    if user is None:
        raise Auth.exceptions.HTTPException(status_code=401, detail="unknown or missing token")
    return user
