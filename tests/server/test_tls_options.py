"""SPEC 11.2's TLS options on a real ``fwrest serve`` with trustme certificates (root, an
intermediate issuing the server's, a client CA) and real clients (``openssl s_client``, ``curl``,
httpx, ``ssl``). ``HTTPS_ENV``: encrypted key, ``env:`` pass phrase, the chain, optional client
certificates; ``HTTPS_FILE``: ``file:``, TLS 1.3 only, certificates required; ``HTTPS_CIPHERS``:
pass phrase in the configuration, one TLS 1.2 cipher; ``HTTPS_BASIC``: ``OnAuth`` reads the client
certificate; ``[APP_MONITOR]``: certificates required, TLS 1.3. Broken options are in
tests/faults/test_broken_configs.py; here, that no message shows the pass phrase."""

from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from tests.conftest import (
    FWREST,
    ServerProcess,
    client_cert,
    free_config,
    ini_text,
    local_port,
    run_forked,
    serving,
    wait_for,
)
from tests.docs.blocks import Block, example
from tests.docs.shell import run_block
from tests.server.rawhttp import HANG_GUARD, request_bytes

PASS = "tls-options-pass-7Qz4"  # the key's pass phrase: grep-able in any output
ENV_NAME = "FWREST_TEST_KEY_PASS"
ONLY_CIPHER = "ECDHE-ECDSA-AES256-GCM-SHA384"  # trustme's keys are ECDSA
OTHER_CIPHER = "ECDHE-ECDSA-AES128-GCM-SHA256"

APP = """
from fwrest import get, rest

@get("/cert")
def cert():
    return {"cert": rest.getClientCertificate()}

@get("/acert")
async def acert():
    return {"cert": rest.getClientCertificate()}

@get("/whoami")
def whoami():
    return {"user": rest.getAuthUser(), "cert": rest.getClientCertificate()}

def check(user, password):
    # OnAuth sees the client's certificate through the REST object (SPEC 11.2)
    cert = rest.getClientCertificate()
    return (
        user == "ada"
        and password == "pw"
        and cert is not None
        and cert["subject"].startswith("CN=ada,")
    )
"""


def need(tool: str) -> str:
    found = shutil.which(tool)
    if found is None:
        pytest.fail(
            f"{tool} is missing: install Debian's (apt-get install -y {tool}); the TLS options "
            "are tested with it, never skipped"
        )
    return found


@dataclass(frozen=True)
class Pki:
    root: Path  # the root CA: all a client trusts
    leaf: Path  # the server's certificate alone
    chain: Path  # the intermediate CA that issued it
    intermediate_pem: str
    locked_key: Path  # the server's key, encrypted with PASS
    plain_key: Path
    pass_file: Path
    client_ca: Path
    ada: tuple[Path, Path]  # a client certificate of client_ca (CN=ada) and its key
    bob: tuple[Path, Path]  # another one (CN=bob)
    stranger: tuple[Path, Path]  # a client certificate of a CA the service does not know


def locked(key_pem: bytes) -> bytes:
    """A PEM private key encrypted with ``PASS`` (PKCS#8, the best encryption available)."""
    key = serialization.load_pem_private_key(key_pem, None)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(PASS.encode()),
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("tls-options-pki")
    root = trustme.CA()
    intermediate = root.create_child_ca()
    server = intermediate.issue_cert("127.0.0.1", "localhost")
    root.cert_pem.write_to_path(str(folder / "root.pem"))
    server.cert_chain_pems[0].write_to_path(str(folder / "leaf.pem"))
    intermediate_pem = server.cert_chain_pems[1].bytes()
    (folder / "chain.pem").write_bytes(intermediate_pem)
    server.private_key_pem.write_to_path(str(folder / "plain.key"))
    (folder / "locked.key").write_bytes(locked(server.private_key_pem.bytes()))
    (folder / "pass.txt").write_text(PASS + "\n")
    clients = trustme.CA(organization_name="Clients")
    clients.cert_pem.write_to_path(str(folder / "clients.pem"))
    return Pki(
        root=folder / "root.pem",
        leaf=folder / "leaf.pem",
        chain=folder / "chain.pem",
        intermediate_pem=intermediate_pem.decode(),
        locked_key=folder / "locked.key",
        plain_key=folder / "plain.key",
        pass_file=folder / "pass.txt",
        client_ca=folder / "clients.pem",
        ada=client_cert(clients, folder, "ada"),
        bob=client_cert(clients, folder, "bob"),
        stranger=client_cert(trustme.CA(), folder, "stranger"),
    )


