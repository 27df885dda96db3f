"""A Redis server shared by every host of a service (``StateStore=redis://host:port/db``, or
another form of SPEC 15: ``store/redis_target.py`` makes the client), or a Redis or Valkey
cluster (``redis+cluster://``, SPEC 17.1: :class:`RedisClusterStore`, its keys named by
:class:`KeyLayout` so that each operation touches one hash slot).

Timeouts of about 1 s and at most 2 retries (SPEC 7): a store that does not answer makes the
callers fail closed quickly; the client reconnects by itself when Redis returns.

Only a connection error is retried (a refused connect, or a pooled connection that a Redis
restart closed): the command never reached Redis, so sending it again is safe. A timeout is
not retried: the command may sit in a frozen Redis and run when it thaws, so a retry would
run it twice (a failure counted twice, a refresh token spent and then seen as a replay), and
a frozen Redis would hold the caller for three timeouts instead of one. The one write that
must not run twice to the caller's harm, spending a refresh token, carries the claim of its
request and is idempotent for it anyway.

Behind Sentinel and on a cluster a spend also waits (``WAIT``, at most :data:`REPLICA_WAIT_MS`)
until a replica has it: Redis replicates asynchronously, and a spend the primary confirmed but took with it
when it died would let the token be spent again on the promoted replica (SPEC 15: no refresh
token spent twice across a failover). A spend no replica confirmed in that time, where the
master has one, is :class:`~fwrest.store.base.UnconfirmedSpend` (its caller undoes it and
answers 503). So are a family's revocation and a DPoP proof's use
(:class:`~fwrest.store.base.UnconfirmedWrite`: 503, the revocation tried again by the client,
the proof's use taken back): a failover must not give back a revoked family or a used proof.
Behind Sentinel such a write also asks the sentinels for the primary again: the pool's
connections to a primary they no longer name are dropped (:meth:`RedisStore._follow`).

A password never reaches a message: the URL is shown by ``shown_url`` and the password is
scrubbed from the driver's text.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import socket
import ssl
import stat
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.backoff import ConstantBackoff
from redis.exceptions import (
    AskError,
    ClusterDownError,
    NoScriptError,
    RedisClusterException,
    TryAgainError,
)
from redis.retry import Retry

from fwrest.store.base import (
    AUDIT_KEEP,
    FLOOD_EVENTS,
    RefreshRecord,
    StoreError,
    UnconfirmedSpend,
    UnconfirmedWrite,
)
from fwrest.store.redis_target import (
    CLUSTER_SCHEMES,
    SENTINEL_SCHEME,
    RedisOptions,
    SentinelTarget,
    make_client,
    make_cluster_client,
    parse_cluster_url,
    parse_sentinel_url,
    shown_url,
    url_password,
)

__all__ = ["KeyLayout", "RedisClusterStore", "RedisStore"]

_P = "fwrest:"  # every key's prefix on a single Redis (a cluster's: KeyLayout.cluster)
# A frozen Redis holds a call for this long, once: the token route gives its store calls 1 s
# in all (auth/oauth2/tokens.py), so a thread is not held much past the request's 503.
SOCKET_TIMEOUT_S = 1.0
# behind Sentinel and on a cluster: how long a spend waits for a replica to have it (within
# the token route's 1 s); a master with a replica that does not confirm it in this time: the
# spend is UnconfirmedSpend (503, undone); a master without any replica: the spend stands
REPLICA_WAIT_MS = 200
# how long a master's answer to "has it a replica?" (INFO) is taken as true: a spend on a
# master without one sends no WAIT, which would wait its whole REPLICA_WAIT_MS for nothing
REPLICAS_CHECK_S = 1.0
# how long a master that listed a replica and lists none now is taken to have one (Redis's
# default repl-timeout: a replica cut off for less may still be promoted)
REPLICA_GONE_S = 60.0
# behind Sentinel: how long sentinels that did not answer are not asked again about the
# primary or its replicas (each unanswered one may hold a call for a connect timeout)
SENTINELS_QUIET_S = 10.0
# 'spent' is '0' (unspent) or the claim that spent it ('1' in stores of an earlier fwrest);
# 'scope' and 'issued_at' are missing in records of an earlier fwrest (then 'default', '0');
# ARGV: the claim, the client, '1' when the client is checked, now (epoch seconds): an expired
# token is left unspent (4), as is another client's (3)
_SPEND = """
local spent = redis.call('HGET', KEYS[1], 'spent')
if not spent then return {0} end
local rec = redis.call('HMGET', KEYS[1], 'family', 'client_id', 'subject', 'expires_at', 'scope',
    'issued_at')
local out = {1, rec[1], rec[2], rec[3], rec[4], rec[5] or 'default', rec[6] or '0'}
if spent == ARGV[1] then return out end
if spent ~= '0' then out[1] = 2; return out end
if ARGV[3] == '1' and rec[2] ~= ARGV[2] then out[1] = 3; return out end
if tonumber(rec[4]) <= tonumber(ARGV[4]) then out[1] = 4; return out end
redis.call('HSET', KEYS[1], 'spent', ARGV[1])
return out
"""
_SPEND_STATUS = {1: "ok", 2: "spent", 3: "client", 4: "expired"}
_RESTORE = """
if redis.call('HGET', KEYS[1], 'spent') == ARGV[1] then redis.call('HSET', KEYS[1], 'spent', '0') end
return 0
"""
# a DPoP proof's use taken back (no replica confirmed it): ARGV[1] the value that noted it
_FORGET = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
"""
# an authorization code taken once (SPEC 16.1): ARGV[1] the family of the request taking it
_TAKE = """
local rec = redis.call('HGET', KEYS[1], 'record')
if not rec then return {0} end
local fam = redis.call('HGET', KEYS[1], 'family')
if fam and fam ~= '' and fam ~= ARGV[1] then return {2, rec, fam} end
redis.call('HSET', KEYS[1], 'family', ARGV[1])
return {1, rec, ARGV[1]}
"""


# a rate limit's count and a failure's (hit_failure): the key's count within its window
# (ARGV[1] ms from its first) and its time left; not taken (nothing written: {-1, Redis's
# clock in ms}) when Redis's clock (ms) is past ARGV[2] (0: no deadline), the host's deadline
# plus RATE_CLOCK_MARGIN_S (RedisStore._count)
def _late(arg: int) -> str:
    """A count script's first lines: nothing counted, ``{-1, Redis's clock in ms}``, past the
    deadline ``ARGV[arg]`` (ms on Redis's clock; 0: none)."""
    return f"""
redis.replicate_commands()
if ARGV[{arg}] ~= '0' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if now > tonumber(ARGV[{arg}]) then return {{-1, now}} end
end
"""


