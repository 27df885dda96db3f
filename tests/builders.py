"""Service builders shared across folders (tests/auth has its own): ``config_of(folder, module,
**keys)`` is :func:`~tests.conftest.free_config`'s service (module ``app``) or, given ``module``,
:func:`~tests.conftest.module_config`'s for the in-process client; ``own_ports(servers)`` gives each
section its own unbound port number, shown as a bound one's would be."""

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