def _servers(pki: Pki) -> dict[str, dict[str, Any]]:
    files = {"SslCertificate": str(pki.leaf), "SslCertificateCA": str(pki.chain)}
    tls = local_port(**files, SslCertificateKey=str(pki.locked_key))
    required = {"SslClientCert": 2, "SslClientCA": str(pki.client_ca)}
    basic = {"Authorization": {"scheme": "basic", "OnAuth": "app.check"}}
    by_env = {"SslCertificatePass": f"env:{ENV_NAME}"}
    # the pass phrase file relative to the config file
    by_file = {"SslCertificatePass": "file:secrets/pass.txt", "SslMinVersion": "TLSv1.3"}
    return {
        "HTTPS_ENV": {**tls, **by_env, **required, "SslClientCert": 1},
        "HTTPS_FILE": {**tls, **by_file, **required},
        "HTTPS_CIPHERS": {**tls, "SslCertificatePass": PASS, "SslCiphers": ONLY_CIPHER},
        "HTTPS_BASIC": {
            **tls,
            "SslCertificateKey": str(pki.plain_key),
            **required,
            "FwData": basic,
        },
        "HTTP_REST": local_port(),
    }


def _monitor(pki: Pki) -> dict[str, Any]:
    """``[APP_MONITOR]``: HTTPS_ENV's keys, TLS 1.3 only, client certificates required."""
    monitor = {**_servers(pki)["HTTPS_ENV"], "Enable": 1, "SslMinVersion": "TLSv1.3"}
    del monitor["Locations"]
    return {**monitor, "SslClientCert": 2}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("tls-options")
    (folder / "secrets").mkdir()
    shutil.copy(pki.pass_file, folder / "secrets" / "pass.txt")
    config = free_config(
        folder,
        servers=_servers(pki),
        extra={"APP_MONITOR": _monitor(pki)},
        app=APP,
        general={"rest_log_level": 5},  # everything the service logs, for the last test
    )
    with serving(config, env={ENV_NAME: PASS}) as proc:
        yield proc


def client_ctx(
    pki: Pki,
    cert: tuple[Path, Path] | None = None,
    maximum: ssl.TLSVersion | None = None,
) -> ssl.SSLContext:
    """A client that trusts only the root CA (so the chain must come from the server)."""
    ctx = ssl.create_default_context(cafile=str(pki.root))
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    if maximum is not None:
        ctx.maximum_version = maximum
    return ctx


def get(url: str, ctx: ssl.SSLContext, **kw: Any) -> httpx.Response:
    with httpx.Client(verify=ctx, timeout=10) as client:
        return client.get(url, **kw)


def s_client(port: int, *args: str) -> subprocess.CompletedProcess[str]:
    """``openssl s_client`` to the port, nothing sent: the handshake and what it printed."""
    command = [need("openssl"), "s_client", "-connect", f"127.0.0.1:{port}", *args]
    return subprocess.run(
        command, input="", capture_output=True, text=True, timeout=30, check=False
    )


def curl(url: str, pki: Pki, *args: str) -> subprocess.CompletedProcess[str]:
    command = [need("curl"), "-sS", "--max-time", "10", "--cacert", str(pki.root), *args, url]
    return subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)


def refused(port: int, ctx: ssl.SSLContext) -> str:
    """How a ``/rest/cert`` request with ``ctx`` ended without an answer (no TLS alert: on TLS 1.2
    the handshake fails, on 1.3 the client's side completes and the first read fails)."""
    with socket.create_connection(("127.0.0.1", port), timeout=HANG_GUARD) as raw:
        try:
            with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(request_bytes("GET", "/rest/cert"))
                data = tls.recv(4096)
        except ssl.SSLError as exc:
            return f"{type(exc).__name__}: {exc.reason}"
        except ConnectionResetError:
            return "reset"
        except TimeoutError:
            raise AssertionError(f"still open after the {HANG_GUARD} s hang guard") from None
    assert data == b"", f"the server answered: {data[:80]!r}"
    return "closed"


