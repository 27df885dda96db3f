"""A port's TLS keys at load (SPEC 2, 11.2): the certificate and key, the pass phrase
(``env:``/``file:`` resolved here, once), the chain, the minimum version, the ciphers and the
client certificates, each checked by building the port's context as a worker will
(:func:`fwrest.config.tls.server_tls_context`) and by handshakes in memory.

No message built here holds the pass phrase: it is read into the options record and handed
to OpenSSL only.
"""

from __future__ import annotations

import dataclasses
import os
import ssl
from pathlib import Path
from typing import Any

from fwrest.config.reading import RawConfig, RawSection
from fwrest.config.tls import (
    TLS_VERSIONS,
    ClientCert,
    TlsOptions,
    TlsSetupError,
    TlsStep,
    handshake_in_memory,
    server_tls_context,
)

__all__ = ["tls_options"]

# the keys of SPEC 11.2 (attribute, key as the SPEC writes it): they need a certificate
_OPTIONS = (
    ("ssl_certificate_pass", "SslCertificatePass"),
    ("ssl_certificate_ca", "SslCertificateCA"),
    ("ssl_min_version", "SslMinVersion"),
    ("ssl_ciphers", "SslCiphers"),
    ("ssl_client_cert", "SslClientCert"),
    ("ssl_client_ca", "SslClientCA"),
)
_X509_V_FLAG_NO_CHECK_TIME = 0x200000  # OpenSSL's; the ssl module names no constant for it


def _written(sec: RawSection, name: str) -> str:
    """A key as the section writes it (as the SPEC writes it when the section does not)."""
    return sec.values.get(name.lower(), (name, None))[0]


def tls_options(raw: RawConfig, sec: RawSection, values: dict[str, Any]) -> TlsOptions:
    """Check a server's (or the monitor's) TLS keys; take the options of SPEC 11.2 out of
    ``values`` and return them.

    Raises:
        ConfigError: naming the section and the key at fault.
    """
    given = {attr: values.pop(attr) for attr, _ in _OPTIONS}
    cert, key = values["ssl_certificate"], values["ssl_certificate_key"]
    if (cert is None) != (key is None):
        missing = "SslCertificateKey" if key is None else "SslCertificate"
        raise raw.error(
            f"{missing} is missing: TLS needs both a certificate and its key.",
            sec.name,
            missing,
            "give both SslCertificate and SslCertificateKey, or neither for plain HTTP.",
        )
    if cert is None:
        for _attr, name in _OPTIONS:
            if name.lower() in sec.values:
                written = _written(sec, name)
                raise raw.error(
                    f"{written} is a TLS option, and the port speaks plain HTTP.",
                    sec.name,
                    written,
                    f"give [{sec.name}] SslCertificate and SslCertificateKey, or remove {written}.",
                )
        return TlsOptions()
    files = [("SslCertificate", cert), ("SslCertificateKey", key)]
    files += [(name, given[attr]) for attr, name in _OPTIONS if name.endswith("CA")]
    for name, path in files:
        if path is not None and not Path(path).is_file():
            raise raw.error(
                f"the file {path} does not exist.",
                sec.name,
                _written(sec, name),
                "give the path of a PEM file (relative to the config file).",
            )
    options = TlsOptions(
        pass_phrase=_pass_phrase(raw, sec, given["ssl_certificate_pass"]),
        chain=given["ssl_certificate_ca"],
        min_version=_min_version(raw, sec, given["ssl_min_version"]),
        ciphers=given["ssl_ciphers"] or None,
        client_cert=ClientCert(given["ssl_client_cert"]),
        client_ca=given["ssl_client_ca"],
    )
    if options.chain is not None and b"-----BEGIN CERTIFICATE-----" not in _read(
        raw, sec, options.chain
    ):
        raise raw.error(
            f"the file {options.chain} holds no PEM certificate.",
            sec.name,
            _written(sec, "SslCertificateCA"),
            "give the intermediate CA certificates of SslCertificate, in PEM.",
        )
    if options.client_cert is not ClientCert.NONE and options.client_ca is None:
        raise raw.error(
            f"SslClientCA is missing: SslClientCert={int(options.client_cert)} asks clients "
            "for certificates, which must chain to the CAs it names.",
            sec.name,
            "SslClientCA",
            "give SslClientCA=PEM file of the CA certificates that issue client certificates.",
        )
    _build(raw, sec, Path(cert), Path(key), options)
    if options.chain is not None:
        _check_chain(raw, sec, Path(cert), Path(key), options)
    if options.ciphers is not None and options.min_version is ssl.TLSVersion.TLSv1_2:
        _check_ciphers(raw, sec, Path(cert), Path(key), options)
    return options


