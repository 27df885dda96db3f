"""Where a Redis store is and how to reach it (SPEC 15): the ``StateStore`` URL forms, the TLS
files and the password, turned into one redis-py client. No command of the store lives here.

* ``redis://host:port/db`` and ``rediss://host:port/db`` (TLS: ``StateStoreCA``, and
  ``StateStoreCert``/``StateStoreKey`` for a client certificate);
* ``unix:///path/redis.sock?db=N``;
* ``redis+sentinel://h1:26379,h2:26379/PRIMARY/db``: redis-py's own Sentinel client finds the
  primary through the sentinels and follows a failover (its connection pool asks the sentinels
  again when a connection fails, and drops the connections of a demoted primary);
* ``redis+cluster://h1:6379,h2:6379/db`` and ``rediss+cluster://`` (SPEC 17.1): a Redis or
  Valkey cluster through redis-py's cluster client, the nodes named being where it starts to
  look (it learns the others); ``db`` is a key prefix (a cluster has no ``SELECT``).

A password comes from the URL (``redis://user:PASSWORD@...``) or ``StateStorePassword``; it is
never shown: :func:`shown_url` is the only form of a URL fwrest writes anywhere.

    >>> shown_url("rediss://fwrest:s3cret@cache.example:6380/0")
    'rediss://***@cache.example:6380/0'
    >>> parse_sentinel_url("redis+sentinel://10.0.0.5,10.0.0.6:26380/main/2")
    SentinelTarget(sentinels=(('10.0.0.5', 26379), ('10.0.0.6', 26380)), primary='main', db=2, username=None)
    >>> parse_cluster_url("redis+cluster://10.0.0.7:7000,[::1]/3")
    ClusterTarget(nodes=(('10.0.0.7', 7000), ('::1', 6379)), db=3, tls=False, username=None)
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

__all__ = [
    "CLUSTER_SCHEMES",
    "REDIS_SCHEMES",
    "SENTINEL_PORT",
    "SENTINEL_SCHEME",
    "ClusterTarget",
    "RedisOptions",
    "SentinelTarget",
    "make_client",
    "make_cluster_client",
    "parse_cluster_url",
    "parse_sentinel_url",
    "shared_store",
    "shown_url",
    "split_userinfo",
    "url_password",
]

SENTINEL_SCHEME = "redis+sentinel://"
SENTINEL_PORT = 26379  # a sentinel's port when the URL names none
CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")  # SPEC 17.1
REDIS_SCHEMES = ("redis://", "rediss://", "unix://", SENTINEL_SCHEME, *CLUSTER_SCHEMES)
REDIS_PORT = 6379  # a cluster node's port when the URL names none


def shared_store(url: str) -> bool:
    """Whether ``StateStore`` names a Redis, which several hosts of a service share (sqlite and
    memory are one host's).

    >>> shared_store("redis+sentinel://h1/main/0"), shared_store("sqlite")
    (True, False)
    >>> shared_store("rediss+cluster://h1:7000,h2:7000/0")
    True
    """
    return url.lower().startswith(REDIS_SCHEMES)


@dataclass(frozen=True, slots=True)
class RedisOptions:
    """``[HTTPSERVER]``'s keys beside a Redis ``StateStore`` (SPEC 15), read at load.

    ``password`` is the resolved secret (``env:NAME`` already read); it is left out of the
    record's ``repr`` so that no traceback or debug line carries it.
    """

    ca: Path | None = None  # StateStoreCA
    cert: Path | None = None  # StateStoreCert
    key: Path | None = None  # StateStoreKey
    password: str | None = field(default=None, repr=False)  # StateStorePassword


@dataclass(frozen=True, slots=True)
class SentinelTarget:
    """A ``redis+sentinel://`` URL read: the sentinels, the primary's name, the database."""

    sentinels: tuple[tuple[str, int], ...]
    primary: str
    db: int
    username: str | None = None
    password: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class ClusterTarget:
    """A ``redis+cluster://`` or ``rediss+cluster://`` URL read: the nodes to start from, the
    database number (a key prefix), TLS or not."""

    nodes: tuple[tuple[str, int], ...]
    db: int
    tls: bool
    username: str | None = None
    password: str | None = field(default=None, repr=False)


def split_userinfo(url: str) -> tuple[str, str, str]:
    """``(scheme, userinfo, the rest)``: the user information ends at the URL's last ``@``
    (before a query), even where a password was written with an unencoded ``/``, so that
    no part of it is ever taken for a host or a path."""
    scheme, _sep, rest = url.partition("://")
    head, question, query = rest.partition("?")
    userinfo, at, tail = head.rpartition("@")
    return scheme, userinfo if at else "", (tail if at else head) + question + query


_SECRET_QUERY = re.compile(r"(?i)([?&](?:password|username)=)[^&#]*")


def shown_url(url: str) -> str:
    """The URL as fwrest writes it: whatever precedes ``@`` (user and password) is ``***``,
    and so are the values of a ``password`` or ``username`` query parameter (redis-py's form
    for ``unix://`` sockets).

    >>> shown_url("unix:///run/redis.sock?db=2&password=s3cret")
    'unix:///run/redis.sock?db=2&password=***'
    """
    if "://" not in url:
        return url
    scheme, userinfo, rest = split_userinfo(url)
    shown = f"{scheme}://{'***@' if userinfo or '@' in url.partition('?')[0] else ''}{rest}"
    return _SECRET_QUERY.sub(r"\1***", shown)


def url_password(url: str) -> str | None:
    """The password a URL holds (``scheme://user:PASSWORD@...``, or a ``password`` query
    parameter), if any."""
    _user, colon, secret = split_userinfo(url)[1].partition(":")
    if colon:
        return unquote(secret)
    given = parse_qs(url.partition("?")[2]).get("password")
    return given[-1] if given else None


def parse_sentinel_url(url: str) -> SentinelTarget:
    """``redis+sentinel://[user:password@]h1[:port],h2[:port]/PRIMARY[/db]``.

    Raises:
        ValueError: a part is missing or malformed (the message never holds the password).
    """
    if not url.lower().startswith(SENTINEL_SCHEME):
        raise ValueError(f"does not start with {SENTINEL_SCHEME}")
    _scheme, userinfo, rest = split_userinfo(url)
    hosts, _slash, path = rest.partition("/")
    user, colon, secret = userinfo.partition(":")
    username = unquote(user) or None
    password = unquote(secret) if colon else None
    sentinels = _host_ports(hosts, SENTINEL_PORT, "sentinel")
    primary, _slash, db = path.strip("/").partition("/")
    if not primary:
        raise ValueError("names no primary (redis+sentinel://h1:26379,h2:26379/PRIMARY/db)")
    if db and not db.isdigit():
        raise ValueError(f"names the database {db!r}, which is not a number")
    return SentinelTarget(sentinels, unquote(primary), int(db or 0), username, password)


def _host_ports(hosts: str, default: int, what: str) -> tuple[tuple[str, int], ...]:
    """``h1[:port],[::1][:port],...`` as (host, port) pairs."""
    found = []
    for item in hosts.split(","):
        item = item.strip()
        if not item:
            raise ValueError(f"names an empty {what}")
        if item.startswith("["):  # an IPv6 address: [::1]:26379
            host, _bracket, tail = item[1:].partition("]")
            port = tail[1:] if tail.startswith(":") else str(default) * (not tail)
        else:
            host, colon, port = item.partition(":")
            port = port if colon else str(default)
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"names the {what} {item!r}, not host:port")
        found.append((host, int(port)))
    return tuple(found)


