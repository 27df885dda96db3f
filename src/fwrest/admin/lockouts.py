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
from fwrest.store.audit import NOT_KEPT, command_audit, command_event

if TYPE_CHECKING:
    from fwrest.store import FailureStore

__all__ = ["run"]

MONITOR = "APP_MONITOR"  # the monitor's port, as its guard names it (server/monitor_port.py)
MEMORY = (
    "fwrest: error: the state store is memory: the service keeps its lock-outs in its own "
    "process, out of this command's reach (and forgets them when it stops, or after "
    f"{WINDOW_S / 60:g} minutes); set [HTTPSERVER] StateStore=sqlite or redis://... to manage "
    "them from the command line"
)


def _split(key: str, names: dict[str, str]) -> tuple[str, str, str]:
    """``(port, "user"|"ip", subject)`` of a throttle key; the port as the config spells its
    server section (``names``: folded name -> name), as the service's own events name it,
    else as the key has it (folded)."""
    port, _, rest = key.partition("|")
    kind, _, subject = rest.partition(":")
    return names.get(port, port), kind, log.escape(subject)  # a user name as a client sent it


def run(config_path: str, action: str, name: str | None) -> int:
    """One ``fwrest lockouts`` command; returns the exit code."""
    from fwrest.config.loader import load_config
    from fwrest.store import StoreError, open_store
    from fwrest.store.schema import SchemaError

    config = load_config(config_path)
    if config.state_store == "memory":
        print(MEMORY, file=sys.stderr)
        return 2
    if action == "clear" and name is not None and not name:
        print("fwrest: error: lockouts clear needs a user name or an address", file=sys.stderr)
        return 2
    # the keys hold a port's name folded (port_keys); the events of the service hold the name
    # as the config spells a server section, and the monitor's as its guard does
    ports = [s.name for s in config.servers] + [MONITOR]
    names = {port_keys(port)[0].partition("|")[0]: port for port in ports}
    try:
        store = open_store(config.state_store, config.data_path, config.redis)
        try:
            locks = store.locks()
            if action == "list":
                _print(store, locks, names)
                return 0
            level = config.tunables.rest_log_level
            with command_audit(store, level, config.log_file, config.log_format) as audit:
                chosen = list(locks) if name is None else _keys_of(name, ports, locks)
                for key in chosen:
                    store.lift_lock(key)
                lifted = sorted(_split(k, names) for k in locks if k in chosen)
                kept = True
                for port, kind, subject in lifted:
                    event = command_event(
                        "lockout.clear", "fwrest lockouts clear", port, kind=kind, subject=subject
                    )
                    kept = audit.record_now(event) and kept
        finally:
            store.close()
    except SchemaError as exc:  # a newer release's store: an error as at start (SPEC 17.2)
        print(f"fwrest: error: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:
        print(f"fwrest: error: {exc}", file=sys.stderr)
        return 1
    for port, kind, subject in lifted:
        print(f"fwrest lockouts: lifted [{port}] {kind} {subject}")
    if not lifted:
        print("fwrest lockouts: no lock-out in force" + (f" for {name!r}" if name else ""))
    # an address the user may be failing from, locked by others' failures too: say so
    users = {port for port, kind, _ in lifted if kind == "user"}
    for port, kind, subject in sorted(_split(k, names) for k in locks if k not in chosen):
        if kind == "ip" and port in users:
            print(f"fwrest lockouts: still in force: [{port}] {kind} {subject}")
    if not kept:
        print(NOT_KEPT, file=sys.stderr)
    return 0


def _keys_of(name: str, ports: list[str], locks: dict[str, float]) -> list[str]:
    """The keys NAME has on every port, locked or not (their failures go too), and the
    address lock-outs a user NAME's failures made: the throttle counts a failure by user and
    by address, so one client failing as one user locks both at the same failure (their
    ends within a second); lifting the user's alone would leave that user locked out."""
    chosen: list[str] = []
    for port in ports:
        users, addresses = port_keys(port)
        own = users + user_key(name)
        chosen += [own, addresses + address_key(name)]
        until = locks.get(own)
        if until is not None:
            chosen += [
                key
                for key, ends in locks.items()
                if key.startswith(addresses) and abs(ends - until) <= 1.0
            ]
    return chosen


def _print(store: FailureStore, locks: dict[str, float], names: dict[str, str]) -> None:
    if not locks:
        print("no lock-out in force")
        return
    now = time.time()
    rows = [("PORT", "KIND", "SUBJECT", "FAILURES", "UNTIL (UTC)", "LEFT")]
    for key, until in sorted(locks.items()):
        port, kind, subject = _split(key, names)
        ends = datetime.fromtimestamp(until, UTC).strftime("%Y-%m-%d %H:%M:%S")
        count = store.failures(key, WINDOW_S)[0]
        rows.append((port, kind, subject, str(count), ends, f"{max(until - now, 0):.0f} s"))
    width = [max(len(r[i]) for r in rows) for i in range(5)]
    for row in rows:
        print("  ".join(f"{v:<{width[i]}}" for i, v in enumerate(row[:5])) + "  " + row[5])