def handshake_failures(service: ServerProcess, port: int, since: int, count: int) -> list[str]:
    """Reasons of the last ``count`` failed handshakes on ``port`` (level 4+), once logged."""
    pattern = re.compile(rf"TLS handshake with 127\.0\.0\.1 failed: (\S+) port={port}$", re.M)
    found: list[str] = []

    def logged() -> bool:
        found[:] = pattern.findall(service.log()[since:])
        return len(found) >= count

    wait_for(logged, 10, f"{count} failed handshake(s) on port {port} in the log")
    return found


def no_handshake(done: subprocess.CompletedProcess[str]) -> bool:
    """``openssl s_client`` negotiated nothing."""
    return done.returncode != 0 and "Cipher is (NONE)" in done.stdout


def expected_fields(cert_path: Path) -> dict[str, Any]:
    """What ``getClientCertificate()`` must give for a certificate, read with cryptography."""
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    serial = f"{cert.serial_number:X}"
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {
        "subject": cert.subject.rfc4514_string(),
        "issuer": cert.issuer.rfc4514_string(),
        "serial": "0" * (len(serial) % 2) + serial,  # whole bytes, as OpenSSL prints it
        "not_after": cert.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "sans": [f"email:{e}" for e in san.get_values_for_type(x509.RFC822Name)],
    }


# -- the chain (the pass phrases: each port's tests below are served, its key opened) ----------


def test_the_chain_is_sent_after_the_certificate(service: ServerProcess, pki: Pki) -> None:
    """No chain in the certificate file: SslCertificateCA's is sent; a root-only client verifies."""
    assert "BEGIN CERTIFICATE" in pki.leaf.read_text()
    assert pki.leaf.read_text().count("BEGIN CERTIFICATE") == 1
    port = service.ports["HTTPS_CIPHERS"]
    done = s_client(port, "-showcerts", "-CAfile", str(pki.root), "-verify_return_error")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("-----BEGIN CERTIFICATE-----") == 2, done.stdout
    assert pki.intermediate_pem.strip() in done.stdout
    assert "Verify return code: 0 (ok)" in done.stdout
    print(next(line for line in done.stdout.splitlines() if line.startswith(" 1 s:")))


# -- SslMinVersion, SslCiphers -----------------------------------------------------------------


def test_tls13_only_refuses_tls12(service: ServerProcess, pki: Pki) -> None:
    port = service.ports["HTTPS_FILE"]
    ada = ("-cert", str(pki.ada[0]), "-key", str(pki.ada[1]), "-CAfile", str(pki.root))
    since = len(service.log())
    old = s_client(port, "-tls1_2", *ada)
    assert no_handshake(old), (old.stdout, old.stderr)
    assert handshake_failures(service, port, since, 1) == ["UNSUPPORTED_PROTOCOL"]
    new = s_client(port, "-tls1_3", *ada)
    assert new.returncode == 0, new.stderr
    assert "New, TLSv1.3" in new.stdout
    # the default (TLSv1.2) takes both
    both = s_client(service.ports["HTTPS_ENV"], "-tls1_2", "-CAfile", str(pki.root))
    assert both.returncode == 0 and "New, TLSv1.2" in both.stdout, both.stderr
    python = refused(port, client_ctx(pki, pki.ada, ssl.TLSVersion.TLSv1_2))
    print(f"TLS 1.2 to a TLS 1.3 port: openssl {old.stderr.strip()[-60:]!r}; Python {python}")


def test_ciphers_restrict_tls12(service: ServerProcess, pki: Pki) -> None:
    port = service.ports["HTTPS_CIPHERS"]
    since = len(service.log())
    excluded = s_client(port, "-tls1_2", "-cipher", OTHER_CIPHER)
    assert no_handshake(excluded), (excluded.stdout, excluded.stderr)
    assert handshake_failures(service, port, since, 1) == ["NO_SHARED_CIPHER"]
    allowed = s_client(port, "-tls1_2", "-cipher", ONLY_CIPHER)
    assert allowed.returncode == 0, allowed.stderr
    assert f"Cipher is {ONLY_CIPHER}" in allowed.stdout
    # the cipher refused here is served by a port without SslCiphers
    elsewhere = s_client(service.ports["HTTPS_ENV"], "-tls1_2", "-cipher", OTHER_CIPHER)
    assert elsewhere.returncode == 0 and f"Cipher is {OTHER_CIPHER}" in elsewhere.stdout
    # TLS 1.3 keeps OpenSSL's suites
    assert "New, TLSv1.3" in s_client(port, "-tls1_3").stdout


