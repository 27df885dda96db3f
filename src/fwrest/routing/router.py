"""Compiled route tables: static paths by dict, parameterised paths by a segment trie.

Matching costs one dict lookup for a static path and one lookup per segment otherwise, so
it does not grow with the number of routes (werkzeug's matcher tries static segments first
in the same way).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Generic, TypeVar

from fwrest.errors import HTTPError

__all__ = ["LocationTable", "Match", "Router"]

T = TypeVar("T")
_NO_PARAMS: Mapping[str, str] = MappingProxyType({})


# Plain classes rather than dataclasses: the compiled build (mypyc) cannot make a generic
# dataclass.
class Match(Generic[T]):
    """A route found for a request: its payload, its path parameters, its pattern."""

    __slots__ = ("params", "pattern", "payload")

    def __init__(self, payload: T, params: Mapping[str, str], pattern: str) -> None:
        self.payload = payload
        self.params = params  # read-only (a static route's Match is shared by requests)
        self.pattern = pattern  # the route's path, e.g. "/users/:id"

    def __repr__(self) -> str:
        return f"Match({self.payload!r}, {dict(self.params)!r}, {self.pattern!r})"


class _Route(Generic[T]):
    __slots__ = ("match", "names", "pattern", "payload")

    def __init__(self, pattern: str, names: tuple[str, ...], payload: T) -> None:
        self.pattern = pattern
        self.names = names
        self.payload = payload
        self.match: Match[T] | None = None  # built once for a static route


class _Node(Generic[T]):
    __slots__ = ("methods", "param", "static")

    def __init__(self) -> None:
        self.static: dict[str, _Node[T]] = {}
        self.param: _Node[T] | None = None
        self.methods: dict[str, _Route[T]] | None = None


class Router(Generic[T]):
    """The routes of one location; paths are relative to the location's prefix."""

    def __init__(self) -> None:
        self._static: dict[str, dict[str, _Route[T]]] = {}
        # a static path's matches by method, prebuilt (HEAD included where GET is)
        self._static_matches: dict[str, dict[str, Match[T]]] = {}
        self._root: _Node[T] = _Node()
        self._allow: dict[tuple[int, ...], str] = {}

    def add(self, method: str, pattern: str, payload: T, head: bool = True) -> T | None:
        """Register a route; returns the payload already there for this method and shape.
        A GET route serves HEAD too unless ``head`` is False (then HEAD is a 405 like any
        method the path does not take, and no ``Allow`` lists it)."""
        segments = pattern.split("/")[1:] if pattern != "/" else []
        names = tuple(s[1:] for s in segments if s.startswith(":"))
        route = _Route(pattern, names, payload)
        if not names:
            route.match = Match(payload, _NO_PARAMS, pattern)
            table = self._static.setdefault(pattern, {})
        else:
            node = self._root
            for seg in segments:
                if seg.startswith(":"):
                    if node.param is None:
                        node.param = _Node()
                    node = node.param
                else:
                    node = node.static.setdefault(seg, _Node())
            if node.methods is None:
                node.methods = {}
            table = node.methods
        previous = table.get(method)
        if previous is not None:
            return previous.payload
        table[method] = route
        if method == "GET" and head and "HEAD" not in table:
            table["HEAD"] = route
        if route.match is not None:
            self._static_matches[pattern] = {m: r.match for m, r in table.items() if r.match}
        return None

    def static_matches(self, path: str) -> Mapping[str, Match[T]] | None:
        """The prebuilt matches of a static route path by method (None: not a static path);
        a method missing from it goes through :meth:`match` (a parameterised route, 405)."""
        return self._static_matches.get(path)

    def match(self, method: str, path: str) -> Match[T]:
        """Find the route of ``method`` and the normalised relative ``path``.

        Static routes win over parameterised ones, segment by segment; a branch that leads
        to no route of ``method`` is abandoned for the next one (backtracking).

        Raises:
            HTTPError: 404 when no route has this path, 405 with ``Allow`` (every method some
                route of this path takes, and ``OPTIONS``) when none of them takes the method
                (the port answers ``OPTIONS`` itself: the 405's ``Allow``, with 200).
        """
        table = self._static.get(path)
        if table is not None:
            route = table.get(method)
            if route is not None and route.match is not None:
                return route.match
        segments = path.split("/")[1:] if path != "/" else []
        values: list[str] = []
        found = _walk(self._root, segments, 0, values, method)
        if found is not None:
            params = MappingProxyType(dict(zip(found.names, values, strict=True)))
            return Match(found.payload, params, found.pattern)
        tables = [table] if table is not None else []
        _collect(self._root, segments, 0, tables)
        if not tables:
            raise HTTPError(404)
        raise HTTPError(405, headers=(("allow", self._allow_header(tables)),))

    def methods(self, path: str) -> list[str]:
        """Every method some route of the normalised relative ``path`` takes, sorted (HEAD
        where GET is); empty when no route has this path."""
        table = self._static.get(path)
        segments = path.split("/")[1:] if path != "/" else []
        tables = [table] if table is not None else []
        _collect(self._root, segments, 0, tables)
        return sorted({method for table in tables for method in table})

    def _allow_header(self, tables: list[dict[str, _Route[T]]]) -> str:
        """The methods of a path that has routes: theirs and ``OPTIONS``, which the port
        answers on every such path (RFC 9110 9.3.7)."""
        key = tuple(id(table) for table in tables)
        text = self._allow.get(key)
        if text is None:
            text = ", ".join(sorted({"OPTIONS"}.union(*(table.keys() for table in tables))))
            self._allow[key] = text
        return text

    def routes(self) -> Iterable[tuple[str, str, T]]:
        """Every (method, pattern, payload), HEAD aliases left out."""
        for table in self._static.values():
            for method, route in table.items():
                if method != "HEAD" or route is not table.get("GET"):
                    yield method, route.pattern, route.payload
        stack = [self._root]
        while stack:
            node = stack.pop()
            if node.methods:
                for method, route in node.methods.items():
                    if method != "HEAD" or route is not node.methods.get("GET"):
                        yield method, route.pattern, route.payload
            stack.extend(node.static.values())
            if node.param is not None:
                stack.append(node.param)


