"""``TrustedProxies``: behind a load balancer the client is the X-Forwarded-For address (in
process: the access line's ``client=``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import free_config, local_port, module_config
from tests.native.support import FileLog, in_process_ports


def test_forwarded_client_only_from_trusted_proxies(tmp_path: Path) -> None:
    servers = {
        "TRUSTING": local_port(TrustedProxies="127.0.0.1, 10.0.0.0/8"),
        "PLAIN": local_port(),
    }
    config = module_config(tmp_path, "proxies_app", servers=servers)
    with in_process_ports(config, servers) as ports:  # from 127.0.0.1
        trusting, plain = ports["TRUSTING"], ports["PLAIN"]
        # rightmost address that is not a trusted proxy; the leftmost one can be forged
        trusting.get("/items/1", headers={"X-Forwarded-For": "198.51.100.9, 203.0.113.7"})
        trusting.get("/items/2", headers={"X-Forwarded-For": "203.0.113.8, 10.1.2.3"})
        trusting.get("/items/3", headers={"X-Forwarded-For": "not-an-address"})
        plain.get("/items/4", headers={"X-Forwarded-For": "203.0.113.9"})
        log = FileLog(tmp_path / "server.log").wait_log("/rest/items/4")
    lines = {
        n: next(ln for ln in log.splitlines() if f"/rest/items/{n} " in ln) for n in range(5)[1:]
    }
    assert "client=203.0.113.7" in lines[1]
    assert "client=203.0.113.8" in lines[2]
    assert "client=127.0.0.1" in lines[3]
    assert "client=127.0.0.1" in lines[4]  # an untrusted peer's header is ignored


def test_a_bad_trusted_proxy_is_a_config_error(tmp_path: Path) -> None:
    from fwrest import ConfigError
    from fwrest.config import load_config

    servers = {"S": local_port(TrustedProxies="10.0.0.1, balancer.local")}
    with pytest.raises(ConfigError) as refused:  # a host name in TrustedProxies
        load_config(free_config(tmp_path, servers=servers))
    assert "TrustedProxies" in str(refused.value) and "balancer.local" in str(refused.value)
