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
def test_static_route_matches_with_no_params() -> None:
    router = make(("GET", "/hello"), ("GET", "/"))
    match = router.match("GET", "/hello")
    assert isinstance(match, Match)
    assert (match.payload, match.params, match.pattern) == ("GET /hello", {}, "/hello")
    assert router.match("GET", "/").payload == "GET /"


def test_param_route_binds_its_value() -> None:
    router = make(("GET", "/items/:id"))
    match = router.match("GET", "/items/7;x")
    assert match.payload == "GET /items/:id"
    assert match.params == {"id": "7;x"}
    assert match.pattern == "/items/:id"


def test_static_segment_wins_over_a_param() -> None:
    router = make(("GET", "/users/:id"), ("GET", "/users/me"))
    assert router.match("GET", "/users/me").payload == "GET /users/me"
    other = router.match("GET", "/users/42")
    assert (other.payload, other.params) == ("GET /users/:id", {"id": "42"})


def test_static_segment_deep_in_the_trie_wins_over_a_param() -> None:
    router = make(("GET", "/a/:x/c"), ("GET", "/a/b/:y"))
    assert router.match("GET", "/a/b/c").payload == "GET /a/b/:y"
    assert router.match("GET", "/a/b/c").params == {"y": "c"}
    assert router.match("GET", "/a/z/c").params == {"x": "z"}


def test_backtracks_from_a_static_branch_that_leads_nowhere() -> None:
    router = make(("GET", "/a/b/c"), ("GET", "/a/:x/d"), ("GET", "/a/:x/:y/e"))
    match = router.match("GET", "/a/b/d")
    assert (match.payload, match.params) == ("GET /a/:x/d", {"x": "b"})
    deep = router.match("GET", "/a/b/c/e")
    assert (deep.payload, deep.params) == ("GET /a/:x/:y/e", {"x": "b", "y": "c"})
    assert router.match("GET", "/a/b/c").payload == "GET /a/b/c"


def test_backtracking_drops_values_of_abandoned_branches() -> None:
    router = make(("GET", "/p/:a/:b/x"), ("GET", "/p/:c/q/y"))
    match = router.match("GET", "/p/1/q/y")
    # the first branch bound :a and :b, then failed at "y"; none of it leaks
    assert (match.payload, match.params) == ("GET /p/:c/q/y", {"c": "1"})


def test_each_route_keeps_its_own_parameter_names() -> None:
    router = make(
        ("GET", "/users/:id"),
        ("DELETE", "/users/:uid"),
        ("GET", "/users/:user/orders/:oid"),
    )
    assert router.match("GET", "/users/5").params == {"id": "5"}
    assert router.match("DELETE", "/users/5").params == {"uid": "5"}
    assert router.match("GET", "/users/5/orders/9").params == {"user": "5", "oid": "9"}


def test_method_found_on_a_param_route_beside_a_static_one() -> None:
    router = make(("GET", "/users/me"), ("DELETE", "/users/:id"))
    assert router.match("DELETE", "/users/me").payload == "DELETE /users/:id"
    assert router.match("GET", "/users/me").payload == "GET /users/me"


def test_method_found_on_another_param_branch() -> None:
    """``/u/1/x`` is a path of both routes; each method reaches the route that has it."""
    router = make(("DELETE", "/u/:id/x"), ("GET", "/u/:a/:b"))
    assert router.match("DELETE", "/u/1/x").params == {"id": "1"}
    match = router.match("GET", "/u/1/x")
    assert (match.payload, match.params) == ("GET /u/:a/:b", {"a": "1", "b": "x"})


def test_paths_are_case_sensitive() -> None:
    router = make(("GET", "/Hello"))
    assert router.match("GET", "/Hello").payload == "GET /Hello"
    assert status_of(router, "GET", "/hello").status == 404


# -- 404 and 405 -----------------------------------------------------------------------------------
def test_unknown_path_is_404() -> None:
    router = make(("GET", "/items/:id"), ("GET", "/hello"))
    for path in ("/nope", "/items", "/items/1/2", "/hello/x", "/"):
        error = status_of(router, "GET", path)
        assert error.status == 404, path
        assert error.body() == b'{"code":404,"detailedMessage":"","message":"Not Found"}'


def test_wrong_method_is_405_with_allow_including_head_for_get_and_options() -> None:
    router = make(("GET", "/hello"), ("POST", "/hello"))
    error = status_of(router, "DELETE", "/hello")
    assert error.status == 405
    assert allow_of(error) == "GET, HEAD, OPTIONS, POST"
    assert error.body() == b'{"code":405,"detailedMessage":"","message":"Method Not Allowed"}'


def test_405_on_a_param_route() -> None:
    router = make(("GET", "/items/:id"), ("PUT", "/items/:id"))
    error = status_of(router, "POST", "/items/3")
    assert error.status == 405
    assert allow_of(error) == "GET, HEAD, OPTIONS, PUT"


def test_405_allow_without_get_has_no_head() -> None:
    router = make(("POST", "/echo"))
    error = status_of(router, "GET", "/echo")
    assert allow_of(error) == "OPTIONS, POST"
    assert status_of(router, "HEAD", "/echo").status == 405


def test_allow_names_every_method_the_path_answers() -> None:
    router = make(("GET", "/users/me"), ("DELETE", "/users/:id"))
    error = status_of(router, "PUT", "/users/me")
    assert error.status == 405
    assert allow_of(error) == "DELETE, GET, HEAD, OPTIONS"


def test_head_follows_get() -> None:
    router = make(("GET", "/hello"), ("GET", "/items/:id"))
    assert router.match("HEAD", "/hello").payload == "GET /hello"
    head = router.match("HEAD", "/items/3")
    assert (head.payload, head.params) == ("GET /items/:id", {"id": "3"})


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
