"""Configuration: INI/JSON -> frozen, validated settings and the ``[GENERAL]`` tunables.

Owns reading, case folding and validating every key (from the one table in ``schema``).
Never imports application code and never binds a socket.
"""

from fwrest.config.fwdata import AuthorizationData, FwData, NativeRoutesData
from fwrest.config.loader import load_config, parse_json_text, read_general
from fwrest.config.model import (
    EnvironmentConfig,
    LocationConfig,
    MonitorConfig,
    ServerConfig,
    ServiceConfig,
    ThreadPoolConfig,
    Tunables,
)

__all__ = [
    "AuthorizationData",
    "EnvironmentConfig",
    "FwData",
    "LocationConfig",
    "MonitorConfig",
    "NativeRoutesData",
    "ServerConfig",
    "ServiceConfig",
    "ThreadPoolConfig",
    "Tunables",
    "load_config",
    "parse_json_text",
    "read_general",
]
