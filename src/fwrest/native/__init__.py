"""Native operation routes (``/fw/...``, SPEC 5): ordinary routes, so the port's guard covers
them; they read the service's state through the request's port and worker, read-only except
the settings and the usage reset.
"""

from fwrest.native.catalog import (
    NATIVE_ROUTES,
    NativeOptions,
    native_endpoints,
    native_warnings,
    parse_native,
)

__all__ = ["NATIVE_ROUTES", "NativeOptions", "native_endpoints", "native_warnings", "parse_native"]
