"""``fwrest``'s public surface is exactly the SPEC's (1-3, 10.5's ``EventStream`` and ``Event``)."""

from __future__ import annotations

import inspect

import fwrest

EXPECTED = {
    "start", "Service", "ConfigError", "get", "post", "put", "patch", "delete", "rest", "Response",
    "EventStream", "Event", "__version__",
}  # fmt: skip


def test_all_is_exactly_the_public_api() -> None:
    assert len(fwrest.__all__) == len(set(fwrest.__all__)), "a name is listed twice"
    assert set(fwrest.__all__) == EXPECTED


def test_every_public_name_exists_and_has_the_right_kind() -> None:
    for name in EXPECTED:
        assert hasattr(fwrest, name), name
    assert callable(fwrest.start)
    assert inspect.isclass(fwrest.Service)
    assert callable(fwrest.Service.stop)
    assert issubclass(fwrest.ConfigError, Exception)
    assert inspect.isclass(fwrest.Response)
    for verb in ("get", "post", "put", "patch", "delete"):
        assert callable(getattr(fwrest, verb)), verb
    assert isinstance(fwrest.__version__, str) and fwrest.__version__
    # the REST object keeps the original product's method names (SPEC 3)
    assert callable(fwrest.rest.getQueryRequest)


def test_star_import_gives_the_listed_names() -> None:
    namespace: dict[str, object] = {}
    exec("from fwrest import *", namespace)
    namespace.pop("__builtins__", None)
    assert set(namespace) == EXPECTED
