"""One oAuth2 port's keys in one worker (SPEC 12.1): the current key it signs with, the keys
of the set it verifies with, its JWK Set, and the poller that keeps them current (see
``keyset.py`` for the key set itself and its theory of operation)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import orjson

from fwrest import log
from fwrest.auth.oauth2.keyset import (
    KeyEntry,
    KeySetError,
    KeySetUnreachable,
    KeySource,
    ensure,
    import_key,
    parse_set,
    update,
)
from fwrest.errors import store_unavailable
from fwrest.store import StoreError
from fwrest.store.calls import runs

__all__ = ["POLL_S", "PortKeys"]

POLL_S = 0.5  # how often a worker looks for a changed key set
# a look that failed so: the store does not answer (a damaged set is a KeySetError)
_UNREACHABLE = (KeySetUnreachable, StoreError, TimeoutError)
# a key due to be dropped within this is not put back (another host, its clock ahead, may
# have pruned it): its tokens are about to expire anyway
_NEAR_DROP_S = 30.0


def _note_ttl(kid: str, ttl: float) -> Callable[[list[KeyEntry]], list[KeyEntry] | None]:
    def change(entries: list[KeyEntry]) -> list[KeyEntry] | None:
        if not any(e.kid == kid and e.ttl < ttl for e in entries):
            return None
        return [replace(e, ttl=ttl) if e.kid == kid and e.ttl < ttl else e for e in entries]

    return change


def _live(entries: list[KeyEntry], now: float) -> list[KeyEntry]:
    """The entries not due to be dropped soon (:data:`_NEAR_DROP_S`)."""
    return [e for e in entries if (drop := e.drop_at()) is None or drop > now + _NEAR_DROP_S]


def _put_back(held: list[KeyEntry]) -> Callable[[list[KeyEntry]], list[KeyEntry] | None]:
    """Put the keys a worker holds back in a set that lacks them (a Redis that lost its data,
    a file removed: its tokens must keep verifying on every host). A key that was current
    (or next) comes back retired where the set has a current (or next) key of its algorithm
    (another host made one first), so that every host signs with that one (and rotates to
    that one)."""

    def change(entries: list[KeyEntry]) -> list[KeyEntry] | None:
        now = time.time()
        kids = {e.kid for e in entries}
        current = {e.alg for e in entries if e.current}
        upcoming = {e.alg for e in entries if e.next}
        lost = [e for e in _live(held, now) if e.kid not in kids]
        if not lost:
            return None
        return entries + [
            replace(e, current=False, retired=now)
            if (e.current and e.alg in current) or (e.next and e.alg in upcoming)
            else e
            for e in lost
        ]

    return change


@dataclass(frozen=True, slots=True)
class _View:
    """What one port signs and verifies with, built from one document."""

    kid: str
    signing: Any  # the current private key (a cryptography object)
    verifying: dict[str, tuple[Any, float | None]]  # kid -> (public key, drop_at)
    # the JWK Set documents in force one after another as former keys are dropped by time:
    # (until, document), the last until inf (a key set changes only when its file or Redis
    # entry does, so each worker filters what it publishes by time, as what it verifies with)
    jwks: tuple[tuple[float, bytes], ...]


def _view(alg: str, entries: list[KeyEntry], where: str) -> _View:
    kid, signing = "", None
    verifying: dict[str, tuple[Any, float | None]] = {}
    published: list[tuple[float, dict[str, Any]]] = []
    now = time.time()
    for e in entries:
        if e.alg != alg:
            continue
        drop = e.drop_at()
        if drop is not None and drop <= now:
            continue
        key = import_key(e, where)
        verifying[e.kid] = (key.public_key, drop)
        jwk = {**key.as_dict(private=False), "use": "sig", "alg": alg, "kid": e.kid}
        published.append((math.inf if drop is None else drop, jwk))
        if e.current:
            kid, signing = e.kid, key.private_key
    if signing is None:
        raise KeySetError(f"the key set in {where} has no current {alg} key")
    drops = sorted({drop for drop, _ in published if drop != math.inf})
    stages = []
    since = -math.inf
    for until in (*drops, math.inf):
        keys = [jwk for drop, jwk in published if drop > since]
        stages.append((until, orjson.dumps({"keys": keys})))
        since = until
    return _View(kid, signing, verifying, tuple(stages))


class PortKeys:
    """One port's keys in one worker: signs with the current key of its algorithm, verifies
    with the keys of the set (never with a key a token names or carries, SPEC 7), and keeps
    itself current (:meth:`start`)."""

    def __init__(
        self,
        alg: str,
        source: KeySource,
        entries: list[KeyEntry],
        *,
        read: Callable[[Callable[[], Any]], Any] | None = None,
    ) -> None:
        self.alg = alg
        self.source = source
        # the set as it is now (a worker that replaces one started later than the plan's
        # entries were read), else the plan's until the first poll
        self._stamp: object = None
        self._set_id = ""  # the id of the set the view was built from ("" unknown)
        with contextlib.suppress(KeySetError, StoreError):
            stamp = source.stamp()
            doc = source.read()
            if doc is not None:
                stored, self._set_id = parse_set(doc, source.where)
                entries = stored or entries
            self._stamp = stamp
        # None (pending): the set is in a store that did not answer at start; the poller
        # reads it (made there when missing), and what needs a key answers 503 meanwhile
        self._view: _View | None = _view(alg, entries, source.where) if entries else None
        self._entries = entries  # the whole set the view was built from (all algorithms)
        self._ttl_noted: dict[str, float] = {e.kid: e.ttl for e in entries}
        self._ttl_signed: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self._look_now: asyncio.Future[None] | None = None  # the one look under way
        # the last look failed (the store does not answer): a token naming a key not known
        # here is answered 503 at once, without waiting on the store (SPEC 7)
        self._unreadable = False
        # how a blocking call of the source is made off the loop (the worker's store client)
        self._read = read

    @property
    def pending(self) -> bool:
        """No key yet: the store holding the set has not answered since the start."""
        return self._view is None

    def _current(self) -> _View:
        view = self._view
        if view is None:
            raise store_unavailable()  # 503 until the set is read (SPEC 7)
        return view

    @property
    def kid(self) -> str:
        return "" if self._view is None else self._view.kid

    @property
    def generation(self) -> object:
        """What the worker verifies with now: another object whenever the set changed (a key
        added, retired or removed), so that a remembered verification can tell that its key
        must be looked up again (``tokens.py``'s ``TokenService.verify``)."""
        return self._view

    @property
    def jwks(self) -> bytes:
        """The JWK Set document (RFC 7517): public keys of the port's algorithm only."""
        return self.published()[0]

    def published(self) -> tuple[bytes, float]:
        """The JWK Set document now, and until when it holds (epoch seconds; inf while no
        former key is due to be dropped): a dropped key is no longer published at once."""
        now = time.time()
        stages = self._current().jwks
        for until, document in stages:
            if now < until:
                return document, until
        return stages[-1][1], math.inf  # unreachable: the last stage holds until inf

    def sign(self, claims: dict[str, Any], ttl_s: float) -> str:
        import jwt

        view = self._current()
        if ttl_s > self._ttl_signed.get(view.kid, 0.0):
            self._ttl_signed[view.kid] = ttl_s  # written to the set by the poller
        headers = {"typ": "at+jwt", "kid": view.kid}
        return jwt.encode(claims, view.signing, algorithm=self.alg, headers=headers)

    def key_of(self, kid: object) -> Any | None:
        """The public key of ``kid`` if the set holds it and it is not dropped, else None."""
        if not isinstance(kid, str):
            return None
        view = self._view
        if view is None:
            return None
        found = view.verifying.get(kid)
        if found is None:
            return None
        key, drop = found
        if drop is not None and drop <= time.time():
            return None
        return key

    # -- keeping current ---------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._stopped = False
            self._task = asyncio.get_running_loop().create_task(self._poll())

    def stop(self) -> None:
        self._stopped = True  # as well as the cancel, which a wait_for may drop (tokens.py)
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _off_loop(self, fn: Callable[[], Any]) -> Any:
        if self._read is not None:
            return await self._read(fn)
        return await asyncio.to_thread(fn)

    def _look(self) -> asyncio.Future[None]:
        """The look at the set under way, else a new one: one at a time per port and worker,
        whoever asks (the poller, or requests naming a key not known here)."""
        look = self._look_now
        if look is None:
            look = self._look_now = asyncio.ensure_future(self._off_loop(self.refresh))
            look.add_done_callback(self._looked)
        return look

    def _looked(self, look: asyncio.Future[None]) -> None:
        if self._look_now is look:
            self._look_now = None
        if not look.cancelled():
            # retrieved: whoever awaited it logged it
            self._unreadable = isinstance(look.exception(), _UNREACHABLE)

    async def catch_up(self) -> bool | None:
        """Look at the set now rather than at the next poll; True when what this worker
        signs or verifies with changed, None when the store holding the set does not answer
        (at once, without a look, when the last one failed so). A look already under way may have read the set
        before the key was made: who joins one waits for it, then for a look of its own."""
        if self._unreadable:
            return None
        before = self._view
        for _ in range(2):
            joined = self._look_now is not None
            try:
                await asyncio.shield(self._look())
            except _UNREACHABLE as exc:
                log.auth_log.debug("the key set was not reloaded: %s", exc)
                return None
            except KeySetError as exc:  # damaged: what this worker holds is the verdict
                log.auth_log.debug("the key set was not reloaded: %s", exc)
                break
            if not joined or self._view is not before:
                break
        return self._view is not before

    async def _poll(self) -> None:
        while not self._stopped:
            await asyncio.sleep(POLL_S)
            if self._stopped:
                return
            pending = self._view is None
            try:
                await asyncio.shield(self._look())
            except (KeySetError, StoreError, TimeoutError) as exc:
                if pending:  # the start said the store is down: no line every 0.5 s
                    log.auth_log.debug("the key set was not read: %s", exc)
                else:
                    log.auth_log.warning("the key set was not reloaded: %s", exc)

    # (a store's set: always read, written back only when a ttl grew or the set was lost)
    @runs("get_blob")
    def refresh(self) -> None:
        """(blocking) Reload the set when it changed; write down longer ttls signed here."""
        for kid, ttl in list(self._ttl_signed.items()):
            if ttl > self._ttl_noted.get(kid, 0.0):
                update(self.source, _note_ttl(kid, ttl))
                self._ttl_noted[kid] = ttl
        if self._view is None:  # never read (the store was down at start): made if missing
            stamp = self.source.stamp()
            entries = ensure(self.source, {self.alg})
            self._view = _view(self.alg, entries, self.source.where)
            self._entries = entries
            self._stamp = stamp
            log.auth_log.info(
                "the key set was read from %s: signing %s tokens with the key %s",
                self.source.where,
                self.alg,
                self._view.kid,
            )
            return
        stamp = self.source.stamp()
        if stamp == self._stamp:
            return
        doc = self.source.read()
        entries, set_id = ([], "") if doc is None else parse_set(doc, self.source.where)
        # the set gone, or another set in its place (made anew after a store lost its data):
        # this worker's keys go back in, so that their tokens still verify; the same set
        # changed (a rotation, a key an operator removed) is taken as it is
        if doc is None or (set_id and self._set_id and set_id != self._set_id):
            before = {e.kid for e in entries}
            entries = update(self.source, _put_back(self._entries), set_id=self._set_id)
            stamp = object()  # read again at the next poll: what is stored now
            if {e.kid for e in entries} != before:
                log.auth_log.warning(
                    "the key set in %s was lost (the store lost its data, or the file was "
                    "removed): the keys this worker holds are put back, so that their tokens "
                    "still verify",
                    self.source.where,
                )
        self._set_id = set_id or self._set_id
        view = _view(self.alg, entries, self.source.where)
        if view.kid != self.kid:
            log.auth_log.info("signing %s tokens with the key %s from now on", self.alg, view.kid)
        self._view = view
        self._entries = entries
        self._stamp = stamp
        for e in entries:
            self._ttl_noted[e.kid] = max(e.ttl, self._ttl_noted.get(e.kid, 0.0))
