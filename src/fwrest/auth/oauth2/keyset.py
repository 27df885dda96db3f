"""The asymmetric key set of a service's token ports (SPEC 12.1): keys, rotation, the JWK Set.

Theory of operation. One JSON document holds every key of the service: per key its ``kid``
(the RFC 7638 thumbprint of its public JWK), ``alg``, ``created``, the private key as PKCS#8
PEM, whether it is ``current`` (the one a port of that algorithm signs with), when it was
``retired`` (None while current or next) and ``ttl`` (the longest access-token lifetime, in
seconds, any worker signed with it); and the set's ``set`` id, made with it and kept by every
change, which tells a set made anew (a store that lost its data) from the same set changed.

Besides its current key, each algorithm in use has one *next* key, published ahead of its use
(``current`` false, ``retired`` None: :attr:`KeyEntry.next`): a verifier that fetched the JWK
Set before a rotation already holds the key signing after it, and need not fetch again (a JWK
Set client refetches on an unknown ``kid`` at most once a minute, or not at all within its
cooldown). It is made with the current key (:func:`ensure`) and whenever a rotation makes it
current (:func:`rotate`); it verifies (only the service holds its private key) and never
retires nor drops while next. fwrest 0.1.0, sharing the set in a rolling upgrade (SPEC 17.2),
reads such an entry as a key that verifies and is never dropped, and its rotation (which
retires current keys only) leaves it next: no field of its own marks it, as 0.1.0 rewrites
the document with its own fields only.

The document lives in ``keyset.json`` beside the signing key (mode 0600, replaced whole under a
lock: readers never see half a document) or, where the signing key lives in Redis, in the
store (:class:`~fwrest.store.BlobStore`'s compare-and-set). Every change is a compare-and-set
of the whole document (:func:`update`), so a rotation and a worker's ``ttl`` note never undo
each other.

A worker's view of it (``portkeys.PortKeys``, one per oAuth2 port) is rebuilt when the document
changes: a background task looks at it every ``portkeys.POLL_S`` (0.5 s) (a ``stat`` of the file, or one store
read), off the request path, so every worker and host signs with a new current key within
the poll plus one store call (SPEC 12.1: 1 s). A retired key verifies until every token
signed with it has expired: ``retired + SWITCH_S + MARGIN_S + ttl``; then it is dropped (no
longer verifies, no longer published) and the next change of the document removes it.

All cryptography is ``cryptography``'s, through joserfc (key generation, thumbprints, PEM)
and PyJWT (signatures); nothing here computes a signature or a digest itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import orjson

from fwrest.store import BlobStore, StoreError

__all__ = [
    "ASYMMETRIC_ALGS",
    "KEYSET_BLOB",
    "KEYSET_FILE",
    "SIGNING_ALGS",
    "FileKeySet",
    "KeyEntry",
    "KeySetError",
    "KeySetUnreachable",
    "KeySource",
    "StoreKeySet",
    "check_entries",
    "ensure",
    "import_key",
    "parse_set",
    "read_entries",
    "rotate",
]

ASYMMETRIC_ALGS = ("EdDSA", "ES256", "RS256")
SIGNING_ALGS = ("HS256", *ASYMMETRIC_ALGS)
KEYSET_FILE = "keyset.json"
KEYSET_BLOB = "fwrest-keyset"  # its name in a Redis store's blobs
SWITCH_S = 1.0  # every worker signs with a new current key within this (SPEC 12.1)
MARGIN_S = 2.0  # a ttl note reaches the set at most one poll after the token was signed
RSA_BITS = 3072
_UPDATE_ATTEMPTS = 50


class KeySetError(Exception):
    """The key set cannot be read, parsed or written; the message says where and why."""


class KeySetUnreachable(KeySetError):
    """The state store holding the key set does not answer (a damaged set is KeySetError)."""


@dataclass(frozen=True, slots=True)
class KeyEntry:
    """One key of the set, as stored."""

    kid: str
    alg: str
    created: float
    pem: str
    current: bool = True
    retired: float | None = None
    ttl: float = 0.0

    @property
    def next(self) -> bool:
        """The key its algorithm signs with after the next rotation: published, never used."""
        return not self.current and self.retired is None

    def drop_at(self) -> float | None:
        """When every token signed with this key has expired (None: current or next)."""
        if self.retired is None:
            return None
        return self.retired + SWITCH_S + MARGIN_S + self.ttl


def _joserfc_key(alg: str) -> Any:
    from joserfc.jwk import ECKey, OKPKey, RSAKey

    if alg == "EdDSA":
        return OKPKey
    if alg == "ES256":
        return ECKey
    if alg == "RS256":
        return RSAKey
    raise KeySetError(f"the algorithm {alg!r} has no key set (one of {', '.join(ASYMMETRIC_ALGS)})")


def new_entry(alg: str, now: float, *, current: bool = True) -> KeyEntry:
    """A new current (else next) key of ``alg`` (EdDSA: Ed25519; ES256: P-256; RS256: 3072-bit
    RSA)."""
    cls = _joserfc_key(alg)
    if alg == "EdDSA":
        key = cls.generate_key("Ed25519")
    elif alg == "ES256":
        key = cls.generate_key("P-256")
    else:
        key = cls.generate_key(RSA_BITS)
    pem = key.as_pem(private=True).decode("ascii")
    return KeyEntry(str(key.thumbprint()), alg, now, pem, current=current)


def _entry(raw: Any, where: str) -> KeyEntry:
    if not isinstance(raw, dict):
        raise KeySetError(f"the key set in {where} holds an entry that is not an object")
    try:
        entry = KeyEntry(
            kid=str(raw["kid"]),
            alg=str(raw["alg"]),
            created=float(raw["created"]),
            pem=str(raw["pem"]),
            current=bool(raw.get("current", False)),
            retired=None if raw.get("retired") is None else float(raw["retired"]),
            ttl=float(raw.get("ttl", 0.0)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise KeySetError(f"the key set in {where} has an entry without {exc}") from None
    _joserfc_key(entry.alg)  # an unknown algorithm
    return entry


def parse(doc: bytes, where: str) -> list[KeyEntry]:
    """The entries of a stored document.

    Raises:
        KeySetError: not the JSON fwrest writes.
    """
    return parse_set(doc, where)[0]


def parse_set(doc: bytes, where: str) -> tuple[list[KeyEntry], str]:
    """The entries of a stored document and the set's id ("" in a set written by an earlier
    fwrest, which keeps none): made with the set, kept by every change of it (a rotation, a
    removal), so that a set made anew (a store that lost its data, another host then making
    one) is told from the same set changed (``portkeys.PortKeys.refresh``).

    Raises:
        KeySetError: not the JSON fwrest writes.
    """
    try:
        value = orjson.loads(doc)
    except orjson.JSONDecodeError:
        raise KeySetError(f"the key set in {where} is not JSON") from None
    if not isinstance(value, dict) or not isinstance(value.get("keys"), list):
        raise KeySetError(f'the key set in {where} has no "keys" list')
    set_id = value.get("set")
    return [_entry(raw, where) for raw in value["keys"]], set_id if isinstance(set_id, str) else ""


def dump(entries: list[KeyEntry], set_id: str = "") -> bytes:
    keys = [
        {
            "kid": e.kid,
            "alg": e.alg,
            "created": e.created,
            "current": e.current,
            "retired": e.retired,
            "ttl": e.ttl,
            "pem": e.pem,
        }
        for e in entries
    ]
    doc: dict[str, Any] = {"set": set_id, "keys": keys} if set_id else {"keys": keys}
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"


class KeySource(Protocol):
    """Where the key set document lives."""

    where: str

    def read(self) -> bytes | None:
        """The document; None when there is none yet."""
        ...

    def swap(self, old: bytes | None, new: bytes) -> bytes | None:
        """Store ``new`` if the document is still ``old`` (None: absent); the document now."""
        ...

    def stamp(self) -> object:
        """Something that changes whenever the document does (cheap: polled)."""
        ...


class FileKeySet:
    """``keyset.json`` (mode 0600) in a folder; writers take ``keyset.json.lock``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.where = str(path)

    def read(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise KeySetError(
                f"the key set file {self.path} cannot be read: {exc.strerror}"
            ) from None

    def stamp(self) -> object:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def swap(self, old: bytes | None, new: bytes) -> bytes | None:
        folder = self.path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(
                self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600
            )
        except OSError as exc:
            raise KeySetError(
                f"the key set file {self.path} cannot be written: {exc.strerror}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            current = self.read()
            if current != old:
                return current
            tmp_fd, tmp = tempfile.mkstemp(dir=folder, prefix=".keyset-")  # mode 0600
            try:
                with os.fdopen(tmp_fd, "wb") as fh:
                    fh.write(new)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, self.path)  # readers see the old document or the new, whole
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise KeySetError(
                    f"the key set file {self.path} cannot be written: {exc.strerror}"
                ) from None
            return new
        finally:
            os.close(fd)  # releases the lock


class StoreKeySet:
    """The key set in the state store (Redis, where the signing key lives there too)."""

    def __init__(self, store: BlobStore) -> None:
        self.store = store
        self.where = f"the {store.kind} state store (blob {KEYSET_BLOB})"

    def read(self) -> bytes | None:
        try:
            return self.store.get_blob(KEYSET_BLOB)
        except StoreError as exc:
            raise KeySetUnreachable(
                f"the key set cannot be read from the state store: {exc}"
            ) from None

    def stamp(self) -> object:
        return self.read()

    def swap(self, old: bytes | None, new: bytes) -> bytes | None:
        try:
            return self.store.swap_blob(KEYSET_BLOB, old, new)
        except StoreError as exc:
            raise KeySetUnreachable(
                f"the key set cannot be written to the state store: {exc}"
            ) from None


def read_entries(source: KeySource) -> list[KeyEntry]:
    """The stored entries ([] when there is no key set yet)."""
    doc = source.read()
    return [] if doc is None else parse(doc, source.where)


def update(
    source: KeySource,
    change: Callable[[list[KeyEntry]], list[KeyEntry] | None],
    *,
    set_id: str = "",
) -> list[KeyEntry]:
    """Apply ``change`` to the stored entries by compare-and-set (retried when another
    writer came first); ``change`` returns None to leave them as they are. The entries now.
    The set keeps its id (or its lack of one: a set an earlier fwrest wrote, which 0.2.0
    hosts then never take for one made anew); one made here gets ``set_id`` (a set put
    back), else a new one.

    Raises:
        KeySetError: the set cannot be read, parsed or written.
    """
    for _ in range(_UPDATE_ATTEMPTS):
        doc = source.read()
        entries, kept = ([], "") if doc is None else parse_set(doc, source.where)
        changed = change(entries)
        if changed is None:
            return entries
        new = dump(changed, (set_id or secrets.token_hex(8)) if doc is None else kept)
        if source.swap(doc, new) == new:
            return changed
    raise KeySetError(f"the key set in {source.where} changed {_UPDATE_ATTEMPTS} times meanwhile")


def _pruned(entries: list[KeyEntry], now: float) -> list[KeyEntry]:
    out = []
    for e in entries:
        drop = e.drop_at()
        if drop is None or drop > now:
            out.append(e)
    return out


def _missing(entries: list[KeyEntry], algs: set[str], now: float) -> list[KeyEntry]:
    """The keys to add so that each of ``algs`` has a current key and a next one."""
    current = {e.alg for e in entries if e.current}
    upcoming = {e.alg for e in entries if e.next}
    return [new_entry(alg, now) for alg in sorted(algs - current)] + [
        new_entry(alg, now, current=False) for alg in sorted(algs - upcoming)
    ]


def ensure(source: KeySource, algs: set[str]) -> list[KeyEntry]:
    """The stored entries, with a current key and a next one made for each of ``algs`` that
    has none (a set of fwrest 0.1.0, which makes no next key, gets its next keys here)."""

    def change(entries: list[KeyEntry]) -> list[KeyEntry] | None:
        now = time.time()
        added = _missing(entries, algs, now)
        if not added:
            return None
        return _pruned(entries, now) + added

    return update(source, change)


def rotate(source: KeySource, algs: set[str]) -> list[KeyEntry]:
    """For each of ``algs``, its next key becomes current (a new one where the set has none:
    a set of fwrest 0.1.0) and a new next key is made; the former current ones retire (they
    verify until their tokens expired) and keys past that are removed. Of several next keys
    of an algorithm (hosts that put theirs back in a set made anew) the newest becomes
    current and the others retire: none of them signed anything."""

    def change(entries: list[KeyEntry]) -> list[KeyEntry]:
        now = time.time()
        newest: dict[str, KeyEntry] = {}
        for e in entries:
            if (
                e.next
                and e.alg in algs
                and (e.alg not in newest or e.created >= newest[e.alg].created)
            ):
                newest[e.alg] = e
        chosen = {e.kid for e in newest.values()}
        kept = []
        for e in _pruned(entries, now):
            if e.kid in chosen:
                e = replace(e, current=True)
            elif e.alg in algs and (e.current or e.next):
                e = replace(e, current=False, retired=now)
            kept.append(e)
        return kept + _missing(kept, algs, now)

    return update(source, change)


def import_key(e: KeyEntry, where: str) -> Any:
    try:
        return _joserfc_key(e.alg).import_key(e.pem)
    except KeySetError:
        raise
    except Exception as exc:  # joserfc raises several kinds for a damaged PEM
        raise KeySetError(
            f"the key {e.kid} in {where} cannot be loaded ({type(exc).__name__})"
        ) from None


def check_entries(entries: list[KeyEntry], where: str) -> None:
    """Every key loads, and its kid is its thumbprint (a start refuses a damaged set).

    Raises:
        KeySetError: a key that does not load or whose kid is not its own.
    """
    for e in entries:
        if str(import_key(e, where).thumbprint()) != e.kid:
            raise KeySetError(f"the key {e.kid} in {where} is not the key its kid names")