_HIT_RATE = (
    _late(2)
    + """local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
local ttl = redis.call('PTTL', KEYS[1])
return {n, ttl}
"""
)
# how far past the deadline the host passed Redis may take a count (a rate limit's, a
# failure's): Redis's clock and the host's differ (NTP keeps them within milliseconds; one
# ahead by more is learnt, RedisStore._count); a count later than this is not taken
# (decisions.md)
RATE_CLOCK_MARGIN_S = 0.25
# _HIT_RATE's count for every key (a user's and an address's: one slot, {bf}, on a cluster),
# only when each count is below ARGV[2]; else nothing counted: {counted (1, 0), count, pttl, count, pttl...},
# a count not counted being one more than the key's; nothing counted either ({-1, Redis's
# clock}) past ARGV[3] (as _HIT_RATE's ARGV[2])
_HIT_BELOW = (
    _late(3)
    + """local limit = tonumber(ARGV[2])
local below = 1
for _, key in ipairs(KEYS) do
  if tonumber(redis.call('GET', key) or '0') >= limit then below = 0 end
end
local out = {below}
for _, key in ipairs(KEYS) do
  local n
  if below == 1 then
    n = redis.call('INCR', key)
    if n == 1 then redis.call('PEXPIRE', key, ARGV[1]) end
  else
    n = tonumber(redis.call('GET', key) or '0') + 1
  end
  table.insert(out, n)
  local ttl = redis.call('PTTL', key)
  if ttl < 0 then ttl = tonumber(ARGV[1]) end  -- a key not counted and not there: a whole window, as sqlite and memory say
  table.insert(out, ttl)
end
return out
"""
)
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

# a lock-out's count raised to ARGV[1] (add_lock's ``failures``), in a window that ends in ARGV[2]
# ms or later (one in force that ends later), unless the one in force counts as many
_RAISE = """
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n >= tonumber(ARGV[1]) then return 0 end
local left = math.max(redis.call('PTTL', KEYS[1]), tonumber(ARGV[2]))
redis.call('SET', KEYS[1], ARGV[1], 'PX', left)
return 0
"""


class KeyLayout:
    """The names of the store's keys.

    On a single Redis (and behind Sentinel) they are those every earlier fwrest wrote, under
    ``fwrest:`` in the URL's database: a running service's data stays where it is.

    On a cluster (SPEC 17.1) the URL's database is a prefix (``fwrest:<db>:``) and what one
    operation touches together shares a hash slot through a hash tag (the part between the
    first ``{`` and ``}``): a failure count and the lock list that a lift clears with it (the
    brute-force state of the whole service under the tag ``{bf}``, so a user's and an
    address's counts and the locks live on one slot), a token family's refresh records (and
    their aliases) under the family's tag, which its refresh tokens carry (a refresh spends one
    and stores the next on one slot; a record without a tag under its own hash), a user's
    family index under the user's. One key is one slot anyway: the revocation
    list, the blobs (the key set among them), each audit set, the signing key, each rate-limit
    window; the settings' stamp shares the settings' slot (its name's hash tag is the
    settings' whole name, which has none). docs/decisions.md, "Production state stores".

    >>> KeyLayout.cluster(3).rt("ab12")
    'fwrest:3:rt:{ab12}'
    >>> KeyLayout.single().code("cd34"), KeyLayout.cluster(3).code("cd34")
    ('fwrest:code:cd34', 'fwrest:3:code:{cd34}')
    >>> KeyLayout.single().fail("api|user:ada"), KeyLayout.cluster(0).fail("api|user:ada")
    ('fwrest:fail:api|user:ada', 'fwrest:0:{bf}:fail:api|user:ada')
    """

    __slots__ = ("_alias", "_code", "_fail", "_proof", "_rate", "_rt", "_user", "audit",
                 "audit_shared", "blobs", "locks", "revoked", "schema", "settings",
                 "settings_stamp", "signing_key", "tagged")  # fmt: skip

    def __init__(self, prefix: str, tagged: bool) -> None:
        self.tagged = tagged
        bf = f"{prefix}{{bf}}:" if tagged else prefix
        self._rt = f"{prefix}rt:{{{{{{}}}}}}" if tagged else f"{prefix}rt:{{}}"
        self._user = f"{prefix}user:{{{{{{}}}}}}" if tagged else f"{prefix}user:{{}}"
        # RefreshRecord.alias -> the record's hash (schema 2)
        self._alias = f"{prefix}rta:{{{{{{}}}}}}" if tagged else f"{prefix}rta:{{}}"
        self.schema = f"{prefix}schema"  # the schema marker (store/schema.py)
        self._code = f"{prefix}code:{{{{{{}}}}}}" if tagged else f"{prefix}code:{{}}"
        # a DPoP proof's id, kept for the proof's window (SPEC 16.2): one key, one slot
        self._proof = f"{prefix}dpop:{{{{{{}}}}}}" if tagged else f"{prefix}dpop:{{}}"
        self._fail = f"{bf}fail:"
        self._rate = f"{prefix}rate:"
        self.locks = f"{bf}locks"
        self.revoked = f"{prefix}revoked"
        self.settings = f"{prefix}settings"
        # the store's time of the last settings change (set_settings): on one slot with them
        self.settings_stamp = f"{{{self.settings}}}:stamp" if tagged else f"{self.settings}:stamp"
        self.blobs = f"{prefix}blobs"
        self.signing_key = f"{prefix}signing_key"
        # the audit budgets: the others', FLOOD_EVENTS' (each keeps its newest audit_keep).
        # On one Redis every event also goes to fwrest 0.1.0's one set, which its hosts read
        # (SPEC 17.2); a cluster is new in 0.2.0: no 0.1.0 host reads one, no shared set.
        if tagged:
            self.audit = (f"{prefix}audit", f"{prefix}audit:flood")
            self.audit_shared: str | None = None
        else:
            self.audit = (f"{prefix}audit:kept", f"{prefix}audit:flood")
            self.audit_shared = f"{prefix}audit"

    @classmethod
    def single(cls) -> KeyLayout:
        return cls(_P, tagged=False)

    @classmethod
    def cluster(cls, db: int) -> KeyLayout:
        return cls(f"{_P}{db}:", tagged=True)

    def rt(self, token_hash: str) -> str:
        """A refresh token's record (its hash: hex; on a cluster ``tag.hash`` for a token
        carrying its family's tag, whose records then share the tag's slot).

        >>> KeyLayout.cluster(3).rt("9f0e1d2c3b4a.ab12"), KeyLayout.single().rt("ab12")
        ('fwrest:3:rt:{9f0e1d2c3b4a}ab12', 'fwrest:rt:ab12')
        """
        return self._family_keyed(self._rt, token_hash)

    def alias(self, alias: str) -> str:
        """What a refresh record's alias points to (its hash), on the record's slot."""
        return self._family_keyed(self._alias, alias)

    def _family_keyed(self, template: str, token_hash: str) -> str:
        tag, dot, digest = token_hash.partition(".")
        if dot and self.tagged:
            return template.format(tag) + digest
        return template.format(token_hash)

    def code(self, code_hash: str) -> str:
        """An authorization code's record (its hash: hex)."""
        return self._code.format(code_hash)

    def proof(self, proof_id: str) -> str:
        """A DPoP proof's id (a hash: hex).

        >>> KeyLayout.single().proof("ef56"), KeyLayout.cluster(3).proof("ef56")
        ('fwrest:dpop:ef56', 'fwrest:3:dpop:{ef56}')
        """
        return self._proof.format(proof_id)

    def user(self, subject: str) -> str:
        """A user's families: the name hashed (any length, any characters)."""
        return self._user.format(hashlib.sha256(subject.encode()).hexdigest())

    def fail(self, key: str) -> str:
        return self._fail + key

    def rate(self, key: str) -> str:
        return self._rate + key


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


