"""fwrest: a REST application server (see SPEC.md for the contract).

The public API and ``__all__`` only.
"""

import sys as _sys

# the one place of the version: pyproject.toml reads it from here (setuptools' dynamic
# version), so no start of fwrest pays for importlib.metadata (a tenth of a second)
__version__ = "0.2.0"

from fwrest.context import Event, EventStream, Response, rest
from fwrest.errors import ConfigError
from fwrest.repository import delete, get, patch, post, put
from fwrest.server import Service, start

# ``fwrest.rest`` is the REST object, not a module; registered under that module name too, so
# that ``from fwrest.rest import wsRestfulStart`` (the original's ``<vendor>.rest`` namespace,
# SPEC 6) works as ``fwrest.rest.wsRestfulStart`` does.
_sys.modules.setdefault("fwrest.rest", rest)  # type: ignore[arg-type]

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
