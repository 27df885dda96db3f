"""``Router`` (compiled route table of one location) and ``LocationTable`` (SPEC 3, 9)."""

from __future__ import annotations

from typing import Any

import pytest

from fwrest.errors import HTTPError
from fwrest.routing import LocationTable, Match, Router


def make(*routes: tuple[str, str]) -> Router[str]:
    """A router whose payload is ``"METHOD pattern"``, so a match names its route."""
    router: Router[str] = Router()
    for method, pattern in routes:
        assert router.add(method, pattern, f"{method} {pattern}") is None
    return router


def status_of(router: Router[Any], method: str, path: str) -> HTTPError:
    with pytest.raises(HTTPError) as info:
        router.match(method, path)
    return info.value


def allow_of(error: HTTPError) -> str:
    return dict(error.headers)["allow"]


# -- matching --------------------------------------------------------------------------------------
ME_AND_ID = "GET /users/me, DELETE /users/:id"
BACKTRACK = "GET /a/b/c, GET /a/:x/d, GET /a/:x/:y/e"
OWN_NAMES = "GET /users/:id, DELETE /users/:uid, GET /users/:user/orders/:oid"
# (routes, the request, the route matched, its parameters)
MATCHES: list[tuple[str, str, str, dict[str, str]]] = [
    ("GET /hello, GET /", "GET /hello", "GET /hello", {}),
    ("GET /hello, GET /", "GET /", "GET /", {}),
    ("GET /items/:id", "GET /items/7;x", "GET /items/:id", {"id": "7;x"}),
    # a static segment wins over a parameter, deep in the trie too
    ("GET /users/:id, GET /users/me", "GET /users/me", "GET /users/me", {}),
    ("GET /users/:id, GET /users/me", "GET /users/42", "GET /users/:id", {"id": "42"}),
    ("GET /a/:x/c, GET /a/b/:y", "GET /a/b/c", "GET /a/b/:y", {"y": "c"}),
    ("GET /a/:x/c, GET /a/b/:y", "GET /a/z/c", "GET /a/:x/c", {"x": "z"}),
    # backtracking from a static branch that leads nowhere
    (BACKTRACK, "GET /a/b/d", "GET /a/:x/d", {"x": "b"}),
    (BACKTRACK, "GET /a/b/c/e", "GET /a/:x/:y/e", {"x": "b", "y": "c"}),
    (BACKTRACK, "GET /a/b/c", "GET /a/b/c", {}),
    # the first branch binds :a and :b, then fails at "y"; none of it leaks
    ("GET /p/:a/:b/x, GET /p/:c/q/y", "GET /p/1/q/y", "GET /p/:c/q/y", {"c": "1"}),
    # each route keeps its own parameter names
    (OWN_NAMES, "GET /users/5", "GET /users/:id", {"id": "5"}),
    (OWN_NAMES, "DELETE /users/5", "DELETE /users/:uid", {"uid": "5"}),
    (OWN_NAMES, "GET /users/5/orders/9", "GET /users/:user/orders/:oid", {"user": "5", "oid": "9"}),
    # a method found on a param route beside a static one
    (ME_AND_ID, "DELETE /users/me", "DELETE /users/:id", {"id": "me"}),
    (ME_AND_ID, "GET /users/me", "GET /users/me", {}),
    # /u/1/x is a path of both routes; each method reaches the route that has it
    ("DELETE /u/:id/x, GET /u/:a/:b", "DELETE /u/1/x", "DELETE /u/:id/x", {"id": "1"}),
    ("DELETE /u/:id/x, GET /u/:a/:b", "GET /u/1/x", "GET /u/:a/:b", {"a": "1", "b": "x"}),
    ("GET /Hello", "GET /Hello", "GET /Hello", {}),
    # HEAD follows GET
    ("GET /hello, GET /items/:id", "HEAD /hello", "GET /hello", {}),
    ("GET /hello, GET /items/:id", "HEAD /items/3", "GET /items/:id", {"id": "3"}),
]


def table(routes: str) -> Router[str]:
    """:func:`make` of ``routes`` written ``"GET /a, POST /b"``."""
    return make(*(tuple(route.split(" ")) for route in routes.split(", ")))  # type: ignore[arg-type]


@pytest.mark.parametrize(("routes", "request_", "route", "params"), MATCHES)
def test_a_path_matches_its_route_and_binds_its_parameters(
    routes: str, request_: str, route: str, params: dict[str, str]
) -> None:
    match = table(routes).match(*request_.split(" "))
    assert isinstance(match, Match)
    assert (match.payload, match.params, match.pattern) == (route, params, route.split(" ")[1])


def test_paths_are_case_sensitive() -> None:
    assert status_of(make(("GET", "/Hello")), "GET", "/hello").status == 404


# -- 404 and 405 -----------------------------------------------------------------------------------
def test_unknown_path_is_404() -> None:
    router = make(("GET", "/items/:id"), ("GET", "/hello"))
    for path in ("/nope", "/items", "/items/1/2", "/hello/x", "/"):
        error = status_of(router, "GET", path)
        assert error.status == 404, path
        assert error.body() == b'{"code":404,"detailedMessage":"","message":"Not Found"}'


