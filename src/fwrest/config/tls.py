"""The TLS context of a port, built in this one place (SPEC 2, 11.2): by the loader to check
the files and options (``fwrest check``), and by each worker to serve.

Owns: the TLS options record, the context builder, and which of its steps failed (the loader
turns that into a message naming the key). Must not know: config files, sockets.
"""

from __future__ import annotations

import enum
import os
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "DEFAULT_CIPHERS",
    "TLS_VERSIONS",
    "ClientCert",
    "TlsOptions",
    "TlsSetupError",
    "TlsStep",
    "handshake_in_memory",
    "server_tls_context",
]

# TLS 1.2's ciphers without SslCiphers (app ports and the monitor): the ECDHE ciphers of
# Mozilla's "intermediate" profile (AES-GCM or ChaCha20-Poly1305), no CBC suite. Its DHE-RSA
# ones are left out: they need DH parameters, which fwrest does not load (OpenSSL would never
# choose them). TLS 1.3's suites are OpenSSL's either way (set_ciphers does not touch them).
DEFAULT_CIPHERS = ":".join(
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "ECDHE-RSA-AES128-GCM-SHA256",
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "ECDHE-RSA-AES256-GCM-SHA384",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "ECDHE-RSA-CHACHA20-POLY1305",
    )
)

# SslMinVersion, as written (case-insensitive), -> OpenSSL's version
TLS_VERSIONS = {"tlsv1.2": ssl.TLSVersion.TLSv1_2, "tlsv1.3": ssl.TLSVersion.TLSv1_3}


class ClientCert(enum.IntEnum):
    """``SslClientCert``: whether a client presents a certificate."""

    NONE = 0  # none is asked for
    OPTIONAL = 1  # asked for; one that is sent must chain to SslClientCA
    REQUIRED = 2  # mutual TLS: a client without one fails the handshake


@dataclass(frozen=True, slots=True)
class TlsOptions:
    """The TLS options of a port beside its certificate and key (SPEC 11.2), validated at load.

    The pass phrase is the resolved secret (``env:``/``file:`` already read): it never shows in
    a ``repr``, hence in no log or message built from this record.
    """

    pass_phrase: bytes | None = field(default=None, repr=False)
    chain: Path | None = None  # SslCertificateCA: sent after the certificate
    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    ciphers: str | None = None  # OpenSSL cipher string for TLS 1.2 (None: DEFAULT_CIPHERS)
    client_cert: ClientCert = ClientCert.NONE
    client_ca: Path | None = None  # SslClientCA: the CAs client certificates chain to

    def describe(self) -> str:
        """How ``fwrest check`` names a TLS port's options (never the pass phrase).

        >>> strict = TlsOptions(min_version=ssl.TLSVersion.TLSv1_3, client_cert=ClientCert(2))
        >>> strict.describe()
        'TLS, TLSv1.3 only, client certificate required'
        """
        parts = ["TLS"]
        if self.min_version is ssl.TLSVersion.TLSv1_3:
            parts.append("TLSv1.3 only")
        if self.client_cert is not ClientCert.NONE:
            parts.append(f"client certificate {self.client_cert.name.lower()}")
        return ", ".join(parts)


class TlsStep(enum.Enum):
    """The step of :func:`server_tls_context` that failed."""

    ENCRYPTED = enum.auto()  # the key asks for a pass phrase and none is configured
    PASS_PHRASE = enum.auto()  # the configured pass phrase does not open the key
    CERTIFICATE = enum.auto()  # the certificate, its chain or its key cannot be loaded
    CIPHERS = enum.auto()  # OpenSSL selects no cipher from SslCiphers
    CLIENT_CA = enum.auto()  # SslClientCA cannot be loaded


class TlsSetupError(ValueError):
    """Building a TLS context failed at ``step``; ``reason`` is OpenSSL's (or the system's)
    word for it, never the pass phrase."""

    def __init__(self, step: TlsStep, reason: str) -> None:
        super().__init__(f"{step.name}: {reason}")
        self.step = step
        self.reason = reason


