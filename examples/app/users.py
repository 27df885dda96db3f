"""Annotated endpoints: a small in-memory user store."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from fwrest import Response, delete, get, post, rest

_lock = threading.Lock()
_users: dict[str, dict[str, Any]] = {
    "1": {"id": "1", "name": "Ada"},
    "2": {"id": "2", "name": "Linus"},
}


@get("/users", description="List the users")
def list_users() -> list[dict[str, Any]]:
    with _lock:
        return sorted(_users.values(), key=lambda u: u["id"])


@get("/users/:id", description="One user by id")
def get_user(id: str) -> dict[str, Any] | Response:
    with _lock:
        user = _users.get(id)
    if user is None:
        return Response({"error": f"no user {id}"}, status=404)
    return user


@post("/users", description='Create a user from a JSON body {"name": ...}')
def create_user() -> dict[str, Any] | Response:
    try:
        data = json.loads(rest.getBodyRequest() or "{}")
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return Response({"error": 'the body must be a JSON object {"name": ...}'}, status=400)
    with _lock:
        new_id = str(max((int(k) for k in _users), default=0) + 1)
        _users[new_id] = {"id": new_id, "name": str(data.get("name", ""))}
        rest.setStatusCode(201)
        return _users[new_id]


@delete("/users/{id}", description="Delete a user")
def delete_user(id: str) -> None:
    with _lock:
        removed = _users.pop(id, None)
    rest.setStatusCode(204 if removed else 404)


@get("/hello", description="Greets with the server's UserData (an async handler)")
async def hello() -> dict[str, Any]:
    await asyncio.sleep(0)
    data = rest.getServerUserData()
    name = rest.getQueryRequest().get("name", "world")
    return {"message": f"{data['greeting']}, {name}!", "team": data["team"]}


@get("/echo", description="Echoes the request the way the REST object sees it")
def echo() -> None:
    rest.setKeyHeaderResponse("X-Handled-By", "app.users.echo")
    rest.setResponse(
        f'{{"method": "{rest.getMethodRequest()}", "path": "{rest.getPathRequest()}"}}'
    )


@get("/whoami", description="The authenticated user and the port's authorization")
def whoami() -> dict[str, Any]:
    return {
        "user": rest.getAuthUser(),
        "scheme": rest.getCEntryPointAuthorizationScheme(),
        "onAuth": rest.getCEntryPointAuthorizationOnAuth(),
        "callback": rest.getLEntryPointAuthorization(),
        "poolScheme": rest.getThreadPoolAuthorizationScheme(),
        "poolOnAuth": rest.getThreadPoolAuthorizationOnAuth(),
    }
