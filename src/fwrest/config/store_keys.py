"""``[HTTPSERVER]``'s state store keys (SPEC 2, 7, 15): ``StateStore`` (sqlite, memory or a
Redis URL of one of the forms of ``store/redis_target.py``), and for Redis ``StateStoreCA``,
``StateStoreCert``/``StateStoreKey`` and ``StateStorePassword``, each checked at load as far
as no connection is needed: the URL as redis-py reads it, the files as the TLS layer loads
them, the password read (``env:``/``file:``). What only Redis can tell (its certificate does
not chain to ``StateStoreCA``, a wrong password) is found by ``server/build.py``'s
``probe_store`` (``fwrest check`` and the start).

No message holds a password: the URL is shown by ``shown_url``, the password by no one.
"""

from __future__ import annotations

import ssl
from typing import Any
from urllib.parse import urlsplit

from fwrest.config.reading import RawConfig, RawSection
from fwrest.config.tls_check import Secret, read_secret
from fwrest.store.redis_target import (
    CLUSTER_SCHEMES,
    REDIS_SCHEMES,
    SENTINEL_SCHEME,
    RedisOptions,
    parse_cluster_url,
    parse_sentinel_url,
    quiet_redis,
    shown_url,
    split_userinfo,
)

__all__ = ["state_store_config"]

URL_FORMS = (
    "redis://host:port/db, rediss://host:port/db (TLS), unix:///path/redis.sock?db=N, "
    "redis+sentinel://h1:26379,h2:26379/PRIMARY/db or redis+cluster://h1:6379,h2:6379/db "
    "(rediss+cluster:// with TLS)"
)
_TLS_KEYS = (("ca", "StateStoreCA"), ("cert", "StateStoreCert"), ("key", "StateStoreKey"))
_PASSWORD = Secret(
    "StateStorePassword",
    "password",
    "the Redis password",
    "give the Redis password, or leave StateStorePassword out for a Redis without one.",
)


def state_store_config(
    raw: RawConfig, http: RawSection, top: dict[str, Any]
) -> tuple[str, RedisOptions]:
    """``StateStore`` (``sqlite`` and ``memory`` folded to lower case) and its Redis options.

    Raises:
        ConfigError: naming the key at fault.
    """
    store = top["state_store"].strip()
    if store.lower() in ("sqlite", "memory"):
        store = store.lower()
    elif not store.lower().startswith(REDIS_SCHEMES):
        raise raw.error(
            f"{store.rpartition('@')[2]!r} is not a state store.",  # never a password
            http.name,
            "StateStore",
            f"write sqlite, memory or a Redis URL: {URL_FORMS}.",
        )
    else:
        _check_redis_url(raw, http.name, store)
    tls = store.lower().startswith(("rediss://", "rediss+cluster://"))
    for attr, key in _TLS_KEYS:
        if top[f"state_store_{attr}"] is not None and not tls:
            raise raw.error(
                f"{key} is set, but StateStore is not a rediss:// or rediss+cluster:// (TLS) URL.",
                http.name,
                key,
                f"write StateStore=rediss://host:port/db for TLS to Redis, or leave {key} out.",
            )
    if top["state_store_password"] is not None and store in ("sqlite", "memory"):
        raise raw.error(
            f"StateStorePassword is set, but the state store is {store}.",
            http.name,
            "StateStorePassword",
            "leave it out, or name a Redis in StateStore.",
        )
    password = read_secret(raw, http, top["state_store_password"], _PASSWORD)
    options = RedisOptions(
        ca=top["state_store_ca"],
        cert=top["state_store_cert"],
        key=top["state_store_key"],
        password=None if password is None else password.decode("utf-8", "surrogateescape"),
    )
    if tls:
        _check_tls_files(raw, http, options)
    return store, options


def _check_redis_url(raw: RawConfig, section: str, url: str) -> None:
    """A Redis URL that redis-py takes, with a host (or a socket's path) and a numeric
    database; a password in it is never shown."""
    quiet_redis()
    from redis.connection import parse_url

    parts = urlsplit(url)
    problem = ""
    userinfo = split_userinfo(url)[1]
    if any(c in userinfo for c in "/?#"):
        raise raw.error(
            f"the Redis state store {shown_url(url)} holds a user or password with a character "
            "that ends it early (/ ? #; the password is never shown).",
            section,
            "StateStore",
            "percent-encode them in the URL (/ is %2F, ? %3F, # %23), or give the "
            "password in StateStorePassword=env:NAME.",
        )
    try:
        if url.lower().startswith(SENTINEL_SCHEME):
            parse_sentinel_url(url)
        elif url.lower().startswith(CLUSTER_SCHEMES):
            parse_cluster_url(url)
        elif parts.scheme.lower() == "unix":
            parse_url(url)  # type: ignore[no-untyped-call]  # redis-py has no hints here
            if not parts.path.strip("/"):
                problem = "names no socket (unix:///path/redis.sock?db=N)"
        else:
            parse_url(url)  # type: ignore[no-untyped-call]
            db = parts.path.strip("/")
            if not parts.hostname:
                problem = "names no host"
            elif db and not db.isdigit():
                problem = f"names the database {db!r}, which is not a number"
    except ValueError as exc:
        problem = f"is not a Redis URL ({str(exc).replace(url, shown_url(url))})"
    if problem:
        raise raw.error(
            f"the Redis state store {_shown(url)} {problem}.",
            section,
            "StateStore",
            f"write {URL_FORMS}, e.g. redis://127.0.0.1:6379/0.",
        )


def _shown(url: str) -> str:
    """The URL without its user, password, path and query (what a message may show)."""
    if url.lower().startswith(("unix://", SENTINEL_SCHEME, *CLUSTER_SCHEMES)):
        return shown_url(url).partition("?")[0]
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}" + (
        f":{parts.netloc.rpartition(':')[2]}" if ":" in parts.netloc.rpartition("@")[2] else ""
    )


def _check_tls_files(raw: RawConfig, http: RawSection, options: RedisOptions) -> None:
    """The files load as the TLS layer will load them (a connection to Redis tells the rest)."""
    for path, key in ((options.ca, "StateStoreCA"), (options.cert, "StateStoreCert")):
        if path is not None and not path.is_file():
            raise raw.error(
                f"the file {path} does not exist.",
                http.name,
                key,
                "give the path of a PEM file (relative to the configuration file).",
            )
    if (options.cert is None) != (options.key is None):
        have, lacking = ("StateStoreCert", "StateStoreKey")[:: 1 if options.key is None else -1]
        raise raw.error(
            f"{have} is set without {lacking}: a client certificate needs both.",
            http.name,
            lacking,
            f"give {lacking} too, or leave {have} out.",
        )
    context = ssl.create_default_context()
    if options.ca is not None:
        try:
            context.load_verify_locations(cafile=str(options.ca))
        except (ssl.SSLError, ValueError) as exc:
            raise raw.error(
                f"the file {options.ca} holds no CA certificate ({_reason(exc)}).",
                http.name,
                "StateStoreCA",
                "give the PEM file of the CA that issued Redis's certificate.",
            ) from None
    if options.cert is not None and options.key is not None:
        try:
            context.load_cert_chain(str(options.cert), str(options.key), password=_no_prompt)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise raw.error(
                f"the client certificate {options.cert} and key {options.key} cannot be loaded "
                f"({_reason(exc)}).",
                http.name,
                "StateStoreCert",
                "give a PEM certificate and its unencrypted private key.",
            ) from None


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc)


def _no_prompt() -> bytes:
    """An encrypted key never prompts: it fails to load (redis-py cannot open one)."""
    raise ValueError("the key is encrypted")