def _reason(exc: BaseException) -> str:
    """OpenSSL's reason (``KEY_VALUES_MISMATCH``), else the error's own text."""
    reason = getattr(exc, "reason", None)
    if reason:
        return str(reason)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return (str(exc.args[0]) if len(exc.args) == 1 else str(exc)).rstrip(".")


class _PassPhrase:
    """The ``password`` callback of ``load_cert_chain``: instead of OpenSSL's prompt on the
    terminal (a service would wait on it), the configured pass phrase or an error; it
    remembers whether OpenSSL asked (an encrypted key), which tells a wrong pass phrase from a
    bad file."""

    def __init__(self, secret: bytes | None) -> None:
        self.secret = secret
        self.asked = False

    def __call__(self) -> bytes:
        self.asked = True
        if self.secret is None:
            raise TlsSetupError(TlsStep.ENCRYPTED, "the private key is encrypted")
        return self.secret


def _load_certificate(
    ctx: ssl.SSLContext, certificate: Path, key: Path, options: TlsOptions
) -> None:
    password = _PassPhrase(options.pass_phrase)
    try:
        if options.chain is None:
            ctx.load_cert_chain(certificate, key, password=password)
            return
        # OpenSSL sends the certificates of the certificate file, in order: the chain is
        # appended to a copy (certificates only: public, the key stays in its own file)
        joined = certificate.read_bytes().rstrip(b"\n") + b"\n" + options.chain.read_bytes()
        fd, name = tempfile.mkstemp(prefix="fwrest-chain-", suffix=".pem")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(joined)
            ctx.load_cert_chain(name, key, password=password)
        finally:
            os.unlink(name)
    except TlsSetupError:
        raise
    except (ssl.SSLError, OSError) as exc:
        mismatch = isinstance(exc, ssl.SSLError) and exc.reason == "KEY_VALUES_MISMATCH"
        if password.asked and options.pass_phrase is not None and not mismatch:
            # OpenSSL says only "PEM lib" when the decryption fails
            raise TlsSetupError(TlsStep.PASS_PHRASE, "it does not decrypt the key") from None
        raise TlsSetupError(TlsStep.CERTIFICATE, _reason(exc)) from None


def server_tls_context(
    certificate: Path, key: Path, options: TlsOptions | None = None
) -> ssl.SSLContext:
    """The server TLS context of a port.

    Args:
        certificate: the PEM certificate (it may hold its chain already).
        key: its PEM private key (encrypted: ``options.pass_phrase`` opens it).
        options: the options of SPEC 11.2 (None: the defaults).

    Raises:
        TlsSetupError: a step failed (``step`` says which).
    """
    options = options or TlsOptions()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = options.min_version
    try:
        ctx.set_ciphers(DEFAULT_CIPHERS if options.ciphers is None else options.ciphers)
    except ssl.SSLError as exc:
        raise TlsSetupError(TlsStep.CIPHERS, _reason(exc)) from None
    _load_certificate(ctx, certificate, key, options)
    if options.client_cert is not ClientCert.NONE:
        assert options.client_ca is not None  # the loader requires it
        try:
            ctx.load_verify_locations(cafile=options.client_ca)
        except (ssl.SSLError, OSError) as exc:
            raise TlsSetupError(TlsStep.CLIENT_CA, _reason(exc)) from None
        required = options.client_cert is ClientCert.REQUIRED
        ctx.verify_mode = ssl.CERT_REQUIRED if required else ssl.CERT_OPTIONAL
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def handshake_in_memory(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> ssl.SSLObject:
    """A TLS handshake between two contexts, in memory (the loader's checks of a chain and
    of ciphers): the server's side once it completed.

    Raises:
        ssl.SSLError: the handshake failed (``SSLCertVerificationError``: the client refused
            the server's certificate).
    """
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(to_client, to_server)
    server_in, server_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_ctx.wrap_bio(server_in, server_out, server_side=True)
    for _ in range(8):  # a TLS 1.2 handshake takes two round trips, 1.3 one
        done = 0
        for side in (client, server):
            try:
                side.do_handshake()
                done += 1
            except ssl.SSLWantReadError:
                pass
        server_in.write(to_server.read())
        to_client.write(server_out.read())
        if done == 2:
            return server
    raise ssl.SSLError("the handshake did not complete")
