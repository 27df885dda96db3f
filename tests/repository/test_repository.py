"""The compiled repository via ``fwrest.server.prepare``: ``Repository`` imports, ``LoadURNs``,
function names, duplicate routes. The decorator registry is process-global and modules stay in
``sys.modules``: every module name carries a fresh uuid."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fwrest import ConfigError
from fwrest.repository import Endpoint, purge_modules
from fwrest.server import prepare
from fwrest.server.build import ServicePlan
from tests.conftest import local_port


@pytest.fixture
def uid() -> str:
    return uuid.uuid4().hex[:12]


@pytest.fixture(autouse=True)
def _restore_sys_path() -> Iterator[None]:
    """prepare() puts the config's folder on sys.path; leave the path as it was."""
    saved = list(sys.path)
    yield
    sys.path[:] = saved


def write_files(root: Path, files: dict[str, str]) -> None:
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))


def service(
    tmp_path: Path,
    repository: str,
    files: dict[str, str] | None = None,
    load_urns: dict[str, Any] | None = None,
    **server_extra: Any,
) -> Path:
    """Write ``files`` and a JSON config whose environment's Repository is ``repository``."""
    write_files(tmp_path, files or {})
    server: dict[str, Any] = local_port()
    if load_urns is not None:
        server["LoadURNs"] = load_urns
    server.update(server_extra)
    config = {
        "HTTPSERVER": {"Servers": "HTTP_REST", "StateStore": "memory"}, "HTTP_REST": server,
        "ROOT": {"Path": "/rest", "ThreadPool": "POOL"}, "POOL": {"Environment": "ENV"},
        "ENV": {"Repository": repository},
    }  # fmt: skip
    path = tmp_path / "service.json"
    path.write_text(json.dumps(config, indent=2))
    return path


def routes(plan: ServicePlan, port: int = 0, location: int = 0) -> set[tuple[str, str, str, str]]:
    """(method, path, function, source) of a location's routes (SPEC 5's native ones left out)."""
    loc = plan.ports[port].locations[location]
    return {
        (method, path, handler.endpoint.function, handler.endpoint.source)
        for method, path, handler in loc.router.routes()
        if handler.endpoint.source != "native"
    }


def app_endpoints(plan: ServicePlan) -> list[Endpoint]:
    return [e for e in plan.ports[0].locations[0].endpoints if e.source != "native"]


def endpoint_module(name: str, *paths: str, method: str = "get") -> str:
    """A module annotating one function per path: ``f0``, ``f1``..."""
    body = [f"from fwrest import {method}", ""]
    for i, path in enumerate(paths):
        body += [f"@{method}({path!r})", f"def f{i}():", f"    return {{'from': {name!r}}}", ""]
    return "\n".join(body)