def parse_cluster_url(url: str) -> ClusterTarget:
    """``redis+cluster://[user:password@]h1[:port],h2[:port][/db]`` (``rediss+cluster://``:
    TLS); the port defaults to 6379, ``db`` to 0.

    Raises:
        ValueError: a part is missing or malformed (the message never holds the password).
    """
    lowered = url.lower()
    if not lowered.startswith(CLUSTER_SCHEMES):
        raise ValueError(f"does not start with {' or '.join(CLUSTER_SCHEMES)}")
    _scheme, userinfo, rest = split_userinfo(url)
    rest = rest.partition("?")[0]
    hosts, _slash, path = rest.partition("/")
    user, colon, secret = userinfo.partition(":")
    nodes = _host_ports(hosts, REDIS_PORT, "cluster node")
    db = path.strip("/")
    if db and not db.isdigit():
        raise ValueError(f"names the database {db!r}, which is not a number")
    return ClusterTarget(
        nodes,
        int(db or 0),
        lowered.startswith("rediss+"),
        unquote(user) or None,
        unquote(secret) if colon else None,
    )


def _tls_kwargs(options: RedisOptions) -> dict[str, Any]:
    return {
        "ssl_ca_certs": None if options.ca is None else str(options.ca),
        "ssl_certfile": None if options.cert is None else str(options.cert),
        "ssl_keyfile": None if options.key is None else str(options.key),
    }