CBC_CIPHERS = ("ECDHE-ECDSA-AES128-SHA256", "ECDHE-ECDSA-AES256-SHA384", "ECDHE-ECDSA-AES128-SHA")
AEAD_CIPHERS = (OTHER_CIPHER, ONLY_CIPHER, "ECDHE-ECDSA-CHACHA20-POLY1305")
# CBC, and AES-GCM without forward secrecy (RSA key exchange)
RSA_REFUSED = ("ECDHE-RSA-AES128-SHA256", "ECDHE-RSA-AES256-SHA384", "AES128-GCM-SHA256")
RSA_AEAD_CIPHERS = ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-CHACHA20-POLY1305")


def tls12_cipher(port: int, pki: Pki, cipher: str, *, verify: bool = True) -> str:
    """The cipher a Python TLS 1.2 client offering only ``cipher`` got, or why it failed
    (``verify``: trusting only the root CA, else trusting any certificate)."""
    ctx = client_ctx(pki, maximum=ssl.TLSVersion.TLSv1_2)
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    ctx.set_ciphers(cipher)
    with socket.create_connection(("127.0.0.1", port), timeout=HANG_GUARD) as raw:
        try:
            with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                got = tls.cipher()
                assert got is not None
                return got[0]
        except ssl.SSLError as exc:
            return f"refused: {exc.reason}"


def test_without_ssl_ciphers_tls12_takes_aead_ciphers_only(pki: Pki, tmp_path: Path) -> None:
    """No SslCiphers: Mozilla intermediate's AEAD ciphers on an app port and on the monitor, no
    CBC one (an EC key's and an RSA key's); an explicit SslCiphers still wins (a CBC cipher it
    names is served)."""
    files = {"SslCertificate": str(pki.leaf), "SslCertificateCA": str(pki.chain)}
    tls = local_port(**files, SslCertificateKey=str(pki.plain_key))
    monitor = {**tls, "Enable": 1}
    del monitor["Locations"]
    rsa = tmp_path / "rsa"
    rsa.mkdir()
    issued = trustme.CA(key_type=trustme.KeyType.RSA).issue_cert(
        "127.0.0.1", "localhost", key_type=trustme.KeyType.RSA
    )
    issued.cert_chain_pems[0].write_to_path(str(rsa / "leaf.pem"))
    issued.private_key_pem.write_to_path(str(rsa / "leaf.key"))
    servers = {
        "HTTPS_DEFAULT": tls,
        "HTTPS_CBC": {**tls, "SslCiphers": CBC_CIPHERS[0]},
        "HTTPS_RSA": local_port(
            SslCertificate=str(rsa / "leaf.pem"), SslCertificateKey=str(rsa / "leaf.key")
        ),
    }
    config = free_config(tmp_path, servers=servers, extra={"APP_MONITOR": monitor}, app=APP)
    with serving(config) as proc:
        for name in ("HTTPS_DEFAULT", "APP_MONITOR", "HTTPS_RSA"):
            port = proc.ports[name]
            rsa_key = name == "HTTPS_RSA"
            refused = RSA_REFUSED if rsa_key else CBC_CIPHERS
            aead = RSA_AEAD_CIPHERS if rsa_key else AEAD_CIPHERS
            for cipher in refused:
                got = tls12_cipher(port, pki, cipher, verify=not rsa_key)
                assert got.startswith("refused: "), (name, cipher, got)
            for cipher in aead:
                assert tls12_cipher(port, pki, cipher, verify=not rsa_key) == cipher, name
            # TLS 1.3 keeps OpenSSL's suites
            assert "New, TLSv1.3" in s_client(port, "-tls1_3").stdout
        explicit = proc.ports["HTTPS_CBC"]
        assert tls12_cipher(explicit, pki, CBC_CIPHERS[0]) == CBC_CIPHERS[0]
        assert tls12_cipher(explicit, pki, OTHER_CIPHER).startswith("refused: ")
        print(f"default, CBC: {tls12_cipher(proc.ports['HTTPS_DEFAULT'], pki, CBC_CIPHERS[0])}")