def _read(raw: RawConfig, sec: RawSection, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise raw.error(
            f"the file {path} cannot be read ({exc.strerror}).",
            sec.name,
            _written(sec, "SslCertificateCA"),
            "give a file the service's user may read.",
        ) from None


def _pass_phrase(raw: RawConfig, sec: RawSection, value: str | None) -> bytes | None:
    """``SslCertificatePass``: see :func:`read_secret`."""
    return read_secret(
        raw,
        sec,
        value,
        Secret(
            "SslCertificatePass",
            "pass phrase",
            "the key's pass phrase",
            "give the pass phrase of SslCertificateKey, or leave SslCertificatePass out for "
            "an unencrypted key.",
        ),
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Secret:
    """A key holding a secret, for its messages: the key, what the secret is called, what
    the variable or file holds, and the fix of an empty one."""

    key: str
    noun: str
    holding: str
    empty_fix: str


def read_secret(raw: RawConfig, sec: RawSection, value: str | None, what: Secret) -> bytes | None:
    """``env:NAME``, ``file:PATH`` (its first line, as OpenSSL's ``-passin file:`` reads it)
    or the secret itself; the secret never shows in a message."""
    if value is None:
        return None
    written = _written(sec, what.key)
    if value.startswith("env:"):
        name = value[4:].strip()
        if not name:
            raise raw.error(
                "env: names no environment variable.",
                sec.name,
                written,
                f"write {what.key}=env:NAME, NAME holding {what.holding}.",
            )
        found = os.environ.get(name)
        if found is None:
            raise raw.error(
                f"the environment variable {name} is not set.",
                sec.name,
                written,
                f"set {name} in the service's environment (systemd: Environment= or "
                "EnvironmentFile=), or give file:PATH.",
            )
        return _non_empty(raw, sec, os.fsencode(found), what)
    if value.startswith("file:"):
        path = Path(value[5:].strip())
        path = path if path.is_absolute() else raw.base_dir / path
        raw.files.append(path)
        try:
            content = path.read_bytes()
        except OSError as exc:
            raise raw.error(
                f"the file {path} cannot be read ({exc.strerror}).",
                sec.name,
                written,
                f"give a file holding the {what.noun} on its first line, readable by the "
                "service's user only.",
            ) from None
        return _non_empty(raw, sec, content.splitlines()[0] if content else b"", what)
    return _non_empty(raw, sec, value.encode("utf-8"), what)


def _non_empty(raw: RawConfig, sec: RawSection, secret: bytes, what: Secret) -> bytes:
    if not secret:
        raise raw.error(
            f"the {what.noun} is empty.", sec.name, _written(sec, what.key), what.empty_fix
        )
    return secret


def _min_version(raw: RawConfig, sec: RawSection, value: str) -> ssl.TLSVersion:
    found = TLS_VERSIONS.get(value.strip().lower())
    if found is None:
        raise raw.error(
            f"{value!r} is not a TLS version fwrest accepts (TLSv1.2, TLSv1.3).",
            sec.name,
            _written(sec, "SslMinVersion"),
            "write SslMinVersion=TLSv1.2 (the default) or SslMinVersion=TLSv1.3.",
        )
    return found


def _build(raw: RawConfig, sec: RawSection, cert: Path, key: Path, options: TlsOptions) -> None:
    """The context a worker will build, built once here: each failing step names its key."""
    try:
        server_tls_context(cert, key, options)
    except TlsSetupError as exc:
        step, reason = exc.step, exc.reason
    else:
        return
    if step is TlsStep.ENCRYPTED:
        raise raw.error(
            f"the private key {key} is encrypted (it asks for a pass phrase).",
            sec.name,
            "SslCertificateKey",
            "give SslCertificatePass=env:NAME (or file:PATH) to open it; fwrest never prompts.",
        )
    if step is TlsStep.PASS_PHRASE:
        raise raw.error(
            f"the pass phrase does not open the private key {key}.",
            sec.name,
            _written(sec, "SslCertificatePass"),
            "give the pass phrase of SslCertificateKey (env:NAME reads it from the "
            "environment, file:PATH from a file's first line).",
        )
    if step is TlsStep.CIPHERS:
        raise raw.error(
            f"OpenSSL selects no cipher from {options.ciphers!r} ({reason}).",
            sec.name,
            _written(sec, "SslCiphers"),
            "write an OpenSSL cipher string, e.g. ECDHE+AESGCM:ECDHE+CHACHA20 (openssl "
            "ciphers -v 'STRING' lists what it selects).",
        )
    if step is TlsStep.CLIENT_CA:
        raise raw.error(
            f"the CA file {options.client_ca} cannot be loaded ({reason}).",
            sec.name,
            _written(sec, "SslClientCA"),
            "give a PEM file of the CA certificates that issue the client certificates.",
        )
    raise raw.error(
        f"the certificate {cert} and key {key} cannot be loaded ({reason}).",
        sec.name,
        "SslCertificate",
        "give a PEM certificate and the PEM private key that belongs to it.",
    )


def _check_chain(
    raw: RawConfig, sec: RawSection, cert: Path, key: Path, options: TlsOptions
) -> None:
    """The chain must issue the certificate: a client that trusts only the chain's
    certificates accepts what the port sends (validity dates left aside: the chain is
    checked, not the calendar)."""
    server = server_tls_context(
        cert, key, dataclasses.replace(options, client_cert=ClientCert.NONE)
    )
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    client.load_verify_locations(cafile=options.chain)
    client.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN | _X509_V_FLAG_NO_CHECK_TIME
    try:
        handshake_in_memory(server, client)
    except ssl.SSLCertVerificationError as exc:
        raise raw.error(
            f"the chain {options.chain} does not issue the certificate {cert} "
            f"({exc.verify_message}).",
            sec.name,
            _written(sec, "SslCertificateCA"),
            "give the intermediate CA certificates of SslCertificate, the one that issued it "
            "first.",
        ) from None


def _check_ciphers(
    raw: RawConfig, sec: RawSection, cert: Path, key: Path, options: TlsOptions
) -> None:
    """A TLS 1.2 client offering every cipher must find one of SslCiphers that the
    certificate's key can serve (an ECDSA key serves no ECDHE-RSA cipher)."""
    server = server_tls_context(
        cert, key, dataclasses.replace(options, client_cert=ClientCert.NONE)
    )
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE
    client.maximum_version = ssl.TLSVersion.TLSv1_2
    client.set_ciphers("ALL:@SECLEVEL=0")
    try:
        handshake_in_memory(server, client)
    except ssl.SSLError as exc:
        reason = exc.reason or str(exc)
        raise raw.error(
            f"no cipher of {options.ciphers!r} can be used with the key {key} ({reason}).",
            sec.name,
            _written(sec, "SslCiphers"),
            "give ECDHE ciphers of the key's type: ECDSA ones for an EC key "
            "(ECDHE-ECDSA-AES128-GCM-SHA256), RSA ones for an RSA key "
            "(ECDHE-RSA-AES128-GCM-SHA256); DHE ciphers are never chosen (fwrest loads no DH "
            "parameters).",
        ) from None
