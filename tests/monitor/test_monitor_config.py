"""``[APP_MONITOR]`` (SPEC 2, 5, 7): what ``fwrest check`` refuses or warns about, and what ``fwrest
serve`` binds (nothing at ``Enable=0``; 127.0.0.1 and ``/api`` by default; ``ApiPath``)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from fwrest.config.model import MonitorConfig
from fwrest.server.monitor_port import monitor_url
from tests.conftest import APP_SOURCE, free_config, run_cli
from tests.monitor.support import free_port, metrics, monitor_section, port_is_free


def _check(config: Path) -> tuple[int, str]:
    result = run_cli("check", str(config), cwd=config.parent)
    out = result.stdout + result.stderr
    print(f"exit {result.returncode}:\n{out}")
    return result.returncode, out


def _listening(pid: int, port: int) -> list[str]:
    """Addresses the supervisor ``pid`` listens on at ``port``."""
    return [
        c.laddr.ip
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    ]


@pytest.mark.parametrize(
    ("case", "fmt", "words"),
    [
        ("the port of a server", "json", ["Port"]),
        ("no port", "json", ["Port"]),
        ("no port", "ini", ["Port"]),
        ("oAuth2", "json", ["Basic"]),
    ],
)  # fmt: skip
def test_a_bad_monitor_section_is_refused(
    tmp_path: Path, certs: dict[str, Path], case: str, fmt: str, words: list[str]
) -> None:
    port = free_port()
    servers = None
    section = {"Enable": 1, "HostName": "127.0.0.1"}  # no port
    if case == "the port of a server":
        servers = {"HTTP_REST": {"HostName": "127.0.0.1", "Port": port, "Locations": "ROOT"}}
        section, words = monitor_section(port), [*words, str(port)]
    elif case == "oAuth2":
        fw = {"Authorization": {"scheme": "oAuth2", "onAuthparams": "app.hello"}}
        tls = {"SslCertificate": str(certs["cert"]), "SslCertificateKey": str(certs["key"])}
        section = monitor_section(port, FwData=fw, **tls)
    code, out = _check(
        free_config(tmp_path, servers=servers, extra={"APP_MONITOR": section}, fmt=fmt)
    )
    assert code == 2
    assert "APP_MONITOR" in out and all(word in out for word in words), words
    assert "Traceback" not in out


def test_disabled_monitor_binds_nothing(tmp_path: Path, serve: Any) -> None:
    port = free_port()
    section = monitor_section(port, Enable=0)
    config = free_config(tmp_path, extra={"APP_MONITOR": section})
    code, out = _check(config)
    assert code == 0
    assert "[APP_MONITOR]" not in out
    proc = serve(config)
    assert httpx.get(proc.url() + "/hello", timeout=10).status_code == 200
    assert _listening(proc.pid, port) == []
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/api/server/metrics", timeout=5)
    assert port_is_free(port)


def test_monitor_defaults_to_loopback_and_api(tmp_path: Path, serve: Any) -> None:
    port = free_port()
    config = free_config(tmp_path, extra={"APP_MONITOR": {"Enable": 1, "Port": port}})
    code, out = _check(config)
    assert code == 0
    assert f"[APP_MONITOR] 127.0.0.1:{port}/api" in out
    assert "warning: [APP_MONITOR]" not in out
    proc = serve(config)
    addresses = _listening(proc.pid, port)
    print("monitor listens on", addresses)
    assert addresses == ["127.0.0.1"]
    index = httpx.get(f"http://127.0.0.1:{port}/api/server/metrics", timeout=10).json()
    assert index["option1"] == "/api/server/metrics/{metric}"
    entries = metrics(f"http://127.0.0.1:{port}/api/server/metrics", "/memory_resident")
    assert entries[0]["value"] > 0


def test_configured_api_path_is_used(tmp_path: Path, serve: Any) -> None:
    port = free_port()
    section = monitor_section(port, ApiPath="/ops/v1")
    config = free_config(tmp_path, extra={"APP_MONITOR": section}, fmt="ini")
    proc = serve(config)
    root = f"http://127.0.0.1:{port}"
    index = httpx.get(root + "/ops/v1/server/metrics", timeout=10).json()
    print(index)
    for key in ("option1", "option2", "option3", "option4"):
        assert index[key].startswith("/ops/v1/server/metrics"), index
    assert index["option3"] == "/ops/v1/server/metrics?{metric1}&{metric2}"
    assert metrics(root + "/ops/v1/server/metrics", "?memory_virtual")[0]["unit"] == "kb"
    assert httpx.get(root + "/api/server/metrics", timeout=10).status_code == 404
    # the REST port does not serve the monitor
    assert httpx.get(proc.url() + "/ops/v1/server/metrics", timeout=10).status_code == 404


@pytest.mark.parametrize(
    ("protection", "warned"),
    [
        ("none", "reachable from the network without authorization"),
        ("TLS", "reachable from the network without authorization"),
        ("Basic", "Basic authorization without TLS on 0.0.0.0"),
        ("Basic and TLS", None),
    ],
)
def test_public_monitor_is_warned_about_what_it_lacks(
    tmp_path: Path, certs: dict[str, Path], protection: str, warned: str | None
) -> None:
    """Off loopback, the warning names what is missing: authorization, or TLS under Basic (as
    on a server's port); Basic over TLS is not warned about."""
    keys: dict[str, Any] = {"HostName": "0.0.0.0"}
    if "Basic" in protection:
        keys["FwData"] = {"Authorization": {"scheme": "basic", "OnAuth": "app.check"}}
    if "TLS" in protection:
        keys.update(SslCertificate=str(certs["cert"]), SslCertificateKey=str(certs["key"]))
    app = APP_SOURCE + "\ndef check(user, password):\n    return False\n"
    public = free_config(
        tmp_path, extra={"APP_MONITOR": monitor_section(free_port(), **keys)}, app=app
    )
    code, out = _check(public)
    assert code == 0
    warnings = [w for w in out.splitlines() if w.startswith("warning:") and "APP_MONITOR" in w]
    if warned is None:
        assert warnings == [], out
    else:
        assert len(warnings) == 1 and warned in warnings[0], out
        fix = "add SslCertificate" if "Basic" in protection else "protect it with FwData Basic"
        assert fix in warnings[0]
    # the same config on loopback is not warned about
    (tmp_path / "loop").mkdir()
    del keys["HostName"]
    local_section = monitor_section(free_port(), **keys)
    local = free_config(tmp_path / "loop", extra={"APP_MONITOR": local_section}, app=app)
    code, out = _check(local)
    assert code == 0
    assert not any("APP_MONITOR" in w for w in out.splitlines() if w.startswith("warning:"))


def test_public_monitor_is_warned_about_at_start(tmp_path: Path, serve: Any) -> None:
    port = free_port()
    section = monitor_section(port, HostName="0.0.0.0")
    proc = serve(free_config(tmp_path, extra={"APP_MONITOR": section}))
    assert "HostName=0.0.0.0" in proc.wait_log("[APP_MONITOR]")
    # the announced URL is one to open, as the servers' (not http://0.0.0.0:...)
    assert proc.urls["APP_MONITOR"] == f"http://127.0.0.1:{port}/api/server/metrics"
    # and it serves on every address, loopback included
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass


@pytest.mark.parametrize(
    ("host", "api_path", "tls", "expected"),
    [
        ("::1", "/api", False, "http://[::1]:9001/api/server/metrics"),
        ("0.0.0.0", "/api", False, "http://127.0.0.1:9001/api/server/metrics"),
        ("127.0.0.1", "/", True, "https://127.0.0.1:9001/server/metrics"),
        ("fe80::2", "/ops/v1", False, "http://[fe80::2]:9001/ops/v1/server/metrics"),
    ],
)
def test_the_announced_monitor_url_is_one_to_open(
    host: str, api_path: str, tls: bool, expected: str
) -> None:
    # as servers' URLs: IPv6 in brackets, a wildcard as 127.0.0.1 (loopback checked on a real server
    # above; CI may lack ::1)
    cert = Path("cert.pem") if tls else None
    mon = MonitorConfig(enable=True, host=host, api_path=api_path, ssl_certificate=cert)
    assert monitor_url(mon, 9001) == expected