# compare-and-set of one key (the schema marker): ARGV old, whether old exists, new
_SWAP_KEY = """
local now = redis.call('GET', KEYS[1])
if (now == false and ARGV[2] == '0') or (now ~= false and ARGV[2] == '1' and now == ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[3])
  return ARGV[3]
end
return now
"""


# a settings change (set_settings): KEYS settings, stamp; ARGV name, value ("": cleared), ...
# What it replaced and the store's time of it in microseconds, later than the last change's
# (Redis's clock, read in the script: the changes' order is the order Redis applied them)
_SET_SETTINGS = """
redis.replicate_commands()
local old = redis.call('HGETALL', KEYS[1])
for i = 1, #ARGV, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', KEYS[1], ARGV[i])
  else
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if now <= last then
  now = last + 1
end
redis.call('SET', KEYS[2], string.format('%.0f', now))
return {old, now}
"""


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    seen: BaseException | None = exc
    met: set[int] = set()
    while seen is not None and id(seen) not in met:  # a chain may loop
        if isinstance(seen, kind):
            return True
        met.add(id(seen))
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


def _refresh_fields(record: RefreshRecord) -> dict[str, str]:
    """A refresh token's hash fields, as spend and restore scripts read them."""
    return {
        "family": record.family,
        "client_id": record.client_id,
        "subject": record.subject,
        "expires_at": repr(record.expires_at),
        "scope": record.scope,
        "issued_at": repr(record.issued_at),
        "spent": "0",
    }


def _refresh_ttl_ms(record: RefreshRecord) -> int:
    """How long a refresh token's keys live: its expiry and a day (to answer "spent")."""
    return max(int((record.expires_at - time.time()) * 1000), 1) + 86_400_000


