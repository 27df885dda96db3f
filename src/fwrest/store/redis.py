"""A Redis server shared by every host of a service (``StateStore=redis://host:port/db``, or
another form of SPEC 15: ``store/redis_target.py`` makes the client).

Timeouts of about 1 s and at most 2 retries (SPEC 7): a store that does not answer makes the
callers fail closed quickly; the client reconnects by itself when Redis returns.

Only a connection error is retried (a refused connect, or a pooled connection that a Redis
restart closed): the command never reached Redis, so sending it again is safe. A timeout is
not retried: the command may sit in a frozen Redis and run when it thaws, so a retry would
run it twice (a failure counted twice, a refresh token spent and then seen as a replay), and
a frozen Redis would hold the caller for three timeouts instead of one. The one write that
must not run twice to the caller's harm, spending a refresh token, carries the claim of its
request and is idempotent for it anyway.

Behind Sentinel a spend also waits (``WAIT``, at most :data:`REPLICA_WAIT_MS`) until a replica
has it: Redis replicates asynchronously, and a spend the primary confirmed but took with it
when it died would let the token be spent again on the promoted replica (SPEC 15: no refresh
token spent twice across a failover).

A password never reaches a message: the URL is shown by ``shown_url`` and the password is
scrubbed from the driver's text.
"""

from __future__ import annotations

import hashlib
import os
import socket
import ssl
import stat
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.backoff import ConstantBackoff
from redis.retry import Retry

from fwrest.store.base import AUDIT_KEEP, FLOOD_EVENTS, RefreshRecord, StoreError
from fwrest.store.redis_target import (
    SENTINEL_SCHEME,
    RedisOptions,
    SentinelTarget,
    make_client,
    parse_sentinel_url,
    shown_url,
    url_password,
)

__all__ = ["RedisStore"]

_P = "fwrest:"
_AUDIT = f"{_P}audit"
_AUDIT_FLOOD = f"{_P}audit:flood"  # FLOOD_EVENTS: a budget of their own
# A frozen Redis holds a call for this long, once: the token route gives its store calls 1 s
# in all (auth/oauth2/tokens.py), so a thread is not held much past the request's 503.
SOCKET_TIMEOUT_S = 1.0
# behind Sentinel: how long a spend waits for a replica to have it (within the token route's
# 1 s); without a replica each refresh takes this long more, and goes on
REPLICA_WAIT_MS = 200
# 'spent' is '0' (unspent) or the claim that spent it ('1' in stores of an earlier fwrest);
# 'scope' and 'issued_at' are missing in records of an earlier fwrest (then 'default', '0')
_SPEND = """
local spent = redis.call('HGET', KEYS[1], 'spent')
if not spent then return {0} end
local rec = redis.call('HMGET', KEYS[1], 'family', 'client_id', 'subject', 'expires_at', 'scope',
    'issued_at')
local out = {1, rec[1], rec[2], rec[3], rec[4], rec[5] or 'default', rec[6] or '0'}
if spent == ARGV[1] then return out end
if spent ~= '0' then out[1] = 2; return out end
if ARGV[3] == '1' and rec[2] ~= ARGV[2] then out[1] = 3; return out end
redis.call('HSET', KEYS[1], 'spent', ARGV[1])
return out
"""
_RESTORE = """
if redis.call('HGET', KEYS[1], 'spent') == ARGV[1] then redis.call('HSET', KEYS[1], 'spent', '0') end
return 0
"""
_HIT = """
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
local ttl = redis.call('PTTL', KEYS[1])
return {n, ttl}
"""
# a count back at zero is no window: the key goes (the next failure starts a new window)
_RELEASE = """
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n <= 1 then
  if n == 1 then redis.call('DEL', KEYS[1]) end
  return 0
end
redis.call('DECR', KEYS[1])
return 0
"""


def _families_key(subject: str) -> str:
    """The key of a user's families: the name hashed (any length, any characters)."""
    return f"{_P}user:{hashlib.sha256(subject.encode()).hexdigest()}"