def _walk(
    node: _Node[T], segments: list[str], i: int, values: list[str], method: str
) -> _Route[T] | None:
    """The route of ``method`` for ``segments[i:]`` under ``node``; ``values`` gets its params."""
    if i == len(segments):
        return node.methods.get(method) if node.methods else None
    seg = segments[i]
    child = node.static.get(seg)
    if child is not None:
        found = _walk(child, segments, i + 1, values, method)
        if found is not None:
            return found
    if node.param is not None:
        values.append(seg)
        found = _walk(node.param, segments, i + 1, values, method)
        if found is not None:
            return found
        values.pop()
    return None


def _collect(
    node: _Node[T], segments: list[str], i: int, tables: list[dict[str, _Route[T]]]
) -> None:
    """Every method table of a route whose pattern matches ``segments[i:]`` (for 405)."""
    if i == len(segments):
        if node.methods:
            tables.append(node.methods)
        return
    child = node.static.get(segments[i])
    if child is not None:
        _collect(child, segments, i + 1, tables)
    if node.param is not None:
        _collect(node.param, segments, i + 1, tables)


class LocationTable(Generic[T]):
    """The locations of one port: the longest prefix matching at a segment boundary wins."""

    def __init__(self, locations: Iterable[tuple[str, T]]) -> None:
        self._items = sorted(locations, key=lambda item: len(item[0]), reverse=True)

    def find(self, path: str) -> tuple[T, str] | None:
        """``(location, path relative to it)`` for a normalised path, or None."""
        for prefix, location in self._items:
            if prefix == "/":
                return location, path
            if path.startswith(prefix):
                rest = path[len(prefix) :]
                if not rest:
                    return location, "/"
                if rest[0] == "/":
                    return location, rest
        return None
