"""The compiled repository: endpoint annotations, ``LoadURNs`` mappings, imports, function names.

Owns the decorators (``get`` .. ``delete``), importing the modules an environment's
``Repository`` names, and resolving function names given in configuration. Knows no port,
no authorization and no HTTP.
"""

from fwrest.repository.decorators import Endpoint, delete, get, patch, post, put, registered
from fwrest.repository.loader import (
    Environment,
    Repository,
    endpoint_path,
    is_async,
    purge_modules,
)

__all__ = [
    "Endpoint",
    "Environment",
    "Repository",
    "delete",
    "endpoint_path",
    "get",
    "is_async",
    "patch",
    "post",
    "purge_modules",
    "put",
    "registered",
]