# -- client certificates -----------------------------------------------------------------------


def test_required_client_certificate_refuses_a_client_without_one(
    service: ServerProcess, pki: Pki
) -> None:
    basic, strict = service.ports["HTTPS_BASIC"], service.ports["HTTPS_FILE"]
    since = len(service.log())
    # TLS 1.2: the client's handshake fails
    tls12 = refused(basic, client_ctx(pki, None, ssl.TLSVersion.TLSv1_2))
    assert tls12.startswith("SSL"), tls12
    # TLS 1.3: the connection ends before any answer
    tls13 = refused(strict, client_ctx(pki))
    with pytest.raises(httpx.TransportError) as caught:
        get(f"{service.url('HTTPS_FILE')}/cert", client_ctx(pki))
    bare = curl(f"{service.url('HTTPS_FILE')}/cert", pki)
    assert bare.returncode != 0 and bare.stdout == "", bare
    # the server refused each at its handshake, for want of a certificate
    assert handshake_failures(service, basic, since, 1) == ["PEER_DID_NOT_RETURN_A_CERTIFICATE"]
    assert (
        handshake_failures(service, strict, since, 3) == ["PEER_DID_NOT_RETURN_A_CERTIFICATE"] * 3
    )
    print(f"TLS 1.2: {tls12}; TLS 1.3: {tls13}; httpx: {caught.value!r}; curl: {bare.stderr}")


def test_required_client_certificate_admits_one_of_the_client_ca(
    service: ServerProcess, pki: Pki
) -> None:
    url = f"{service.url('HTTPS_FILE')}/cert"
    by_curl = curl(url, pki, "--cert", str(pki.ada[0]), "--key", str(pki.ada[1]))
    assert by_curl.returncode == 0, by_curl.stderr
    assert json.loads(by_curl.stdout)["cert"]["subject"].startswith("CN=ada,")
    by_httpx = get(url, client_ctx(pki, pki.ada))
    assert by_httpx.status_code == 200
    assert by_httpx.json() == json.loads(by_curl.stdout)


def test_a_client_certificate_of_another_ca_is_refused(service: ServerProcess, pki: Pki) -> None:
    for name in ("HTTPS_FILE", "HTTPS_ENV"):  # required, and optional: one sent is verified
        port = service.ports[name]
        since = len(service.log())
        refused(port, client_ctx(pki, pki.stranger))
        assert handshake_failures(service, port, since, 1) == ["CERTIFICATE_VERIFY_FAILED"]


def test_optional_client_certificate_admits_clients_with_and_without(
    service: ServerProcess, pki: Pki
) -> None:
    url = f"{service.url('HTTPS_ENV')}/cert"
    without = get(url, client_ctx(pki))
    assert without.status_code == 200
    assert without.json() == {"cert": None}
    with_one = get(url, client_ctx(pki, pki.ada))
    assert with_one.status_code == 200
    assert with_one.json()["cert"]["subject"].startswith("CN=ada,")
    plain = httpx.get(f"{service.url('HTTP_REST')}/cert", timeout=10)
    assert plain.json() == {"cert": None}


def test_get_client_certificate_gives_the_certificates_fields(
    service: ServerProcess, pki: Pki
) -> None:
    want = expected_fields(pki.ada[0])
    assert want["subject"].startswith("CN=ada,") and "O=Clients" in want["issuer"]
    with httpx.Client(verify=client_ctx(pki, pki.ada), timeout=10) as client:
        # one connection, several requests, def and async def handlers: the same fields
        answers = [
            client.get(f"{service.url('HTTPS_ENV')}/{path}").json()["cert"]
            for path in ("cert", "acert", "cert")
        ]
    assert answers == [want, want, want]
    bob = get(f"{service.url('HTTPS_ENV')}/cert", client_ctx(pki, pki.bob)).json()["cert"]
    assert bob == expected_fields(pki.bob[0])
    print(json.dumps(want))


