"""Builders of the services the tests serve, shared across folders (tests/auth has its own).

* ``config_of(folder, module, **keys)``: :func:`~tests.conftest.free_config`'s service for
  ``fwrest serve`` (its app module ``app``), or, given ``module``, the same service with its
  app module named ``module`` (:func:`~tests.conftest.module_config`: for
  ``fwrest.testing.Client``, which imports it into the test process): one builder for a module
  that serves the same service both ways;
* ``own_ports(servers)``: server sections, each on a port number of its own that nothing binds
  (a copy): the in-process client's URL, ``Host`` and the REST object's port show it, as a
  bound port's would.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from tests.conftest import Sections, free_config, free_port, module_config


def config_of(folder: Path, module: str | None = None, **keys: Any) -> Path:
    """``free_config(folder, **keys)``, its app module named ``module`` when given."""
    return module_config(folder, module, **keys) if module else free_config(folder, **keys)


def own_ports(servers: Sections) -> Sections:
    """A deep copy of ``servers``, each section's ``Port`` a free port number."""
    copied = copy.deepcopy(servers)
    for section in copied.values():
        section["Port"] = free_port()
    return copied