class _Replicas:
    """Whether a master has a replica to wait for, asked (``INFO replication``) at most once
    per :data:`REPLICAS_CHECK_S` per master; a master that does not answer is taken to have
    one. A spend on a master taken to have none asks again in its own round trip, after the
    script: a replica listed then (one that attached since) makes the spend unconfirmed (503,
    undone); one that attaches later copies the data with the spend in it.

    A master that had a replica and lists none now (its link dropped, the replica restarting,
    or the master itself replaced by a failover it has not heard of yet) is taken to have one
    for :data:`REPLICA_GONE_S`: that replica may still be promoted without the spends made
    meanwhile, so they are unconfirmed (503, undone) rather than left to stand. Masters are
    told apart by their replication id (a promoted replica takes a new one). A process that
    never saw the replica (one just started: ``fwrest tokens revoke`` is) learns of it from
    the topology: a master listing none asks ``lately`` (the store's
    :meth:`~RedisStore._replica_lately`) how long ago a replica of it last answered."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[float, bool]] = {}
        self._had: dict[str, float] = {}  # replication id -> when it last listed a replica

    def waited_for(self, info: Any) -> bool:
        """Whether a master's ``INFO replication`` asks for a spend to be confirmed: it lists
        a replica, or listed one less than :data:`REPLICA_GONE_S` ago (anything unreadable:
        taken so)."""
        if not isinstance(info, dict):
            return True
        now = time.monotonic()
        replid = str(info.get("master_replid", ""))
        if int(info.get("connected_slaves", 0) or 0) > 0:
            if len(self._had) > 64:  # masters gone long ago: a cluster's live ones stay
                self._had = {k: t for k, t in self._had.items() if now - t < REPLICA_GONE_S}
            self._had[replid] = now
            return True
        return now - self._had.get(replid, -math.inf) < REPLICA_GONE_S

    def present(self, name: str, client: Any, lately: Callable[[Any], float | None]) -> bool:
        now = time.monotonic()
        known = self._known.get(name)
        if known is not None and known[0] > now:
            return known[1]
        try:
            info = client.execute_command("INFO", "replication")
            if isinstance(info, dict) and not int(info.get("connected_slaves", 0) or 0):
                ago = lately(client)
                if ago is not None:
                    replid = str(info.get("master_replid", ""))
                    self._had[replid] = max(self._had.get(replid, -math.inf), now - ago)
            present = self.waited_for(info)
        except (redis.RedisError, RedisClusterException):
            present = True
        self._known[name] = (now + REPLICAS_CHECK_S, present)
        return present

    def attached(self, name: str) -> None:
        """A replica seen where none was known: waited for from now on."""
        self._known[name] = (time.monotonic() + REPLICAS_CHECK_S, True)


# the command sent after a spend's script, on its connection: WAIT where the master is
# known to have a replica, else INFO replication (a replica that attached since: _Replicas)
_AFTER_SPEND: dict[bool, tuple[Any, ...]] = {
    True: ("WAIT", 1, REPLICA_WAIT_MS),
    False: ("INFO", "replication"),
}


# the writes a failover must not lose, as an unconfirmed one's error names them
_SPEND_WRITE = ("a refresh token's spend", UnconfirmedSpend)
_REVOKE_WRITE = ("a token family's revocation", UnconfirmedWrite)
_PROOF_WRITE = ("a DPoP proof's use", UnconfirmedWrite)


def _always(out: Any) -> bool:
    return True


# what a probe's problem says when Redis has no database of the URL's index (a fault of
# StateStore that only Redis can tell: server/build.py gives the fix)
NO_DATABASE = "Redis has no database"


class RedisStore:
    kind = "redis"
    family_slots = False
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
        self._keys = self._layout()
        self._client_cert = options.cert is not None
        self._r: Any = self._connect(url, options, retries)
        self._replicated = url.lower().startswith(SENTINEL_SCHEME)
        self._replicas = _Replicas()
        self._sentinels_quiet_until = 0.0
        # how far Redis's clock is ahead of this host's, learnt from a count judged late
        # (RedisStore._count); 0 until then
        self._clock_ahead = 0.0
        self._spend = self._script(_SPEND)
        self._take = self._script(_TAKE)
        self._restore = self._script(_RESTORE)
        self._hit_below = self._script(_HIT_BELOW)
        self._hit_rate = self._script(_HIT_RATE)
        self._release = self._script(_RELEASE)
        self._raise = self._script(_RAISE)
        self._set_settings = self._script(_SET_SETTINGS)
        self._forget = self._script(_FORGET)

    def _script(self, text: str) -> Any:
        """A Lua script, called as ``script(keys=[...], args=[...])``."""
        return self._r.register_script(text)

    def _layout(self) -> KeyLayout:
        return KeyLayout.single()

    @property
    def signing_key_name(self) -> str:
        """The key that holds the signing key (``auth/oauth2/keys.py`` names it)."""
        return self._keys.signing_key

    def _connect(self, url: str, options: RedisOptions, retries: int) -> Any:
        return make_client(
            url,
            options,
            socket_timeout=SOCKET_TIMEOUT_S,
            socket_connect_timeout=SOCKET_TIMEOUT_S,
            # connection errors only (see the module's docstring); redis-py's default list
            # would add timeouts
            retry=Retry(ConstantBackoff(0.05), retries, supported_errors=(redis.ConnectionError,)),
            health_check_interval=10,
        )

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
        except redis.RedisError as exc:
            return self._classify(exc)
        return None

    def _classify(self, exc: redis.RedisError) -> tuple[str | None, str]:
        """What a failed first command says about the configuration (see :meth:`probe`)."""
        if isinstance(exc, redis.AuthenticationError):
            key = "StateStore" if url_password(self.url) else "StateStorePassword"
            return key, f"Redis refused the password: {self._scrub(exc)}"
        text = self._scrub(exc)
        if isinstance(exc, redis.ResponseError):
            if "NOAUTH" in text or "WRONGPASS" in text:
                return "StateStorePassword", f"Redis refused the password: {text}"
            if "DB index" in text:  # Redis answered: it has no such database (for good)
                return "StateStore", (
                    f"redis store {shown_url(self.url)}: {NO_DATABASE} {self._db()} ({text})"
                )
            return None, text
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

    def _db(self) -> str:
        """The database index the URL names, as written (for a message)."""
        pool = getattr(self._r, "connection_pool", None)
        kwargs = getattr(pool, "connection_kwargs", None)
        if isinstance(kwargs, dict) and "db" in kwargs:
            return str(kwargs["db"])
        return "of the URL"

    def _diagnose(self) -> str | None:
        """Why a Redis that did not answer never will as configured (a configuration fault,
        which ``fwrest check`` and the start refuse), or None when it may yet answer (Redis
        or the sentinels not running now). Each look is one short connection (1 s)."""
        lowered = self.url.lower()
        if lowered.startswith(SENTINEL_SCHEME):
            return _sentinel_fault(parse_sentinel_url(self.url))
        if lowered.startswith("unix://"):
            return _socket_fault(urlsplit(self.url).path)
        if lowered.startswith(CLUSTER_SCHEMES):
            target = parse_cluster_url(self.url)
            plain, tls_form = "redis+cluster://", "rediss+cluster://"
            nodes, tls = target.nodes, target.tls
        else:
            parts = urlsplit(self.url)
            plain, tls_form = "redis://", "rediss://"
            nodes = ((parts.hostname or "localhost", parts.port or 6379),)
            tls = lowered.startswith("rediss://")
        for host, port in nodes:
            if tls and _speaks_plain_redis(host, port):
                return (
                    f"{host}:{port} speaks Redis in plain text, not TLS: write {plain} for "
                    f"that port, or name Redis's tls-port in the {tls_form} URL"
                )
            if not tls and _speaks_tls(host, port):
                return (
                    f"{host}:{port} speaks TLS: write {tls_form} (and StateStoreCA) for that port"
                )
        return None

    def ping(self) -> None:
        self._call(self._r.ping)

    def add_refresh(self, record: RefreshRecord) -> None:
        key = self._keys.rt(record.token_hash)
        ttl_ms = _refresh_ttl_ms(record)
        pipe = self._r.pipeline(transaction=True)
        pipe.hset(key, mapping=_refresh_fields(record))
        pipe.pexpire(key, ttl_ms)
        # the user's families (SPEC 12.3, revocation by user): family -> latest expiry
        families = self._keys.user(record.subject)
        pipe.zadd(families, {record.family: record.expires_at}, gt=True)
        pipe.pexpire(families, ttl_ms)
        if record.alias:
            pipe.set(self._keys.alias(record.alias), record.token_hash, px=ttl_ms)
        self._call(pipe.execute)

    def refresh_alias(self, alias: str) -> str | None:
        value = self._call(self._r.get, self._keys.alias(alias))
        return None if value is None else bytes(value).decode()

    def schema_marker(self) -> bytes | None:
        value = self._call(self._r.get, self._keys.schema)
        return None if value is None else bytes(value)

    def swap_schema_marker(self, old: bytes | None, new: bytes) -> bytes | None:
        now = self._call(
            self._r.eval,
            _SWAP_KEY,
            1,
            self._keys.schema,
            b"" if old is None else old,
            b"0" if old is None else b"1",
            new,
        )
        return None if now is None else bytes(now)

    def spend_refresh(
        self, token_hash: str, claim: str, client_id: str | None = None
    ) -> tuple[str, RefreshRecord | None]:
        if not claim or claim in ("0", "1"):
            raise ValueError("a claim is a request's random id")
        check = ("", "0") if client_id is None else (client_id, "1")
        # the expiry is judged in the script, by this host's clock (which gave the record's
        # expires_at): an expired token is left unspent in the same step
        key = self._keys.rt(token_hash)
        out = self._spend_out(key, [claim, *check, repr(time.time())], confirm=True)
        if int(out[0]) == 0:
            return "missing", None
        record = _refresh_record(token_hash, out[1:7])
        return _SPEND_STATUS[int(out[0])], record

    def _spend_out(
        self, key: str, args: list[str], script: Any = None, *, confirm: bool = False
    ) -> Any:
        """The spend script's answer, or another compare-and-set ``script``'s (taking a
        code), with its ``WAIT`` where the store is replicated. ``confirm``: a spend (answer
        1) that no replica confirmed is :class:`UnconfirmedSpend` (see :meth:`_unconfirmed`)."""
        script = self._spend if script is None else script
        if not self._replicated:
            return self._call(script, keys=[key], args=args)

        def spent(out: Any) -> bool:
            return confirm and int(out[0]) == 1

        def send(pipe: Any) -> None:
            self._queue_script(pipe, script, key, args)

        return self._confirmed(key, send, spent, _SPEND_WRITE, script)

    def _queue_script(self, pipe: Any, script: Any, key: str, args: list[str]) -> None:
        script(keys=[key], args=args, client=pipe)

    def _confirmed(
        self,
        key: str,
        send: Callable[[Any], None],
        wanted: Callable[[Any], bool],
        what: tuple[str, type[UnconfirmedWrite]],
        script: Any = None,
    ) -> Any:
        """(a replicated store) The answer of the one write ``send`` queues on a pipeline
        (``script``'s, a Lua script), with ``WAIT`` after it on the same connection where the
        master has a replica, else ``INFO`` (a replica that attached since: _Replicas). A
        write whose answer is ``wanted`` judged and that no replica confirmed: see
        :meth:`_unconfirmed` (``what``: the write's name and error)."""
        waits = self._replicas.present("master", self._r, self._replica_lately)
        pipe = self._r.pipeline(transaction=False)
        send(pipe)
        pipe.execute_command(*_AFTER_SPEND[waits])
        out, after = self._call(pipe.execute)
        if self._judged("master", waits, after) and wanted(out):
            self._unconfirmed(self._r, what)
        return out

    def _judged(self, name: str, waits: bool, after: Any) -> bool:
        """Whether a write on the master ``name`` is unconfirmed, by what followed it on its
        connection: ``WAIT``'s count (``waits``), else ``INFO replication``."""
        if waits:
            return isinstance(after, Exception) or int(after) < 1
        unconfirmed = self._replicas.waited_for(after)
        if unconfirmed:
            self._replicas.attached(name)
        return unconfirmed

    def _unconfirmed(self, client: Any, what: tuple[str, type[UnconfirmedWrite]]) -> None:
        """(a write no replica confirmed within :data:`REPLICA_WAIT_MS`) Raise ``what``'s
        error where the write's master (``client``) has a replica: one that lags, is frozen
        or cut off, and that a failover could promote without the write. A master without
        any replica has no copy to lose the write to: it stands, unless it listed one a
        moment ago (:class:`_Replicas`)."""
        try:
            info = client.execute_command("INFO", "replication")
        except (redis.RedisError, RedisClusterException):
            info = None  # taken for a master with a replica: the write is unconfirmed
        if self._replicas.waited_for(info):
            self._follow()
            name, error = what
            raise error(
                f"redis store {shown_url(self.url)}: no replica confirmed {name} within "
                f"{REPLICA_WAIT_MS} ms"
            )

    def _replica_lately(self, client: Any) -> float | None:
        """(behind Sentinel, the primary listing no replica) How many seconds ago a replica of
        the primary last answered the sentinels (the first sentinel that answers tells): one
        frozen or cut off may still be promoted. None when they know none (one they never
        had an ``INFO`` from is none: the primary a failover replaced, listed as a replica of
        the new one from then on, that has not come back; nor one that last reported itself a
        master)."""
        pool = getattr(self._r, "connection_pool", None)
        manager = getattr(pool, "sentinel_manager", None)
        if pool is None or manager is None or time.monotonic() < self._sentinels_quiet_until:
            return None
        for sentinel in manager.sentinels:
            try:
                replicas = sentinel.sentinel_slaves(pool.service_name)
            except redis.RedisError:
                continue
            ages = [
                int(replica.get("last-ok-ping-reply", 0)) / 1000
                for replica in replicas
                if replica.get("role-reported") == "slave" and replica.get("info-refresh")
            ]
            return min(ages, default=None)
        self._sentinels_quiet_until = time.monotonic() + SENTINELS_QUIET_S
        return None

    def _follow(self) -> None:
        """(behind Sentinel, after a write no replica confirmed) Ask the sentinels for the
        primary now: redis-py's pool asks them only as it makes a connection, so its
        connections to a primary they no longer name (one a ``SENTINEL FAILOVER`` replaced,
        a master for seconds more) would take writes its new replica never gets. A primary
        they name anew drops the pool's idle connections, and those in use as they are
        given back; the next call connects to the new one."""
        pool = getattr(self._r, "connection_pool", None)
        find = getattr(pool, "get_master_address", None)
        if find is None or time.monotonic() < self._sentinels_quiet_until:
            return
        began = time.monotonic()
        # no sentinel answering, or none naming a primary: the pool stays as it is
        with contextlib.suppress(redis.RedisError):
            find()
        if time.monotonic() - began > SOCKET_TIMEOUT_S / 2:  # sentinels timing out: not again
            self._sentinels_quiet_until = time.monotonic() + SENTINELS_QUIET_S

    def add_code(self, code_hash: str, record: bytes, keep_s: float) -> None:
        key = self._keys.code(code_hash)
        pipe = self._r.pipeline(transaction=True)
        pipe.hset(key, mapping={"record": record, "family": ""})
        pipe.pexpire(key, max(int(keep_s * 1000), 1))
        self._call(pipe.execute)

    def note_proof(self, proof_id: str, keep_s: float) -> bool:
        key = self._keys.proof(proof_id)
        keep_ms = max(int(keep_s * 1000), 1)
        if not self._replicated:
            return bool(self._call(self._r.set, key, b"1", nx=True, px=keep_ms))
        # the value is this call's: a use no replica confirmed is taken back only if it is
        # still this one (answered 503: the client may send the proof again)
        mine = os.urandom(8).hex().encode()

        def send(pipe: Any) -> None:
            pipe.set(key, mine, nx=True, px=keep_ms)

        try:
            return bool(self._confirmed(key, send, bool, _PROOF_WRITE))
        except UnconfirmedWrite:
            with contextlib.suppress(StoreError):
                self._call(self._forget, keys=[key], args=[mine])
            raise

    def take_code(self, code_hash: str, family: str) -> tuple[str, bytes | None, str]:
        if not family:
            raise ValueError("a family is a request's random id")
        out = self._spend_out(self._keys.code(code_hash), [family], self._take)
        status = int(out[0])
        if status == 0:
            return "missing", None, ""
        record = out[1] if isinstance(out[1], bytes) else str(out[1]).encode()
        first = out[2].decode() if isinstance(out[2], bytes) else str(out[2])
        return ("ok" if status == 1 else "used"), record, first

    def restore_refresh(self, token_hash: str, claim: str) -> None:
        self._call(self._restore, keys=[self._keys.rt(token_hash)], args=[claim])

    def revoke_family(self, family: str, until: float) -> None:
        key = self._keys.revoked
        if not self._replicated:
            self._call(self._r.zadd, key, {family: until}, gt=True)
            return

        def send(pipe: Any) -> None:
            pipe.zadd(key, {family: until}, gt=True)

        # judged whether it changed anything: a later revocation kept may be one that no
        # replica confirmed yet (WAIT confirms every earlier write of the connection's master)
        self._confirmed(key, send, _always, _REVOKE_WRITE)

    def revoked_families(self) -> dict[str, float]:
        now = time.time()
        key = self._keys.revoked
        pipe = self._r.pipeline(transaction=False)
        pipe.zremrangebyscore(key, "-inf", now)
        pipe.zrange(key, 0, -1, withscores=True)
        _, rows = self._call(pipe.execute)
        return {(m.decode() if isinstance(m, bytes) else m): float(s) for m, s in rows}

    def refresh_record(self, token_hash: str) -> tuple[RefreshRecord, bool] | None:
        fields = ("spent", "family", "client_id", "subject", "expires_at", "scope", "issued_at")
        values = self._call(self._r.hmget, self._keys.rt(token_hash), fields)
        if values[0] is None:
            return None
        return _refresh_record(token_hash, values[1:]), values[0] not in (b"0", "0")

    def user_families(self, subject: str) -> dict[str, float]:
        key = self._keys.user(subject)
        pipe = self._r.pipeline(transaction=False)
        pipe.zremrangebyscore(key, "-inf", time.time() - 86400)
        pipe.zrange(key, 0, -1, withscores=True)
        _, rows = self._call(pipe.execute)
        return {(m.decode() if isinstance(m, bytes) else m): float(s) for m, s in rows}

    def _count(self, script: Any, keys: list[str], args: list[int], before: float) -> Any:
        """A count's ``script`` (_HIT_RATE, _HIT_BELOW), its last argument the deadline
        ``before`` (the host's clock; 0: none) on Redis's clock: the host's deadline plus the
        difference of the two clocks learnt so far plus ``RATE_CLOCK_MARGIN_S``. Judged late
        by Redis while this host's clock says the caller still waits, the clocks differ by
        more than the margin: the difference is learnt from Redis's answer (its clock) and
        the count asked once more (else a Redis ahead of the host refused every count)."""
        if not before:
            return self._call(script, keys=keys, args=[*args, 0])
        # the caller gives up at the socket's timeout if not before (a frozen Redis takes the
        # command and runs it as it thaws: counted late, and counted again by a caller that
        # counts on its own then, a Basic port's board): Redis's deadline, margin included,
        # comes before it
        before = min(before, time.time() + SOCKET_TIMEOUT_S - RATE_CLOCK_MARGIN_S - 0.05)
        until = int((before + self._clock_ahead + RATE_CLOCK_MARGIN_S) * 1000)
        out = self._call(script, keys=keys, args=[*args, until])
        if int(out[0]) == -1 and time.time() < before:
            self._clock_ahead = int(out[1]) / 1000 - time.time()
            until = int((before + self._clock_ahead + RATE_CLOCK_MARGIN_S) * 1000)
            out = self._call(script, keys=keys, args=[*args, until])
        return out

    def hit_failure(self, key: str, window_s: float, before: float = 0.0) -> tuple[int, float]:
        # a rate limit's script: the same count behind the same deadline
        out = self._count(self._hit_rate, [self._keys.fail(key)], [int(window_s * 1000)], before)
        return (0, 0.0) if int(out[0]) == -1 else (int(out[0]), max(int(out[1]), 0) / 1000)

    def hit_failures(
        self, keys: tuple[str, ...], window_s: float, limit: int, before: float = 0.0
    ) -> list[tuple[int, float]]:
        out = self._count(
            self._hit_below,
            [self._keys.fail(key) for key in keys],
            [int(window_s * 1000), limit],
            before,
        )
        if int(out[0]) == -1:
            return [(0, 0.0) for _ in keys]
        return [(int(out[i]), max(int(out[i + 1]), 0) / 1000) for i in range(1, len(out), 2)]

    def hit_rate(self, key: str, window_s: float, before: float = 0.0) -> tuple[int, float]:
        # the failures' script (INCR, PEXPIRE at the first) behind a deadline: one round trip
        out = self._count(self._hit_rate, [self._keys.rate(key)], [int(window_s * 1000)], before)
        return (0, 0.0) if int(out[0]) == -1 else (int(out[0]), max(int(out[1]), 0) / 1000)

    def failures(self, key: str, window_s: float) -> tuple[int, float]:
        pipe = self._r.pipeline(transaction=False)
        pipe.get(self._keys.fail(key))
        pipe.pttl(self._keys.fail(key))
        count, ttl = self._call(pipe.execute)
        if count is None:
            return 0, 0.0
        return int(count), max(int(ttl), 0) / 1000

    def release_failure(self, key: str, window_s: float) -> None:
        # a count whose window has passed has expired with its key: nothing to take back
        self._call(self._release, keys=[self._keys.fail(key)])

    def clear_failures(self, key: str) -> None:
        self._call(self._r.delete, self._keys.fail(key))

    def add_lock(self, key: str, until: float, failures: int = 0, window_s: float = 0.0) -> None:
        left_ms = int((until - time.time()) * 1000)
        if failures and left_ms > 0:  # the count first: a lister then finds it with the lock
            self._call(self._raise, keys=[self._keys.fail(key)], args=[failures, left_ms])
        self._call(self._r.zadd, self._keys.locks, {key: until}, gt=True)

    def lift_lock(self, key: str) -> None:
        pipe = self._r.pipeline(transaction=True)
        pipe.zrem(self._keys.locks, key)
        pipe.delete(self._keys.fail(key))
        self._call(pipe.execute)

    def locks(self) -> dict[str, float]:
        key = self._keys.locks
        pipe = self._r.pipeline(transaction=False)
        pipe.zremrangebyscore(key, "-inf", time.time())
        pipe.zrange(key, 0, -1, withscores=True)
        _, rows = self._call(pipe.execute)
        return {(m.decode() if isinstance(m, bytes) else m): float(s) for m, s in rows}

    def signing_key(self, candidate: bytes) -> bytes:
        key = self._keys.signing_key
        self._call(self._r.set, key, candidate, nx=True)
        value = self._call(self._r.get, key)
        return bytes(value)

    def stored_signing_key(self) -> bytes | None:
        """The signing key as stored, None when there is none; read only (``fwrest check``)."""
        value = self._call(self._r.get, self._keys.signing_key)
        return None if value is None else bytes(value)

    def get_settings(self) -> dict[str, int]:
        raw = self._call(self._r.hgetall, self._keys.settings)
        return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}

    def set_settings(self, values: dict[str, int | None]) -> tuple[dict[str, int], float]:
        # one script: the values read are the ones the writes replace, its time their order
        args: list[Any] = []
        for name, value in values.items():
            args += [name, "" if value is None else value]
        keys = [self._keys.settings, self._keys.settings_stamp]
        raw, stamp = self._call(self._set_settings, keys=keys, args=args)
        fields = zip(raw[0::2], raw[1::2], strict=True)  # HGETALL in a script: a flat list
        old = {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in fields}
        return old, int(stamp) / 1e6

    def put_blob(self, name: str, value: bytes) -> None:
        self._call(self._r.hset, self._keys.blobs, name, value)

    def blobs(self, prefix: str) -> dict[str, bytes]:
        raw = self._call(self._r.hgetall, self._keys.blobs)
        out = {}
        for k, v in raw.items():
            name = k.decode() if isinstance(k, bytes) else str(k)
            if name.startswith(prefix):
                out[name] = bytes(v)
        return out

    def delete_blobs(self, prefix: str) -> None:
        names = list(self.blobs(prefix))
        if names:
            self._call(self._r.hdel, self._keys.blobs, *names)

    def get_blob(self, name: str) -> bytes | None:
        value = self._call(self._r.hget, self._keys.blobs, name)
        return None if value is None else bytes(value)

    def swap_blob(self, name: str, old: bytes | None, new: bytes) -> bytes | None:
        value = self._call(
            self._r.eval,
            _SWAP_BLOB,
            1,
            self._keys.blobs,
            name,
            b"" if old is None else old,
            b"0" if old is None else b"1",
            new,
        )
        return None if value is None else bytes(value)

    def add_audit(self, ts: float, event: str, entry: bytes) -> None:
        # sorted sets by time; a member is "event NUL random NUL entry": unique (two equal
        # events at one microsecond stay two), and filtered by name without parsing the JSON.
        # The event's budget keeps its newest audit_keep; on one Redis the same member goes to
        # 0.1.0's set too, trimmed as 0.1.0 trims it (docs/decisions.md, "Audit trail")
        member = event.encode() + b"\0" + os.urandom(6).hex().encode() + b"\0" + entry
        pipe = self._r.pipeline(transaction=True)
        for key in (self._keys.audit[event in FLOOD_EVENTS], self._keys.audit_shared):
            if key is not None:
                pipe.zadd(key, {member: ts})
                pipe.zremrangebyrank(key, 0, -self.audit_keep - 1)
        self._call(pipe.execute)

    def audit_events(self, since: float, event: str | None, limit: int) -> list[bytes]:
        # the newest `limit` of each set that may hold such events, merged by time, each
        # member once (an event is in its budget's set and in the shared one); once `limit`
        # are found, a set read later is read no older than the `limit`-th of them
        keys = (
            list(self._keys.audit) if event is None else [self._keys.audit[event in FLOOD_EVENTS]]
        )
        if self._keys.audit_shared is not None:
            keys.append(self._keys.audit_shared)
        found: dict[bytes, float] = {}
        for key in keys:
            floor = since
            if len(found) >= limit:
                floor = max(since, sorted(found.values(), reverse=True)[limit - 1])
            found.update(self._newest(key, floor, event, limit))
        rows = sorted(found.items(), key=lambda row: (row[1], row[0]), reverse=True)
        return [m.split(b"\0", 2)[2] for m, _score in rows[:limit]]

    def _newest(self, key: str, since: float, event: str | None, limit: int) -> dict[bytes, float]:
        """The newest ``limit`` members of one audit set of ``ts >= since`` (named ``event``,
        when given), with their times."""
        if event is None:
            rows = self._call(
                self._r.zrevrangebyscore, key, "+inf", since, start=0, num=limit, withscores=True
            )
            return {bytes(m): float(score) for m, score in rows}
        wanted = event.encode() + b"\0"
        out: dict[bytes, float] = {}
        start, page = 0, 1000
        while len(out) < limit:
            rows = self._call(
                self._r.zrevrangebyscore, key, "+inf", since, start=start, num=page, withscores=True
            )
            for m, score in rows:
                if bytes(m).startswith(wanted) and len(out) < limit:
                    out[bytes(m)] = float(score)
            if len(rows) < page:
                break
            start += page
        return out

    def close(self) -> None:
        self._r.close()


class _LazyCluster:
    """redis-py's cluster client, made at its first use: it connects as it is made (it asks a
    node for the slots' owners), and a store opens whether the cluster answers or not (the
    service starts; what needs the store answers 503 until it does). Until it is made, each
    use tries again; a failure is the :class:`StoreError` of ``fail``."""

    def __init__(self, make: Any, fail: Any) -> None:
        self._make = make
        self._fail = fail
        self._client: Any = None
        self._lock = threading.Lock()

    def made(self) -> Any:
        """The client (redis-py's errors as they are)."""
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._make()
                client = self._client
        return client

    def __getattr__(self, name: str) -> Any:
        try:
            client = self.made()
        except (redis.RedisError, RedisClusterException) as exc:
            raise self._fail(exc) from None
        return getattr(client, name)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


class _ClusterScript:
    """A Lua script on a cluster, routed by its one key: ``EVALSHA``, and ``EVAL`` where the
    node does not know it yet (a replica just promoted has no script cache). redis-py's
    ``Script`` would load it on every primary at once, which fails while one is down."""

    def __init__(self, client: _LazyCluster, text: str) -> None:
        self._client = client
        self.text = text
        self.sha = hashlib.sha1(
            text.encode(), usedforsecurity=False
        ).hexdigest()  # Redis names scripts so

    def __call__(self, keys: list[str], args: list[Any] | tuple[()] = ()) -> Any:
        try:
            return self._client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return self._client.eval(self.text, len(keys), *keys, *args)


_RETRIED = (redis.ConnectionError, ClusterDownError, AskError, TryAgainError)


class RedisClusterStore(RedisStore):
    """A Redis or Valkey cluster (``redis+cluster://h1:p1,h2:p2/db``, SPEC 17.1): the same
    store on :class:`KeyLayout`'s cluster names, each operation on one slot, each script on
    one key. A refresh token's spend waits (``WAIT``) for the replica of its master, as behind
    Sentinel: a master that dies takes no confirmed spend with it to its promoted replica. A
    token family's records share a slot (:attr:`family_slots`): a refresh spends its token and
    stores the next one on one master."""

    family_slots = True

    def __init__(self, url: str, options: RedisOptions | None = None, retries: int = 2) -> None:
        self._target = parse_cluster_url(url)
        self._retries = retries
        super().__init__(url, options, retries)
        self._replicated = True

    def _layout(self) -> KeyLayout:
        return KeyLayout.cluster(self._target.db)

    def _connect(self, url: str, options: RedisOptions, retries: int) -> Any:
        def make() -> Any:
            return make_cluster_client(
                url,
                options,
                retries,
                socket_timeout=SOCKET_TIMEOUT_S,
                socket_connect_timeout=SOCKET_TIMEOUT_S,
                health_check_interval=10,
            )

        return _LazyCluster(make, self._error)

    def _script(self, text: str) -> Any:
        return _ClusterScript(self._r, text)

    def _error(self, exc: BaseException) -> StoreError:
        return StoreError(f"redis store {shown_url(self.url)}: {self._scrub(exc)}")

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (redis.RedisError, RedisClusterException) as exc:
            raise self._error(exc) from None

    def probe(self) -> tuple[str | None, str] | None:
        try:
            self._r.made().ping()
        except RedisClusterException as exc:
            text = self._scrub(exc)
            if "Cluster mode is not enabled" in text:
                return "StateStore", (
                    f"redis store {shown_url(self.url)}: the node answered as a single Redis, "
                    "not as a cluster node (cluster-enabled no): write redis://host:port/db "
                    "for it"
                )
            cause = exc.__cause__
            if isinstance(cause, redis.RedisError):
                return self._classify(cause)
            return None, f"redis store {shown_url(self.url)}: {text}"
        except redis.RedisError as exc:
            return self._classify(exc)
        return None

    def add_refresh(self, record: RefreshRecord) -> None:
        # two slots (the record's, the user's index), so two transactions: the index first,
        # so that no token exists outside it (an index entry without its token is harmless)
        ttl_ms = _refresh_ttl_ms(record)
        families = self._keys.user(record.subject)
        pipe = self._r.pipeline(transaction=True)
        pipe.zadd(families, {record.family: record.expires_at}, gt=True)
        pipe.pexpire(families, ttl_ms)
        self._call(pipe.execute)
        key = self._keys.rt(record.token_hash)
        pipe = self._r.pipeline(transaction=True)
        pipe.hset(key, mapping=_refresh_fields(record))
        pipe.pexpire(key, ttl_ms)
        self._call(pipe.execute)
        if record.alias:  # a slot of its own; an alias of no record is harmless
            self._call(self._r.set, self._keys.alias(record.alias), record.token_hash, px=ttl_ms)

    def _queue_script(self, pipe: Any, script: Any, key: str, args: list[str]) -> None:
        pipe.evalsha(script.sha, 1, key, *args)

    def _follow(self) -> None:
        pass  # the cluster client follows a failover by the slots' owners (MOVED)

    def _replica_lately(self, client: Any) -> float | None:
        """(a master listing no replica) How many seconds ago a replica of it last answered
        its cluster bus (``CLUSTER NODES``: its last pong, by this host's clock); None when
        the master knows none."""
        text = client.execute_command("CLUSTER", "NODES")
        text = text.decode() if isinstance(text, bytes) else str(text)
        lines = [fields for fields in map(str.split, text.splitlines()) if len(fields) >= 8]
        me = next((line[0] for line in lines if "myself" in line[2].split(",")), None)
        pongs = [int(line[5]) for line in lines if me is not None and line[3] == me]
        if not pongs:
            return None
        return max(time.time() - max(pongs) / 1000, 0.0)

    def _confirmed(
        self,
        key: str,
        send: Callable[[Any], None],
        wanted: Callable[[Any], bool],
        what: tuple[str, type[UnconfirmedWrite]],
        script: Any = None,
    ) -> Any:
        return self._call(self._confirmed_on_master, key, send, wanted, what, script)

    def _confirmed_on_master(
        self,
        key: str,
        send: Callable[[Any], None],
        wanted: Callable[[Any], bool],
        what: tuple[str, type[UnconfirmedWrite]],
        script: _ClusterScript | None,
    ) -> Any:
        """The write and its ``WAIT`` on one connection to the master of the key's slot (the
        cluster client would send ``WAIT`` to another node, or on another connection, where
        it waits for nothing). A connection error, a redirection or a cluster down asks for
        the slots' owners again and tries again (each write is idempotent for its caller: a
        spend's claim makes a spend that did run answer the same); a timeout does not (see
        the module's docstring)."""
        cluster = self._r.made()
        for attempt in range(self._retries + 1):
            node = cluster.get_node_from_key(key)
            try:
                client = cluster.get_redis_connection(node)
                waits = self._replicas.present(node.name, client, self._replica_lately)
                for _ in range(2):
                    pipe = client.pipeline(transaction=False)
                    send(pipe)
                    pipe.execute_command(*_AFTER_SPEND[waits])  # as RedisStore._confirmed
                    out, after = pipe.execute(raise_on_error=False)
                    if script is None or not isinstance(out, NoScriptError):
                        break
                    client.script_load(script.text)  # a node new to the script: once
                if isinstance(out, Exception):
                    raise out
                if self._judged(node.name, waits, after) and wanted(out):
                    self._unconfirmed(client, what)
                return out
            except _RETRIED:
                if attempt == self._retries:
                    raise
                cluster.nodes_manager.initialize()
        raise AssertionError("unreachable")  # pragma: no cover
