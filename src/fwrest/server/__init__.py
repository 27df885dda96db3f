"""The server: an app per port, TLS, thread pools, workers, signals, stop, ``start()``.

Owns binding, the HTTP connection layer (on httptools), the request pipeline, the worker
processes and their supervisor. Parses no configuration: it receives a validated
:class:`~fwrest.config.ServiceConfig` and a compiled plan.
"""

from fwrest.server.service import Service, prepare, serve, start

__all__ = ["Service", "prepare", "serve", "start"]
