"""fwrest: a REST application server (see SPEC.md for the contract).

The public API and ``__all__`` only. Its names are loaded when first used (PEP 562), so that
``import fwrest.verify`` in another service (SPEC 16.4) does not load the server.
"""

import sys as _sys
from importlib import import_module as _import_module
from typing import TYPE_CHECKING

# the one place of the version: pyproject.toml reads it from here (setuptools' dynamic
# version), so no start of fwrest pays for importlib.metadata (a tenth of a second)
__version__ = "0.2.0"

if TYPE_CHECKING:
    # (mypy takes the name rest for fwrest/context/rest.py's module too)
    from fwrest.context import Event, EventStream, Response, rest  # type: ignore[no-redef]
    from fwrest.errors import ConfigError
    from fwrest.repository import delete, get, patch, post, put
    from fwrest.server import Service, start

# name -> the module that defines it
_SOURCES = {
    "ConfigError": "fwrest.errors",
    "Event": "fwrest.context",
    "EventStream": "fwrest.context",
    "Response": "fwrest.context",
    "Service": "fwrest.server",
    "delete": "fwrest.repository",
    "get": "fwrest.repository",
    "patch": "fwrest.repository",
    "post": "fwrest.repository",
    "put": "fwrest.repository",
    "rest": "fwrest.context",
    "start": "fwrest.server",
}


def __getattr__(name: str) -> object:
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module 'fwrest' has no attribute {name!r}")
    value = getattr(_import_module(source), name)
    globals()[name] = value
    return value


class _RestModule:
    """``fwrest.rest`` is the REST object, not a module; ``import fwrest.rest`` gives that
    object too, so that ``from fwrest.rest import wsRestfulStart`` (the original's
    ``<vendor>.rest`` namespace, SPEC 6) works as ``fwrest.rest.wsRestfulStart`` does."""

    @staticmethod
    def find_spec(fullname: str, path: object = None, target: object = None) -> object:
        if fullname != "fwrest.rest":
            return None
        from importlib.machinery import ModuleSpec

        return ModuleSpec(fullname, _RestModule)  # type: ignore[arg-type]

    @staticmethod
    def create_module(spec: object) -> None:
        return None

    @staticmethod
    def exec_module(module: object) -> None:
        # the import system hands back what sys.modules holds after this
        _sys.modules["fwrest.rest"] = __getattr__("rest")  # type: ignore[assignment]


_sys.meta_path.append(_RestModule)  # type: ignore[arg-type]

__all__ = [
    "ConfigError",
    "Event",
    "EventStream",
    "Response",
    "Service",
    "__version__",
    "delete",
    "get",
    "patch",
    "post",
    "put",
    "rest",
    "start",
]