def quiet_redis() -> None:
    """Import redis-py without its optional OpenTelemetry metrics, before any other import of
    it (``fwrest.store.redis`` and this module's clients are imported after a call).

    redis-py 8 imports OpenTelemetry's SDK at ``import redis`` whenever it is installed, for
    metrics an application may switch on (``redis.observability``); fwrest never does, and
    SPEC 17.4 says that with ``Tracing`` unset nothing of OpenTelemetry is imported. So the
    first import hides it, unless it is imported already (``Tracing=otlp``, or the
    application's own use): redis-py then finds it as it would."""
    if "redis" in sys.modules or "opentelemetry" in sys.modules:
        return
    sys.modules["opentelemetry"] = None  # type: ignore[assignment]  # its imports: ImportError
    try:
        import redis  # noqa: F401  (its observability modules read OpenTelemetry's absence)
    finally:
        del sys.modules["opentelemetry"]


def make_client(url: str, options: RedisOptions, **common: Any) -> Any:
    """The redis-py client of ``url`` with ``options``; ``common`` (timeouts, retry, health
    checks) goes to every connection it makes, the sentinels' included. Connects to nothing:
    redis-py connects at the first command."""
    quiet_redis()
    import redis

    kwargs = dict(common)
    if options.password is not None:
        kwargs["password"] = options.password  # a password in the URL wins (redis-py's rule)
    if url.lower().startswith(CLUSTER_SCHEMES):
        raise ValueError("a cluster's client is make_cluster_client's")
    if url.lower().startswith("rediss://"):
        kwargs.update(_tls_kwargs(options))
    if not url.lower().startswith(SENTINEL_SCHEME):
        return redis.Redis.from_url(url, **kwargs)
    from redis.sentinel import Sentinel

    target = parse_sentinel_url(url)
    if target.username is not None:
        kwargs["username"] = target.username
    if target.password is not None:
        kwargs["password"] = target.password
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    # the sentinels are asked without the data nodes' password (they have their own, or
    # none: docs/decisions.md), under the same timeouts, once each: redis-py asks the next
    # sentinel when one fails, and the primary's connection retries the whole discovery
    sentinel_kwargs = {k: v for k, v in common.items() if k.startswith("socket_")}
    sentinel_kwargs["retry"] = Retry(NoBackoff(), 0)
    # redis-py's Sentinel module has no type hints
    sentinel = Sentinel(list(target.sentinels), sentinel_kwargs=sentinel_kwargs, **kwargs)  # type: ignore[no-untyped-call]
    return sentinel.master_for(target.primary, db=target.db)  # type: ignore[no-untyped-call]


def make_cluster_client(url: str, options: RedisOptions, retries: int, **common: Any) -> Any:
    """The redis-py cluster client of a ``redis+cluster://`` URL; ``common`` goes to every
    node's connections. It connects at once (it asks a node for the slots' owners), raising
    ``RedisClusterException`` (its cause: the node's error) when no node answers.

    A command is retried ``retries`` times after a connection error or a cluster down (the
    slots' owners are asked again first), never after a timeout: the command may sit in a
    frozen node and run when it thaws (``store/redis.py``)."""
    quiet_redis()
    import redis
    from redis.backoff import NoBackoff
    from redis.cluster import ClusterNode, RedisCluster
    from redis.retry import Retry

    target = parse_cluster_url(url)
    kwargs = dict(common)
    kwargs.pop("retry", None)  # the cluster client's own, below
    if options.password is not None:
        kwargs["password"] = options.password
    if target.username is not None:
        kwargs["username"] = target.username
    if target.password is not None:
        kwargs["password"] = target.password  # a password in the URL wins (as above)
    if target.tls:
        kwargs["ssl"] = True
        kwargs.update(_tls_kwargs(options))

    class _Cluster(RedisCluster):
        ERRORS_ALLOW_RETRY = (  # type: ignore[assignment]  # a timeout left out
            redis.ConnectionError,
            redis.exceptions.ClusterDownError,
            redis.exceptions.SlotNotCoveredError,
        )

    return _Cluster(
        startup_nodes=[ClusterNode(host, port) for host, port in target.nodes],  # type: ignore[no-untyped-call]
        retry=Retry(NoBackoff(), retries),
        **kwargs,
    )