# compare-and-set of one blob (the key set): ARGV name, old, whether old exists, new
_SWAP_BLOB = """
local now = redis.call('HGET', KEYS[1], ARGV[1])
if (now == false and ARGV[3] == '0') or (now ~= false and ARGV[3] == '1' and now == ARGV[2]) then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[4])
  return ARGV[4]
end
return now
"""


def _speaks_plain_redis(host: str, port: int) -> bool:
    """Whether ``host:port`` answers a plain-text ``PING`` as Redis does (``+PONG``, or an
    error such as ``-NOAUTH``)."""
    try:
        with socket.create_connection((host, port), timeout=SOCKET_TIMEOUT_S) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16)[:1] in (b"+", b"-")
    except OSError:
        return False


def _speaks_tls(host: str, port: int) -> bool:
    """Whether ``host:port`` completes a TLS handshake (its certificate is not checked: the
    question is only which protocol the port speaks)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection((host, port), timeout=SOCKET_TIMEOUT_S) as raw,
            context.wrap_socket(raw, server_hostname=host),
        ):
            return True
    except (OSError, ssl.SSLError):
        return False


def _socket_fault(path: str) -> str | None:
    """A unix socket path that can never be Redis's: its folder is missing, or the path is
    not a socket. A missing socket in an existing folder may be a Redis not started yet."""
    target = Path(path)
    if not target.parent.is_dir():
        return f"the socket's folder {target.parent} does not exist (unixsocket in redis.conf)"
    if target.exists() and not stat.S_ISSOCK(target.stat().st_mode):
        return f"{target} is not a socket (unixsocket in redis.conf names Redis's)"
    return None


def _sentinel_fault(target: SentinelTarget) -> str | None:
    """Sentinels that answer but know no primary of the URL's name: a wrong ``PRIMARY``.
    None when no sentinel answered (they may come back) or one named the primary."""
    answered = []
    for host, port in target.sentinels:
        client = redis.Redis(
            host=host,
            port=port,
            socket_timeout=SOCKET_TIMEOUT_S,
            socket_connect_timeout=SOCKET_TIMEOUT_S,
        )
        try:
            found = client.sentinel_get_master_addr_by_name(target.primary)
        except redis.RedisError:
            continue
        finally:
            client.close()
        if found:
            return None
        answered.append(f"{host}:{port}")
    if not answered:
        return None
    return (
        f"the sentinels {', '.join(answered)} know no primary named {target.primary!r}: write "
        "the name of `sentinel monitor NAME` (sentinel.conf) as the URL's PRIMARY"
    )


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, kind):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _refresh_record(token_hash: str, values: Sequence[bytes | str | None]) -> RefreshRecord:
    """A record from its stored fields (family, client, subject, expiry, scope, issue time);
    a record of an earlier fwrest has no scope ("default", all it could grant) and no issue
    time (0)."""
    family, owner, subject, expires, scope, issued = (
        v.decode() if isinstance(v, bytes) else v for v in values
    )
    assert family is not None and owner is not None and subject is not None and expires
    return RefreshRecord(
        token_hash, family, owner, subject, float(expires), scope or "default", float(issued or 0)
    )


class RedisStore:
    kind = "redis"
    in_process = False
    audit_keep = AUDIT_KEEP

    def __init__(self, url: str, options: RedisOptions | None = None, retries: int = 2) -> None:
        self.url = url
        options = options or RedisOptions()
        self._secrets = tuple(
            s
            for s in (options.password, url_password(url))
            if s  # an empty one would match everywhere
        )
        self._r: Any = make_client(
            url,
            options,
            socket_timeout=SOCKET_TIMEOUT_S,
            socket_connect_timeout=SOCKET_TIMEOUT_S,
            # connection errors only (see the module's docstring); redis-py's default list
            # would add timeouts
            retry=Retry(ConstantBackoff(0.05), retries, supported_errors=(redis.ConnectionError,)),
            health_check_interval=10,
        )
        self._replicated = url.lower().startswith(SENTINEL_SCHEME)
        self._client_cert = options.cert is not None
        self._spend = self._r.register_script(_SPEND)
        self._restore = self._r.register_script(_RESTORE)
        self._hit = self._r.register_script(_HIT)
        self._release = self._r.register_script(_RELEASE)

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except redis.RedisError as exc:
            raise StoreError(f"redis store {shown_url(self.url)}: {self._scrub(exc)}") from None

    def _scrub(self, exc: BaseException) -> str:
        # redis-py's MasterNotFoundError appends the repr of its whole client
        text = str(exc).split(" : <redis.client", 1)[0]
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def probe(self) -> tuple[str | None, str] | None:
        """One ``PING``: None when Redis answered; else ``(key, problem)``, ``key`` naming the
        configuration key at fault (the certificate of ``StateStoreCA`` does not verify
        Redis's, Redis asks for a client certificate, the password is wrong or missing), or
        None when Redis cannot be reached now (no key is at fault: it may come back)."""
        try:
            self._r.ping()
        except redis.AuthenticationError as exc:
            key = "StateStore" if url_password(self.url) else "StateStorePassword"
            return key, f"Redis refused the password: {self._scrub(exc)}"
        except redis.ResponseError as exc:
            text = self._scrub(exc)
            if "NOAUTH" in text or "WRONGPASS" in text:
                return "StateStorePassword", f"Redis refused the password: {text}"
            return None, text
        except redis.RedisError as exc:
            text = self._scrub(exc)
            if _caused_by(exc, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY" in text:
                return "StateStoreCA", f"Redis's TLS certificate does not verify: {text}"
            if _caused_by(exc, ssl.SSLError) or "_ssl.c" in text:
                if self._client_cert:
                    return "StateStore", f"the TLS handshake with Redis failed: {text}"
                # Redis ends the handshake without a word when it wants a client certificate
                return "StateStoreCert", (
                    f"the TLS handshake with Redis failed (does Redis ask for a client "
                    f"certificate? tls-auth-clients): {text}"
                )
            fault = self._diagnose()
            if fault is not None:
                return "StateStore", f"redis store {shown_url(self.url)}: {fault}"
            return None, f"redis store {shown_url(self.url)}: {text}"
        return None

    def _diagnose(self) -> str | None:
        """Why a Redis that did not answer never will as configured (a configuration fault,
        which ``fwrest check`` and the start refuse), or None when it may yet answer (Redis
        or the sentinels not running now). Each look is one short connection (1 s)."""
        lowered = self.url.lower()
        if lowered.startswith(SENTINEL_SCHEME):
            return _sentinel_fault(parse_sentinel_url(self.url))
        if lowered.startswith("unix://"):
            return _socket_fault(urlsplit(self.url).path)
        parts = urlsplit(self.url)
        host, port = parts.hostname or "localhost", parts.port or 6379
        tls = lowered.startswith("rediss://")
        if tls and _speaks_plain_redis(host, port):
            return (
                f"{host}:{port} speaks Redis in plain text, not TLS: write redis:// for that "
                "port, or name Redis's tls-port in the rediss:// URL"
            )
        if not tls and _speaks_tls(host, port):
            return f"{host}:{port} speaks TLS: write rediss:// (and StateStoreCA) for that port"
        return None

    def ping(self) -> None:
        self._call(self._r.ping)

    def add_refresh(self, record: RefreshRecord) -> None:
        key = f"{_P}rt:{record.token_hash}"
        ttl_ms = max(int((record.expires_at - time.time()) * 1000), 1) + 86_400_000
        pipe = self._r.pipeline(transaction=True)
        pipe.hset(
            key,
            mapping={
                "family": record.family,
                "client_id": record.client_id,
                "subject": record.subject,
                "expires_at": repr(record.expires_at),
                "scope": record.scope,
                "issued_at": repr(record.issued_at),
                "spent": "0",
            },
        )
        pipe.pexpire(key, ttl_ms)
        # the user's families (SPEC 12.3, revocation by user): family -> latest expiry
        families = _families_key(record.subject)
        pipe.zadd(families, {record.family: record.expires_at}, gt=True)
        pipe.pexpire(families, ttl_ms)
        self._call(pipe.execute)

    def spend_refresh(
        self, token_hash: str, claim: str, client_id: str | None = None
    ) -> tuple[str, RefreshRecord | None]:
        if not claim or claim in ("0", "1"):
            raise ValueError("a claim is a request's random id")
        check = ("", "0") if client_id is None else (client_id, "1")
        keys, args = [f"{_P}rt:{token_hash}"], [claim, *check]
        if self._replicated:
            pipe = self._r.pipeline(transaction=False)
            self._spend(keys=keys, args=args, client=pipe)
            pipe.execute_command("WAIT", 1, REPLICA_WAIT_MS)
            out, _replicas = self._call(pipe.execute)
        else:
            out = self._call(self._spend, keys=keys, args=args)
        if int(out[0]) == 0:
            return "missing", None
        record = _refresh_record(token_hash, out[1:7])
        return {1: "ok", 2: "spent"}.get(int(out[0]), "client"), record

    def restore_refresh(self, token_hash: str, claim: str) -> None:
        self._call(self._restore, keys=[f"{_P}rt:{token_hash}"], args=[claim])

    def revoke_family(self, family: str, until: float) -> None:
        self._call(self._r.zadd, f"{_P}revoked", {family: until}, gt=True)

    def revoked_families(self) -> dict[str, float]:
        now = time.time()
        key = f"{_P}revoked"
        pipe = self._r.pipeline(transaction=False)
        pipe.zremrangebyscore(key, "-inf", now)
        pipe.zrange(key, 0, -1, withscores=True)
        _, rows = self._call(pipe.execute)
        return {(m.decode() if isinstance(m, bytes) else m): float(s) for m, s in rows}

    def refresh_record(self, token_hash: str) -> tuple[RefreshRecord, bool] | None:
        fields = ("spent", "family", "client_id", "subject", "expires_at", "scope", "issued_at")
        values = self._call(self._r.hmget, f"{_P}rt:{token_hash}", fields)
        if values[0] is None:
            return None
        return _refresh_record(token_hash, values[1:]), values[0] not in (b"0", "0")

    def user_families(self, subject: str) -> dict[str, float]:
        key = _families_key(subject)
        pipe = self._r.pipeline(transaction=False)
        pipe.zremrangebyscore(key, "-inf", time.time() - 86400)
        pipe.zrange(key, 0, -1, withscores=True)
        _, rows = self._call(pipe.execute)
        return {(m.decode() if isinstance(m, bytes) else m): float(s) for m, s in rows}

    def hit_failure(self, key: str, window_s: float) -> tuple[int, float]:
        count, ttl = self._call(self._hit, keys=[f"{_P}fail:{key}"], args=[int(window_s * 1000)])
        return int(count), max(int(ttl), 0) / 1000

    def hit_rate(self, key: str, window_s: float) -> tuple[int, float]:
        # the failures' script (INCR, PEXPIRE at the first): one round trip, atomic
        count, ttl = self._call(self._hit, keys=[f"{_P}rate:{key}"], args=[int(window_s * 1000)])
        return int(count), max(int(ttl), 0) / 1000

    def failures(self, key: str, window_s: float) -> tuple[int, float]:
        pipe = self._r.pipeline(transaction=False)
        pipe.get(f"{_P}fail:{key}")
        pipe.pttl(f"{_P}fail:{key}")
        count, ttl = self._call(pipe.execute)
        if count is None:
            return 0, 0.0
        return int(count), max(int(ttl), 0) / 1000

    def release_failure(self, key: str, window_s: float) -> None:
        # a count whose window has passed has expired with its key: nothing to take back
        self._call(self._release, keys=[f"{_P}fail:{key}"])

    def clear_failures(self, key: str) -> None:
        self._call(self._r.delete, f"{_P}fail:{key}")

    def add_lock(self, key: str, until: float) -> None:
        self._call(self._r.zadd, f"{_P}locks", {key: until}, gt=True)

    def lift_lock(self, key: str) -> None:
        pipe = self._r.pipeline(transaction=True)
        pipe.zrem(f"{_P}locks", key)
        pipe.delete(f"{_P}fail:{key}")
        self._call(pipe.execute)

    def locks(self) -> dict[str, float]:
        key = f"{_P}locks"
        pipe = self._r.pipeline(transaction=False)
        pipe.zremrangebyscore(key, "-inf", time.time())
        pipe.zrange(key, 0, -1, withscores=True)
        _, rows = self._call(pipe.execute)
        return {(m.decode() if isinstance(m, bytes) else m): float(s) for m, s in rows}

    def signing_key(self, candidate: bytes) -> bytes:
        key = f"{_P}signing_key"
        self._call(self._r.set, key, candidate, nx=True)
        value = self._call(self._r.get, key)
        return bytes(value)

    def get_settings(self) -> dict[str, int]:
        raw = self._call(self._r.hgetall, f"{_P}settings")
        return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}

    def set_settings(self, values: dict[str, int | None]) -> dict[str, int]:
        # one MULTI/EXEC: the values read are the ones the writes replace
        pipe = self._r.pipeline(transaction=True)
        pipe.hgetall(f"{_P}settings")
        for name, value in values.items():
            if value is None:
                pipe.hdel(f"{_P}settings", name)
            else:
                pipe.hset(f"{_P}settings", name, value)
        raw = self._call(pipe.execute)[0]
        return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}

    def put_blob(self, name: str, value: bytes) -> None:
        self._call(self._r.hset, f"{_P}blobs", name, value)

    def blobs(self, prefix: str) -> dict[str, bytes]:
        raw = self._call(self._r.hgetall, f"{_P}blobs")
        out = {}
        for k, v in raw.items():
            name = k.decode() if isinstance(k, bytes) else str(k)
            if name.startswith(prefix):
                out[name] = bytes(v)
        return out

    def delete_blobs(self, prefix: str) -> None:
        names = list(self.blobs(prefix))
        if names:
            self._call(self._r.hdel, f"{_P}blobs", *names)

    def get_blob(self, name: str) -> bytes | None:
        value = self._call(self._r.hget, f"{_P}blobs", name)
        return None if value is None else bytes(value)

    def swap_blob(self, name: str, old: bytes | None, new: bytes) -> bytes | None:
        value = self._call(
            self._r.eval,
            _SWAP_BLOB,
            1,
            f"{_P}blobs",
            name,
            b"" if old is None else old,
            b"0" if old is None else b"1",
            new,
        )
        return None if value is None else bytes(value)

    def add_audit(self, ts: float, event: str, entry: bytes) -> None:
        # one sorted set by time; a member is "event NUL random NUL entry": unique (two equal
        # events at one microsecond stay two), and filtered by name without parsing the JSON
        # FLOOD_EVENTS have a sorted set of their own: a budget apart from the others'
        member = event.encode() + b"\0" + os.urandom(6).hex().encode() + b"\0" + entry
        key = _AUDIT_FLOOD if event in FLOOD_EVENTS else _AUDIT
        pipe = self._r.pipeline(transaction=True)
        pipe.zadd(key, {member: ts})
        pipe.zremrangebyrank(key, 0, -self.audit_keep - 1)
        self._call(pipe.execute)

    def audit_events(self, since: float, event: str | None, limit: int) -> list[bytes]:
        if event is None:  # both sets' newest, merged by time
            rows = []
            for key in (_AUDIT, _AUDIT_FLOOD):
                found = self._call(
                    self._r.zrevrangebyscore,
                    key,
                    "+inf",
                    since,
                    start=0,
                    num=limit,
                    withscores=True,
                )
                rows += [(float(score), bytes(m)) for m, score in found]
            rows.sort(key=lambda row: row[0], reverse=True)
            return [m.split(b"\0", 2)[2] for _score, m in rows[:limit]]
        key = _AUDIT_FLOOD if event in FLOOD_EVENTS else _AUDIT
        wanted = event.encode() + b"\0"
        out: list[bytes] = []
        start, page = 0, 1000
        while len(out) < limit:
            rows = self._call(self._r.zrevrangebyscore, key, "+inf", since, start=start, num=page)
            out += [bytes(m).split(b"\0", 2)[2] for m in rows if bytes(m).startswith(wanted)]
            if len(rows) < page:
                break
            start += page
        return out[:limit]

    def close(self) -> None:
        self._r.close()
