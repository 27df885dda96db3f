"""``fwrest lockouts`` (SPEC 13.6): list and lift brute-force lock-outs in the state store.

A lock-out is a key of the throttle (``<port>|user:<name>`` or ``<port>|ip:<address>``,
:func:`fwrest.auth.throttle.port_keys`) in the store's list. Lifting one removes it and its
failure count from the store (:meth:`FailureStore.lift_lock`); every worker's throttle sees it
gone at its next refresh of the list (0.5 s) and withdraws it from the host's lock board.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from fwrest import log
from fwrest.auth.throttle import WINDOW_S, address_key, port_keys, user_key

if TYPE_CHECKING:
    from fwrest.store import FailureStore

__all__ = ["run"]

MEMORY = (
    "fwrest: error: the state store is memory: the service keeps its lock-outs in its own "
    "process, out of this command's reach (and forgets them when it stops, or after "
    f"{WINDOW_S / 60:g} minutes); set [HTTPSERVER] StateStore=sqlite or redis://... to manage "
    "them from the command line"
)


def _split(key: str) -> tuple[str, str, str]:
    """``(port, "user"|"ip", subject)`` of a throttle key."""
    port, _, rest = key.partition("|")
    kind, _, subject = rest.partition(":")
    return port, kind, log.escape(subject)  # a user name as a client sent it


def run(config_path: str, action: str, name: str | None) -> int:
    """One ``fwrest lockouts`` command; returns the exit code."""
    from fwrest.config.loader import load_config
    from fwrest.store import StoreError, open_store

    config = load_config(config_path)
    if config.state_store == "memory":
        print(MEMORY, file=sys.stderr)
        return 2
    if action == "clear" and name is not None and not name:
        print("fwrest: error: lockouts clear needs a user name or an address", file=sys.stderr)
        return 2
    try:
        store = open_store(config.state_store, config.data_path, config.redis)
        try:
            locks = store.locks()
            if action == "list":
                _print(store, locks)
                return 0
            if name is None:
                chosen = list(locks)
            else:
                # the keys NAME has on every port, locked or not (their failures go too)
                chosen = []
                for server in config.servers:
                    users, addresses = port_keys(server.name)
                    chosen += [users + user_key(name), addresses + address_key(name)]
            for key in chosen:
                store.lift_lock(key)
        finally:
            store.close()
    except StoreError as exc:
        print(f"fwrest: error: {exc}", file=sys.stderr)
        return 1
    lifted = sorted(_split(k) for k in locks if k in chosen)
    for port, kind, subject in lifted:
        print(f"fwrest lockouts: lifted [{port}] {kind} {subject}")
    if not lifted:
        print("fwrest lockouts: no lock-out in force" + (f" for {name!r}" if name else ""))
    return 0


def _print(store: FailureStore, locks: dict[str, float]) -> None:
    if not locks:
        print("no lock-out in force")
        return
    now = time.time()
    rows = [("PORT", "KIND", "SUBJECT", "FAILURES", "UNTIL (UTC)", "LEFT")]
    for key, until in sorted(locks.items()):
        port, kind, subject = _split(key)
        ends = datetime.fromtimestamp(until, UTC).strftime("%Y-%m-%d %H:%M:%S")
        count = store.failures(key, WINDOW_S)[0]
        rows.append((port, kind, subject, str(count), ends, f"{max(until - now, 0):.0f} s"))
    width = [max(len(r[i]) for r in rows) for i in range(5)]
    for row in rows:
        print("  ".join(f"{v:<{width[i]}}" for i, v in enumerate(row[:5])) + "  " + row[5])
