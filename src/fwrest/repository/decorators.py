"""``@get("/users/:id")`` and friends: register endpoints as modules are imported."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from fwrest.repository.scopes import scope_list

__all__ = ["Endpoint", "delete", "forget", "get", "patch", "post", "put", "registered"]

F = TypeVar("F", bound=Callable[..., Any])

_BRACES = re.compile(r"\{([^{}/]*)\}")
_PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One method + path served by one function."""

    method: str
    path: str  # normalised: "/users/:id" ({id} written as :id), no trailing slash
    func: Callable[..., Any]
    description: str
    source: str  # "annotation" | "mapping" | "native"
    module: str
    function: str  # "app.users.get_user"
    origin: str  # "app/users.py:12", for messages
    # the scopes an access token must carry (SPEC 12.4; oAuth2 ports only)
    scopes: tuple[str, ...] = ()
    # a GET route also serves HEAD (without the body); False for a route whose GET must not
    # run for HEAD (the token route: it would spend a refresh token for nothing)
    head: bool = True

    @property
    def shape(self) -> str:
        """The path with parameter names erased: two endpoints of one shape collide."""
        return "/".join(":" if seg.startswith(":") else seg for seg in self.path.split("/"))


class RouteError(ValueError):
    """A route path that cannot be registered."""


def normalise_route(path: str) -> str:
    """``users/{id}/`` -> ``/users/:id``; raises :class:`RouteError` on a bad path.

    >>> normalise_route("users/{id}")
    '/users/:id'
    """
    if not isinstance(path, str):
        raise RouteError(f"a route path must be text, not {type(path).__name__}")
    text = _BRACES.sub(lambda m: ":" + m.group(1), path.strip())
    if not text.startswith("/"):
        text = "/" + text
    if len(text) > 1:
        text = text.rstrip("/")
    # a control character never reaches the router (the path normaliser refuses it)
    if "//" in text or any(c in text for c in "?#{} ") or _CONTROL.search(text):
        raise RouteError(f"the route path {path!r} is not a valid path")
    names: set[str] = set()
    for seg in text.split("/")[1:]:
        if seg.startswith(":"):
            name = seg[1:]
            if not _PARAM_NAME.match(name):
                raise RouteError(f"the route path {path!r} has a bad parameter name {name!r}")
            if name in names:
                raise RouteError(f"the route path {path!r} repeats the parameter {name!r}")
            names.add(name)
        elif seg in (".", ".."):
            raise RouteError(f"the route path {path!r} has a dot segment")
    return text


# (function, method, path) -> endpoint: a module imported again (importlib.reload, or removed
# from sys.modules and imported anew) replaces its earlier registrations instead of colliding
_REGISTERED: dict[tuple[str, str, str], Endpoint] = {}


def registered() -> tuple[Endpoint, ...]:
    """Every endpoint annotated so far, in import order."""
    return tuple(_REGISTERED.values())


def forget(modules: frozenset[str]) -> Callable[[], None]:
    """Drop the registrations of ``modules`` (imported afresh by a reload: a function removed
    from the file must not stay a route); returns what puts them back (a reload that failed).
    """
    saved = dict(_REGISTERED)
    for key in [k for k, e in _REGISTERED.items() if e.module in modules]:
        del _REGISTERED[key]

    def restore() -> None:
        _REGISTERED.clear()
        _REGISTERED.update(saved)

    return restore


def _origin(func: Callable[..., Any]) -> str:
    code = getattr(func, "__code__", None)
    if code is None:
        return getattr(func, "__module__", "?")
    return f"{code.co_filename}:{code.co_firstlineno}"


def _decorator(method: str) -> Callable[..., Callable[[F], F]]:
    def annotate(
        path: str | None = None,
        *,
        endpoint: str | None = None,
        description: str = "",
        scopes: list[str] | tuple[str, ...] = (),
    ) -> Callable[[F], F]:
        route = endpoint if endpoint is not None else path
        if route is None:
            raise TypeError(f"@{method.lower()}() needs a path, e.g. @{method.lower()}('/items')")
        normalised = normalise_route(route)
        try:
            required = scope_list(scopes, f"the scopes of @{method.lower()}({route!r})")
        except ValueError as exc:
            raise RouteError(str(exc)) from None

        def register(func: F) -> F:
            if not callable(func):
                raise TypeError(f"@{method.lower()} decorates a function")
            module = getattr(func, "__module__", "") or ""
            name = getattr(func, "__qualname__", getattr(func, "__name__", "?"))
            endpoint = Endpoint(
                method=method,
                path=normalised,
                func=func,
                description=description or "",
                source="annotation",
                module=module,
                function=f"{module}.{name}",
                origin=_origin(func),
                scopes=required,
            )
            key = (endpoint.function, method, normalised)
            _REGISTERED.pop(key, None)  # keep import order: the new one goes last
            _REGISTERED[key] = endpoint
            return func

        return register

    annotate.__name__ = method.lower()
    annotate.__doc__ = (
        f'Register the decorated function for {method} requests: @{method.lower()}("/items/:id")'
    )
    return annotate


get = _decorator("GET")
post = _decorator("POST")
put = _decorator("PUT")
patch = _decorator("PATCH")
delete = _decorator("DELETE")