def prepare_error(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        prepare(path)
    return info.value


def assert_one_line(err: ConfigError, *fragments: str) -> None:
    text = str(err)
    assert "\n" not in text and "Traceback" not in text, text
    assert err.fix, text
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in {text!r}"


# -- importing -------------------------------------------------------------------------------------


def test_module_name_is_imported(tmp_path: Path, uid: str) -> None:
    mod = f"mod_{uid}"
    plan = prepare(service(tmp_path, mod, {f"{mod}.py": endpoint_module(mod, "/a", "/b/:id")}))
    assert routes(plan) == {
        ("GET", "/a", f"{mod}.f0", "annotation"),
        ("GET", "/b/:id", f"{mod}.f1", "annotation"),
    }


def test_py_file_relative_to_the_config_is_imported(
    tmp_path: Path, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    mod = f"file_{uid}"
    path = service(tmp_path, f"lib/{mod}.py", {f"lib/{mod}.py": endpoint_module(mod, "/f")})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert routes(prepare(path)) == {("GET", "/f", f"{mod}.f0", "annotation")}


@pytest.mark.parametrize("spelling", ["{}", "./{}", "{}/"])
def test_folder_of_py_files_is_imported(tmp_path: Path, uid: str, spelling: str) -> None:
    one, two = f"one_{uid}", f"two_{uid}"
    folder = f"handlers_{uid}"
    files = {
        f"{folder}/{one}.py": endpoint_module(one, "/one"),
        f"{folder}/{two}.py": endpoint_module(two, "/two", method="post"),
        f"{folder}/notes.txt": "not python",
    }
    plan = prepare(service(tmp_path, spelling.format(folder), files))
    assert routes(plan) == {
        ("GET", "/one", f"{one}.f0", "annotation"),
        ("POST", "/two", f"{two}.f0", "annotation"),
    }


@pytest.mark.parametrize("spelling", ["{}", "vendor/{}"])
def test_package_folder_and_its_submodules_are_imported(
    tmp_path: Path, uid: str, spelling: str
) -> None:
    pkg = f"pkg_{uid}"
    prefix = "vendor/" if spelling.startswith("vendor/") else ""
    files = {
        f"{prefix}{pkg}/__init__.py": endpoint_module(pkg, "/top"),
        f"{prefix}{pkg}/users.py": endpoint_module(f"{pkg}.users", "/users/{uid}"),
        f"{prefix}{pkg}/deep/__init__.py": "",
        f"{prefix}{pkg}/deep/leaf.py": endpoint_module(f"{pkg}.deep.leaf", "/leaf", method="put"),
    }
    plan = prepare(service(tmp_path, spelling.format(pkg), files))
    assert routes(plan) == {
        ("GET", "/top", f"{pkg}.f0", "annotation"),
        ("GET", "/users/:uid", f"{pkg}.users.f0", "annotation"),
        ("PUT", "/leaf", f"{pkg}.deep.leaf.f0", "annotation"),
    }


def test_several_entries_and_only_their_endpoints(tmp_path: Path, uid: str) -> None:
    """An environment serves what its Repository imports, not every module ever annotated."""
    a, b, other = f"a_{uid}", f"b_{uid}", f"other_{uid}"
    files = {
        f"{a}.py": endpoint_module(a, "/a"), f"{b}.py": endpoint_module(b, "/b"),
        f"{other}.py": endpoint_module(other, "/other"),
    }  # fmt: skip
    prepare(service(tmp_path / "first", other, files))  # registers /other in this process
    plan = prepare(service(tmp_path / "second", f" {a} , {b}.py ", files))
    assert routes(plan) == {
        ("GET", "/a", f"{a}.f0", "annotation"),
        ("GET", "/b", f"{b}.f0", "annotation"),
    }


def test_two_environments_of_one_port_keep_their_own_routes(tmp_path: Path, uid: str) -> None:
    a, b = f"enva_{uid}", f"envb_{uid}"
    write_files(
        tmp_path, {f"{a}.py": endpoint_module(a, "/x"), f"{b}.py": endpoint_module(b, "/y")}
    )
    config = {
        "HTTPSERVER": {"Servers": "S", "StateStore": "memory"},
        "S": {"HostName": "127.0.0.1", "Port": 0, "Locations": "LA, LB"},
        "LA": {"Path": "/a", "ThreadPool": "PA"}, "LB": {"Path": "/b", "ThreadPool": "PB"},
        "PA": {"Environment": "EA"}, "PB": {"Environment": "EB"},
        "EA": {"Repository": a}, "EB": {"Repository": b},
    }  # fmt: skip
    path = tmp_path / "service.json"
    path.write_text(json.dumps(config))
    plan = prepare(path)
    assert routes(plan, location=0) == {("GET", "/x", f"{a}.f0", "annotation")}
    assert routes(plan, location=1) == {("GET", "/y", f"{b}.f0", "annotation")}


def test_missing_module(tmp_path: Path, uid: str) -> None:
    err = prepare_error(service(tmp_path, f"absent_{uid}"))
    assert (err.section, err.key) == ("ENV", "Repository")
    assert_one_line(err, "[ENV] Repository: ", f"'absent_{uid}'", "not found", str(tmp_path))


# the repository, its one file and source ("{u}": the test's uid), what the one-line error says
IMPORT_ERRORS = {
    "a missing file": ("lib/absent_{u}.py", None, "",
                       ["[ENV] Repository: ", "absent_{u}.py", "does not exist"]),
    "raising at import": ("raises_{u}", "raises_{u}.py",
                          "x = 1\n\nraise RuntimeError('database unreachable')\n",
                          ["[ENV] Repository: ", "importing 'raises_{u}' failed",
                           "RuntimeError: database unreachable", "raises_{u}.py:3"]),
    "a syntax error": ("syntax_{u}.py", "syntax_{u}.py",
                       "from fwrest import get\n\n\n@get('/s')\ndef broken(:\n    pass\n",
                       ["[ENV] Repository: ", "syntax_{u}.py", "SyntaxError", "line 5", ":5)"]),
    "sys.exit at import": ("exits_{u}", "exits_{u}.py", "import sys\nsys.exit(3)\n",
                           ["[ENV] Repository: ", "importing 'exits_{u}' failed", "sys.exit(3)"]),
    "a BaseException at import": ("stops_{u}", "stops_{u}.py",
                                  "class Stop(BaseException):\n    pass\n\n\nraise Stop('now')\n",
                                  ["importing 'stops_{u}' failed: it raised Stop: now (",
                                   "stops_{u}.py:5), which is no Exception"]),
    # lib/json.py would be imported as json, which is the standard library's
    "shadowing a loaded module": ("lib/json.py", "lib/json.py", "X = 1\n",
                                  ["[ENV] Repository: ", "json.py", "already loaded", "rename"]),
    # not "module not found" for the repository module itself: the dependency that is missing
    "a missing dependency": ("needs_{u}", "needs_{u}.py", "import notinstalled_{u}\n",
                             ["importing 'needs_{u}' failed", "No module named 'notinstalled_{u}'",
                              "needs_{u}.py:1"]),
    "a bad route path": ("badroute_{u}", "badroute_{u}.py",
                         endpoint_module("badroute_{u}", "/a/:id/:id"),
                         ["[ENV] Repository: ", "badroute_{u}", "repeats the parameter 'id'"]),
}  # fmt: skip


@pytest.mark.parametrize("case", IMPORT_ERRORS)
def test_a_repository_that_does_not_import_is_a_one_line_error(
    tmp_path: Path, uid: str, case: str
) -> None:
    repository, name, source, fragments = IMPORT_ERRORS[case]
    files = {name.replace("{u}", uid): source.replace("{u}", uid)} if name else {}
    err = prepare_error(service(tmp_path, repository.replace("{u}", uid), files))
    assert_one_line(err, *(fragment.replace("{u}", uid) for fragment in fragments))


def test_syntax_error_in_a_folder_file(tmp_path: Path, uid: str) -> None:
    folder, good, bad = f"dir_{uid}", f"good_{uid}", f"bad_{uid}"
    files = {
        f"{folder}/{good}.py": endpoint_module(good, "/good"),
        f"{folder}/{bad}.py": "def f(\n",
    }
    err = prepare_error(service(tmp_path, folder, files))
    assert_one_line(err, "[ENV] Repository: ", f"{bad}.py", "SyntaxError")


# -- LoadURNs and function names -------------------------------------------------------------------


def _mapping_files(uid: str) -> tuple[str, str, dict[str, str]]:
    users, orders = f"users_{uid}", f"orders_{uid}"
    files = {
        f"{users}.py": """
            def get_user(id):
                return {"id": id}

            def save_user(id):
                return {"saved": id}

            def shared():
                return "users"
            """,
        f"{orders}.py": """
            def list_orders():
                return []

            def shared():
                return "orders"
            """,
    }
    return users, orders, files


def test_load_urns_register_routes(tmp_path: Path, uid: str) -> None:
    users, orders, files = _mapping_files(uid)
    load_urns = {
        "/users/{id}": {
            "GET": {"Function": f"{users}.get_user", "Description": "one user"},
            "put": {"function": "save_user"},
        },
        "orders": {"GET": {"Function": "list_orders"}},
    }
    plan = prepare(service(tmp_path, f"{users},{orders}", files, load_urns))
    assert routes(plan) == {
        ("GET", "/users/:id", f"{users}.get_user", "mapping"),
        ("PUT", "/users/:id", f"{users}.save_user", "mapping"),
        ("GET", "/orders", f"{orders}.list_orders", "mapping"),
    }
    (endpoint,) = [e for e in app_endpoints(plan) if e.function.endswith("get_user")]
    assert endpoint.description == "one user"
    assert endpoint.func(id="7") == {"id": "7"}


def test_load_urns_as_a_file(tmp_path: Path, uid: str) -> None:
    users, _orders, files = _mapping_files(uid)
    files["urns.json"] = json.dumps({"/u/:id": {"GET": {"Function": f"{users}.get_user"}}})
    plan = prepare(service(tmp_path, users, files, LoadURNs="urns.json"))
    assert routes(plan) == {("GET", "/u/:id", f"{users}.get_user", "mapping")}


def test_load_urns_missing_function(tmp_path: Path, uid: str) -> None:
    users, _orders, files = _mapping_files(uid)
    load_urns = {"/x": {"GET": {"Function": "no_such_function"}}}
    err = prepare_error(service(tmp_path, users, files, load_urns))
    assert (err.section, err.key) == ("HTTP_REST", "LoadURNs")
    assert_one_line(err, "[HTTP_REST] LoadURNs: ", "'no_such_function'", "not in the repository")


def test_load_urns_function_of_a_module_outside_the_repository(tmp_path: Path, uid: str) -> None:
    users, orders, files = _mapping_files(uid)
    load_urns = {"/x": {"GET": {"Function": f"{orders}.list_orders"}}}
    err = prepare_error(service(tmp_path, users, files, load_urns))
    assert_one_line(err, "[HTTP_REST] LoadURNs: ", f"{orders}.list_orders")


def test_load_urns_ambiguous_bare_name(tmp_path: Path, uid: str) -> None:
    users, orders, files = _mapping_files(uid)
    load_urns = {"/x": {"GET": {"Function": "shared"}}}
    err = prepare_error(service(tmp_path, f"{users},{orders}", files, load_urns))
    assert_one_line(err, "[HTTP_REST] LoadURNs: ", "'shared' is ambiguous", f"{users}.shared",
                    f"{orders}.shared", "module.function")  # fmt: skip


def test_module_dot_function_resolves_an_ambiguous_name(tmp_path: Path, uid: str) -> None:
    users, orders, files = _mapping_files(uid)
    load_urns = {"/u": {"GET": {"Function": f"{users}.shared"}},
                 "/o": {"GET": {"Function": f"{orders}.shared"}}}  # fmt: skip
    plan = prepare(service(tmp_path, f"{users},{orders}", files, load_urns))
    assert routes(plan) == {("GET", "/u", f"{users}.shared", "mapping"),
                            ("GET", "/o", f"{orders}.shared", "mapping")}  # fmt: skip
    funcs = {e.path: e.func for e in app_endpoints(plan)}
    assert (funcs["/u"](), funcs["/o"]()) == ("users", "orders")


def test_function_names_are_case_insensitive(tmp_path: Path, uid: str) -> None:
    users, orders, files = _mapping_files(uid)
    load_urns = {"/a/:id": {"GET": {"Function": f"{users.upper()}.GET_USER"}},
                 "/b": {"GET": {"Function": "List_Orders"}}}  # fmt: skip
    plan = prepare(service(tmp_path, f"{users},{orders}", files, load_urns))
    assert routes(plan) == {("GET", "/a/:id", f"{users}.get_user", "mapping"),
                            ("GET", "/b", f"{orders}.list_orders", "mapping")}  # fmt: skip


def test_load_urns_unknown_method_and_missing_function_key(tmp_path: Path, uid: str) -> None:
    users, _orders, files = _mapping_files(uid)
    err = prepare_error(
        service(tmp_path, users, files, {"/x": {"FETCH": {"Function": "get_user"}}})
    )
    assert_one_line(err, "[HTTP_REST] LoadURNs: ", "'FETCH'", "GET, POST")
    err = prepare_error(service(tmp_path, users, files, {"/x": {"GET": {"Fn": "get_user"}}}))
    assert_one_line(err, "[HTTP_REST] LoadURNs: ", "names no Function")


# -- duplicate routes ------------------------------------------------------------------------------


def test_duplicate_annotation_in_two_modules_names_both(tmp_path: Path, uid: str) -> None:
    a, b = f"dupa_{uid}", f"dupb_{uid}"
    files = {f"{a}.py": endpoint_module(a, "/same"), f"{b}.py": endpoint_module(b, "/same")}
    err = prepare_error(service(tmp_path, f"{a},{b}", files))
    assert_one_line(err, "GET /rest/same", "twice", f"{a}.f0", f"{b}.f0", f"{a}.py", f"{b}.py")


def test_duplicate_with_other_parameter_names_is_one_route(tmp_path: Path, uid: str) -> None:
    """/items/:id and /items/{key} match the same requests: a duplicate."""
    a, b = f"pa_{uid}", f"pb_{uid}"
    files = {
        f"{a}.py": endpoint_module(a, "/items/:id"),
        f"{b}.py": endpoint_module(b, "/items/{key}"),
    }
    err = prepare_error(service(tmp_path, f"{a},{b}", files))
    assert_one_line(err, "twice", f"{a}.f0", f"{b}.f0")


def test_same_path_other_method_is_no_duplicate(tmp_path: Path, uid: str) -> None:
    a, b = f"ma_{uid}", f"mb_{uid}"
    files = {
        f"{a}.py": endpoint_module(a, "/same"),
        f"{b}.py": endpoint_module(b, "/same", method="post"),
    }
    plan = prepare(service(tmp_path, f"{a},{b}", files))
    assert {(m, p) for m, p, _f, _s in routes(plan)} == {("GET", "/same"), ("POST", "/same")}


def test_annotation_and_load_urns_on_one_route_names_both(tmp_path: Path, uid: str) -> None:
    mod = f"ann_{uid}"
    source = endpoint_module(mod, "/users/:id") + "\ndef mapped(id):\n    return id\n"
    load_urns = {"/users/{uid}": {"GET": {"Function": f"{mod}.mapped"}}}
    err = prepare_error(service(tmp_path, mod, {f"{mod}.py": source}, load_urns))
    assert_one_line(err, "GET /rest/users/", "twice", f"{mod}.f0", "annotation", f"{mod}.mapped",
                    "mapping", "LoadURNs")  # fmt: skip


# -- modules imported again ------------------------------------------------------------------------


def test_reloaded_module_replaces_its_endpoints(tmp_path: Path, uid: str) -> None:
    """``importlib.reload`` re-runs the decorators: new functions replace the old, no collision."""
    mod = f"reload_{uid}"
    path = service(tmp_path, mod, {f"{mod}.py": endpoint_module(mod, "/r")})
    first = prepare(path)
    (old,) = app_endpoints(first)
    (tmp_path / f"{mod}.py").write_text(endpoint_module(mod, "/r") + "\nVERSION = 2\n")
    importlib.reload(sys.modules[mod])
    second = prepare(path)
    (new,) = app_endpoints(second)
    assert routes(second) == {("GET", "/r", f"{mod}.f0", "annotation")}
    assert new.func is not old.func
    assert new.func is sys.modules[mod].f0


# -- a reload's fresh import (SPEC 13.1) -----------------------------------------------------------


def test_a_reload_imports_the_handlers_and_their_helpers_afresh_not_installed_packages(
    tmp_path: Path, uid: str
) -> None:
    handlers, helper = f"h_{uid}", f"helper_{uid}"
    write_files(tmp_path, {f"{helper}.py": "ANSWER = 1\n"})
    source = f"import httpx\nfrom fwrest import get\nfrom {helper} import ANSWER\n\n"
    old = (
        source + "@get('/a')\ndef a():\n    return ANSWER\n\n@get('/gone')\ndef gone():\n    pass\n"
    )
    config = service(tmp_path, handlers, {f"{handlers}.py": old})
    plan = prepare(config)
    own = plan.repository.own_modules()
    assert set(own) == {handlers, helper}  # httpx: an installed package, never re-imported
    write_files(tmp_path, {f"{helper}.py": "ANSWER = 2\n", f"{handlers}.py": source + (
        "@get('/a')\ndef a():\n    return ANSWER\n"
    )})  # fmt: skip
    purge_modules(own)
    fresh = prepare(config)
    assert {path for _, path, _, _ in routes(fresh)} == {"/a"}  # /gone's registration went
    old_a = app_endpoints(plan)[0].func
    new_a = app_endpoints(fresh)[0].func
    assert (old_a(), new_a()) == (1, 2)  # the running generation keeps its own code
    assert new_a.__globals__ is vars(sys.modules[handlers]) is not old_a.__globals__


def test_a_reload_that_fails_puts_the_previous_modules_back(tmp_path: Path, uid: str) -> None:
    handlers, helper = f"h_{uid}", f"helper_{uid}"
    good = "from fwrest import get\n\n@get('/a')\ndef a():\n    return 1\n"
    config = service(tmp_path, handlers, {f"{handlers}.py": good})
    plan = prepare(config)
    before = sys.modules[handlers]
    write_files(tmp_path, {f"{helper}.py": "X = 1\n", f"{handlers}.py": f"import {helper}\n(\n"})
    restore = purge_modules(plan.repository.own_modules())
    prepare_error(config)
    restore()
    assert sys.modules[handlers] is before
    assert helper not in sys.modules  # what the failed import brought in went too
    assert {path for _, path, _, _ in routes(prepare(config))} == {"/a"}
