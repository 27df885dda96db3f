"""``TrustedProxies``: behind a load balancer the client is the X-Forwarded-For address."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.conftest import free_config, local_port


def test_forwarded_client_only_from_trusted_proxies(tmp_path: Path, serve) -> None:  # type: ignore[no-untyped-def]
    servers = {
        "TRUSTING": local_port(TrustedProxies="127.0.0.1, 10.0.0.0/8"),
        "PLAIN": local_port(),
    }
    server = serve(free_config(tmp_path, servers=servers))
    trusting, plain = server.url("TRUSTING"), server.url("PLAIN")
    # rightmost address that is not a trusted proxy; the leftmost one can be forged
    httpx.get(f"{trusting}/items/1", headers={"X-Forwarded-For": "198.51.100.9, 203.0.113.7"})
    httpx.get(f"{trusting}/items/2", headers={"X-Forwarded-For": "203.0.113.8, 10.1.2.3"})
    httpx.get(f"{trusting}/items/3", headers={"X-Forwarded-For": "not-an-address"})
    httpx.get(f"{plain}/items/4", headers={"X-Forwarded-For": "203.0.113.9"})
    log = server.wait_log("/rest/items/4")
    lines = {
        n: next(line for line in log.splitlines() if f"/rest/items/{n} " in line)
        for n in (1, 2, 3, 4)
    }
    assert "client=203.0.113.7" in lines[1]
    assert "client=203.0.113.8" in lines[2]
    assert "client=127.0.0.1" in lines[3]
    assert "client=127.0.0.1" in lines[4]  # an untrusted peer's header is ignored


def test_a_bad_trusted_proxy_is_a_config_error(tmp_path: Path) -> None:
    from fwrest import ConfigError
    from fwrest.config import load_config

    servers = {"S": local_port(TrustedProxies="10.0.0.1, balancer.local")}
    try:
        load_config(free_config(tmp_path, servers=servers))
    except ConfigError as exc:
        assert "TrustedProxies" in str(exc) and "balancer.local" in str(exc)
    else:
        raise AssertionError("a host name in TrustedProxies must be refused")