def test_on_auth_reads_the_client_certificate(service: ServerProcess, pki: Pki) -> None:
    url = f"{service.url('HTTPS_BASIC')}/whoami"
    ada = get(url, client_ctx(pki, pki.ada), auth=("ada", "pw"))
    assert ada.status_code == 200, ada.text
    assert ada.json()["user"] == "ada"
    assert ada.json()["cert"]["subject"].startswith("CN=ada,")
    # the right password over bob's certificate: OnAuth refuses it
    bob = get(url, client_ctx(pki, pki.bob), auth=("ada", "pw"))
    assert bob.status_code == 403


# -- the monitor -------------------------------------------------------------------------------


def test_the_monitor_takes_the_same_keys(service: ServerProcess, pki: Pki) -> None:
    port = service.ports["APP_MONITOR"]
    url = f"https://127.0.0.1:{port}/api/server/metrics"
    answer = get(url, client_ctx(pki, pki.ada))  # the chain sent: the root alone verifies
    assert answer.status_code == 200
    assert answer.json()["option1"] == "/api/server/metrics/{metric}"
    since = len(service.log())
    without = refused(port, client_ctx(pki))
    ada = ("-cert", str(pki.ada[0]), "-key", str(pki.ada[1]))
    old = s_client(port, "-tls1_2", *ada)
    assert no_handshake(old), (old.stdout, old.stderr)
    failures = ["PEER_DID_NOT_RETURN_A_CERTIFICATE", "UNSUPPORTED_PROTOCOL"]
    assert handshake_failures(service, port, since, 2) == failures
    print(f"monitor without a certificate: {without}")


# -- the pass phrase is never shown ------------------------------------------------------------