# (routes, method, path, Allow): HEAD and OPTIONS where GET is, OPTIONS always
NOT_ALLOWED = [
    ("GET /hello, POST /hello", "DELETE /hello", "GET, HEAD, OPTIONS, POST"),
    ("GET /items/:id, PUT /items/:id", "POST /items/3", "GET, HEAD, OPTIONS, PUT"),
    ("POST /echo", "GET /echo", "OPTIONS, POST"),
    ("POST /echo", "HEAD /echo", "OPTIONS, POST"),  # no GET, no HEAD
    (ME_AND_ID, "PUT /users/me", "DELETE, GET, HEAD, OPTIONS"),  # every method of the path
]


@pytest.mark.parametrize(("routes", "request_", "allow"), NOT_ALLOWED)
def test_wrong_method_is_405_with_the_paths_methods_in_allow(
    routes: str, request_: str, allow: str
) -> None:
    error = status_of(table(routes), *request_.split(" "))
    assert error.status == 405
    assert allow_of(error) == allow
    assert error.body() == b'{"code":405,"detailedMessage":"","message":"Method Not Allowed"}'


# -- registration ----------------------------------------------------------------------------------
def test_static_matches_are_the_prebuilt_matches_of_a_static_path() -> None:
    router = make(("GET", "/a"), ("POST", "/a"), ("GET", "/u/:id"), ("DELETE", "/b"))
    statics = router.static_matches("/a")
    assert statics is not None
    assert sorted(statics) == ["GET", "HEAD", "POST"]
    for method in ("GET", "HEAD", "POST"):
        assert statics[method] is router.match(method, "/a")  # the very same Match
    assert dict(router.static_matches("/b") or {}) == {"DELETE": router.match("DELETE", "/b")}
    # parameterised and unknown paths have none: the caller asks match() (404 / 405)
    assert router.static_matches("/u/:id") is None
    assert router.static_matches("/u/7") is None
    assert router.static_matches("/nope") is None
    assert status_of(router, "PUT", "/a").status == 405


def test_duplicate_registration_returns_the_first_payload() -> None:
    router: Router[str] = Router()
    assert router.add("GET", "/items/:id", "first") is None
    assert router.add("GET", "/items/:key", "second") == "first"  # same shape, same method
    assert router.add("POST", "/items/:key", "post") is None
    assert router.add("GET", "/static", "one") is None
    assert router.add("GET", "/static", "two") == "one"
    assert router.match("GET", "/items/1").payload == "first"


def test_routes_lists_every_registration_without_head_aliases() -> None:
    registered = {
        ("GET", "/"),
        ("GET", "/hello"),
        ("POST", "/hello"),
        ("GET", "/items/:id"),
        ("DELETE", "/items/:key"),
        ("GET", "/a/:x/b/:y"),
    }
    router = make(*sorted(registered))
    listed = {(method, pattern) for method, pattern, _payload in router.routes()}
    assert listed == registered


def test_thousand_routes_still_match_correctly() -> None:
    router: Router[int] = Router()
    for i in range(1000):
        assert router.add("GET", f"/static{i}/list", i) is None
        assert router.add("GET", f"/res{i}/:id", 10000 + i) is None
        assert router.add("PUT", f"/res{i}/:key/sub{i % 7}", 20000 + i) is None
    for i in range(1000):
        assert router.match("GET", f"/static{i}/list").payload == i
        found = router.match("GET", f"/res{i}/v{i}")
        assert (found.payload, found.params) == (10000 + i, {"id": f"v{i}"})
        sub = router.match("PUT", f"/res{i}/k/sub{i % 7}")
        assert (sub.payload, sub.params) == (20000 + i, {"key": "k"})
    assert status_of(router, "GET", "/static1000/list").status == 404
    assert status_of(router, "GET", "/res5/k/sub6").status == 404  # 5 % 7 is 5
    assert allow_of(status_of(router, "POST", "/res5/x")) == "GET, HEAD, OPTIONS"
    assert len(list(router.routes())) == 3000


# -- locations -------------------------------------------------------------------------------------
def test_location_prefix_matches_at_a_segment_boundary_only() -> None:
    table = LocationTable([("/rest", "REST")])
    assert table.find("/rest") == ("REST", "/")
    assert table.find("/rest/items/1") == ("REST", "/items/1")
    assert table.find("/restful") is None
    assert table.find("/restful/items") is None
    assert table.find("/res") is None
    assert table.find("/") is None


def test_longest_location_prefix_wins() -> None:
    table = LocationTable([("/", "ROOT"), ("/rest", "REST"), ("/rest/v2", "V2")])
    assert table.find("/rest/v2/items") == ("V2", "/items")
    assert table.find("/rest/v2") == ("V2", "/")
    assert table.find("/rest/v21") == ("REST", "/v21")
    assert table.find("/rest/items") == ("REST", "/items")
    assert table.find("/restful") == ("ROOT", "/restful")
    assert table.find("/") == ("ROOT", "/")


def test_location_order_of_declaration_does_not_matter() -> None:
    a = LocationTable([("/rest/v2", "V2"), ("/rest", "REST")])
    b = LocationTable([("/rest", "REST"), ("/rest/v2", "V2")])
    for path in ("/rest/v2/x", "/rest/x", "/rest/v2", "/rest"):
        assert a.find(path) == b.find(path)
    assert a.find("/rest/v2/x") == ("V2", "/x")
