"""``fwrest keys rotate|list CONFIG`` (SPEC 12.1): the service's key set, read and changed
where the service keeps it, while the service runs (its workers follow within 1 s)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from fwrest.auth.oauth2.keys import key_set_source, load_key_set
from fwrest.auth.oauth2.keyset import KeyEntry, KeySetError, KeySource, rotate
from fwrest.errors import ConfigError
from fwrest.server.build import ServicePlan, check_schema, key_algs
from fwrest.server.service import prepare
from fwrest.store import StateStore, StoreError, open_store
from fwrest.store.audit import AuditLog, command_audit, command_event

__all__ = ["KeySet", "open_key_set"]


class KeySet:
    """The key set of one configuration, open (:meth:`close` closes its store)."""

    def __init__(self, plan: ServicePlan, source: KeySource, store: StateStore | None) -> None:
        self.plan = plan
        self.source = source
        self.algs = key_algs(plan.ports)
        self._store = store

    def entries(self) -> list[KeyEntry]:
        return load_key_set(self.source, self.algs, create=False)

    def rotate(self) -> list[KeyEntry]:
        """Per algorithm in use, the next key becomes current and a new next key is made;
        the former current ones retire.

        Raises:
            ConfigError: the set cannot be read or written.
        """
        load_key_set(self.source, self.algs, create=False)  # a damaged set: the same words
        try:
            return rotate(self.source, self.algs)
        except KeySetError as exc:
            raise ConfigError(
                f"{exc}.",
                section="HTTPSERVER",
                key="SigningKeyFile",
                fix="run the command as the user the service runs as, or fix the folder's "
                "permissions.",
            ) from None

    @contextlib.contextmanager
    def audit(self) -> Iterator[AuditLog]:
        """The audit trail a rotation is recorded in (:func:`command_audit`), open before the
        rotation: the store the configuration names (None: the memory store, the service's
        own, or a store that does not open, which the rotation does not need) and the log
        where the service writes its audit lines.

        Raises:
            ConfigError: ``LogFile`` exists and cannot be opened.
        """
        config = self.plan.config
        store, opened = self._store, None
        if store is None and config.state_store != "memory":
            with contextlib.suppress(StoreError):
                opened = open_store(config.state_store, config.data_path, config.redis)
            store = opened
        level = config.tunables.rest_log_level
        try:
            with command_audit(store, level, config.log_file, config.log_format) as audit:
                yield audit
        finally:
            if opened is not None:
                opened.close()

    def record_rotation(self, audit: AuditLog, entries: list[KeyEntry]) -> bool | None:
        """Record the rotation (SPEC 13.5): the new current keys' ids and algorithms (never a
        key). Whether the store kept it; None when the store is the service's own memory, out
        of this command's reach (the line is written all the same)."""
        keys = [{"kid": e.kid, "alg": e.alg} for e in entries if e.current and e.alg in self.algs]
        kept = audit.record_now(command_event("keys.rotate", "fwrest keys rotate", keys=keys))
        return None if self.plan.config.state_store == "memory" else kept

    def hs256_ports(self) -> list[str]:
        return [
            p.config.name
            for p in self.plan.ports
            if p.auth_settings is not None
            and p.auth_settings.scheme == "oAuth2"
            and p.auth_settings.signing_alg == "HS256"
        ]

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


def open_key_set(path: str | Path) -> KeySet:
    """The key set of the service ``path`` describes.

    Raises:
        ConfigError: the configuration is invalid, no port signs with an asymmetric
            algorithm (HS256 has no key set), or the store was written by a newer release.
        StoreError: the Redis store holding the key set does not answer.
    """
    plan = prepare(path)
    config = plan.config
    if not key_algs(plan.ports):
        oauth = [p.config.name for p in plan.ports if p.auth.scheme == "oAuth2"]
        where = (
            f"the oAuth2 port(s) {', '.join(oauth)} sign with HS256"
            if oauth
            else "no port uses the oAuth2 scheme"
        )
        raise ConfigError(
            f"{where}: there is no key set (HS256 signs with one secret key, "
            "SigningKeyFile, which is never published nor rotated by this command).",
            section=oauth[0] if oauth else "HTTPSERVER",
            key="FwData",
            fix='set "signingAlg": "EdDSA" (or ES256, RS256) in the Authorization object to '
            "sign with a key set that can be rotated and published.",
        )
    store = None
    if config.signing_key_file is None and config.state_store not in ("memory", "sqlite"):
        # a store that does not answer is no fault of the configuration: StoreError (exit 1)
        store = open_store(config.state_store, config.data_path, config.redis)
        try:
            store.ping()
        except StoreError:
            store.close()
            raise
    try:
        check_schema(config)  # SPEC 17.2: a store of a newer release is refused, as by check
    except BaseException:
        if store is not None:
            store.close()
        raise
    return KeySet(plan, key_set_source(config.signing_key_file, config.data_path, store), store)