def test_fwrest_check_summarises_the_tls_options_without_the_pass_phrase(
    service: ServerProcess,
) -> None:
    """``fwrest check`` as a user runs it, the pass phrase in the environment."""
    command = [*FWREST, "check", str(service.config)]
    env = {**os.environ, ENV_NAME: PASS}
    folder = service.config.parent
    done = subprocess.run(
        command, capture_output=True, text=True, cwd=folder, env=env, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout + done.stderr
    assert PASS not in out
    assert "[HTTPS_FILE] 127.0.0.1:0 (TLS, TLSv1.3 only, client certificate required," in out
    assert "[HTTPS_ENV] 127.0.0.1:0 (TLS, client certificate optional," in out
    assert "[HTTPS_CIPHERS] 127.0.0.1:0 (TLS, authorization: open)" in out
    assert "/api (TLS, TLSv1.3 only, client certificate required)" in out


BROKEN: dict[str, tuple[dict[str, Any], str]] = {
    # what is changed in HTTPS_CIPHERS (pass phrase in the configuration), and the message
    "a wrong pass phrase": (
        {"SslCertificatePass": f"not-{PASS}"},
        "SslCertificatePass: the pass phrase does not open the private key",
    ),
    "a pass phrase that is no text": ({"SslCertificatePass": [PASS]}, "must be text"),
    "a chain of another CA": ({"SslCertificateCA": "root.pem"}, "does not issue the certificate"),
    "an unknown TLS version": ({"SslMinVersion": "TLSv1.0"}, "is not a TLS version"),
    "ciphers OpenSSL refuses": ({"SslCiphers": "NOPE"}, "selects no cipher"),
    "ciphers of RSA keys": ({"SslCiphers": "ECDHE-RSA-AES128-GCM-SHA256"}, "with the key"),
    "SslClientCert out of range": ({"SslClientCert": 3}, "3 is out of range (0-2)"),
    "client certificates without SslClientCA": ({"SslClientCert": 1}, "SslClientCA is missing"),
    "an SslClientCA that is no CA file": (
        {"SslClientCert": 2, "SslClientCA": "pass.txt"},
        "SslClientCA: the CA file",
    ),
    "an SslClientCA that does not exist": (
        {"SslClientCert": 2, "SslClientCA": "nope.pem"},
        "SslClientCA: the file",
    ),
}


@pytest.mark.parametrize("case", BROKEN)
def test_no_message_shows_the_pass_phrase(case: str, pki: Pki, tmp_path: Path) -> None:
    """``fwrest check`` of each broken configuration, forked (:func:`run_forked`)."""
    change, message = BROKEN[case]
    servers = {"HTTPS_CIPHERS": {**_servers(pki)["HTTPS_CIPHERS"], **change}}
    for key in ("SslCertificateCA", "SslClientCA"):
        if key in change:
            servers["HTTPS_CIPHERS"][key] = str(pki.root.parent / change[key])
    config = free_config(tmp_path, servers=servers, app=APP)
    done = run_forked("check", str(config), cwd=tmp_path, env={ENV_NAME: PASS})
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert "fwrest: configuration error:" in done.stderr and "Traceback" not in out
    assert "[HTTPS_CIPHERS] Ssl" in done.stderr and message in done.stderr, out
    assert PASS not in out
    print(done.stderr.strip())


def test_the_pass_phrase_is_in_no_output_of_the_run(service: ServerProcess, pki: Pki) -> None:
    """Last: every test above has run on this service (and this one asks once more)."""
    assert get(f"{service.url('HTTPS_CIPHERS')}/cert", client_ctx(pki)).status_code == 200
    service.wait_log(f"GET /rest/cert 200 port={service.ports['HTTPS_CIPHERS']}")
    stdout = "\n".join(service.stdout_lines)
    outputs = {"stderr": service.log(), "stdout": stdout, "LogFile": service.file_log()}
    assert len(outputs["LogFile"]) > 1000, "the log holds too little to tell"
    for name, text in outputs.items():
        assert PASS not in text, f"the pass phrase is in the service's {name}"


# -- the user guide's examples -----------------------------------------------------------------


def _ini_block(block: Block) -> dict[str, dict[str, str]]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(block.text)
    return {name: dict(parser[name]) for name in parser.sections()}


def test_the_guides_tls_and_mutual_tls_examples(tmp_path: Path) -> None:
    """docs/deploy.md's TLS section as written (loopback, free ports), its curl command as shown."""
    certs = tmp_path / "certs"
    certs.mkdir()
    root = trustme.CA()
    intermediate = root.create_child_ca()
    server = intermediate.issue_cert("api.example.com", "127.0.0.1")
    server.cert_chain_pems[0].write_to_path(str(certs / "server.crt"))
    server.cert_chain_pems[1].write_to_path(str(certs / "intermediate.pem"))
    (certs / "server.key").write_bytes(locked(server.private_key_pem.bytes()))
    root.cert_pem.write_to_path(str(certs / "ca.pem"))
    partners = trustme.CA(organization_name="Partners")
    partners.cert_pem.write_to_path(str(certs / "partners-ca.pem"))
    names = {"organization_name": "Example Partner", "organization_unit_name": "Orders"}
    partner = partners.issue_cert("ops@partner.example", common_name="partner-1", **names)
    partner.cert_chain_pems[0].write_to_path(str(tmp_path / "partner.crt"))
    partner.private_key_pem.write_to_path(str(tmp_path / "partner.key"))
    (tmp_path / "guide_tls.py").write_text(example("deploy-mtls-handler").text)

    sections: dict[str, dict[str, Any]] = {
        "HTTPSERVER": {"Servers": "HTTPS_REST, HTTPS_PARTNERS", "StateStore": "memory"},
        **_ini_block(example("deploy-tls")),
        **_ini_block(example("deploy-mtls")),
        "REST": {"Path": "/rest", "ThreadPool": "POOL"},
        "POOL": {"Environment": "ENV"},
        "ENV": {"Repository": "guide_tls"},
        "GENERAL": {"rest_log_level": 5},
    }
    for name in ("HTTPS_REST", "HTTPS_PARTNERS"):
        sections[name].update(HostName="127.0.0.1", Port=0)
    config = tmp_path / "service.ini"
    config.write_text(ini_text(sections))
    with serving(config, env={"FWREST_KEY_PASS": PASS}) as proc:
        port = proc.ports["HTTPS_PARTNERS"]
        run_block(
            example("deploy-mtls-curl"), tmp_path, {"api.example.com:9443": f"127.0.0.1:{port}"}
        )
        trusting_root = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        assert get(f"{proc.url('HTTPS_REST')}/me", trusting_root).json() == {"subject": None}
        with pytest.raises(httpx.TransportError):
            get(f"{proc.url('HTTPS_PARTNERS')}/me", trusting_root)
        assert PASS not in proc.log()
