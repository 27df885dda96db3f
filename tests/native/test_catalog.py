"""The catalog serves exactly the names ``NativeRoutes`` may give (``NATIVE_ROUTE_NAMES``)."""

from __future__ import annotations

from fwrest.config.fwdata import NATIVE_ROUTE_NAMES
from fwrest.native.catalog import NATIVE_ROUTES


def test_every_name_has_a_route_and_every_route_a_name() -> None:
    assert {route.name for route in NATIVE_ROUTES} == set(NATIVE_ROUTE_NAMES)
    assert list(NATIVE_ROUTE_NAMES) == sorted(NATIVE_ROUTE_NAMES)  # the messages list them so
