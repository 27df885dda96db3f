"""The client's certificate as ``rest.getClientCertificate()`` gives it (SPEC 11.2), from the
mapping the TLS layer decoded at the connection's handshake (``SSLSocket.getpeercert()``).

The shape is decided in docs/decisions.md ("Client certificates"): names as RFC 4514 strings,
the serial as OpenSSL prints it, the expiry in ISO 8601 (UTC), the alternative names as
``TYPE:value``.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import ssl
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

__all__ = ["THUMBPRINT", "certificate_fields", "rfc4514", "thumbprint", "with_thumbprint"]

# the key under which the engine adds the certificate's SHA-256 thumbprint to the decoded
# mapping (RFC 8705 3.1's name for it): computed once per connection, read by the bearer
# check of certificate-bound tokens (SPEC 16.2, auth/oauth2/mtls.py)
THUMBPRINT = "x5t#S256"

# RFC 4514 3: the attribute types a string representation names by their short names
_SHORT = {
    "commonName": "CN",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
# RFC 4514 2.4: escaped wherever they are in a value ("=" may be and is not, as cryptography
# writes it)
_SPECIAL = set(',+"\\<>;')


def _escape(value: str) -> str:
    """An attribute value escaped as RFC 4514 2.4 says."""
    out = "".join("\\" + c if c in _SPECIAL else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out.replace("\x00", "\\00")


def rfc4514(name: object) -> str:
    """A distinguished name from ``getpeercert()``'s nested tuples (relative names of
    ``(type, value)`` pairs, in the certificate's order), as RFC 4514 writes it: most specific
    first.

    >>> rfc4514(((("countryName", "DE"),), (("organizationName", "Acme, Inc"),),
    ...          (("commonName", "ada"),)))
    'CN=ada,O=Acme\\\\, Inc,C=DE'
    """
    if not isinstance(name, tuple):
        return ""
    rdns = []
    for rdn in reversed(name):
        pairs = rdn if isinstance(rdn, tuple) else ()
        rdns.append(
            "+".join(
                f"{_SHORT.get(str(pair[0]), str(pair[0]))}={_escape(str(pair[1]))}"
                for pair in pairs
                if isinstance(pair, tuple) and len(pair) == 2
            )
        )
    return ",".join(rdns)


def _not_after(value: object) -> str:
    if not isinstance(value, str):
        return ""
    try:
        seconds = ssl.cert_time_to_seconds(value)
    except ValueError:
        return value
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _alt_name(kind: str, value: Any) -> str:
    if kind == "IP Address":
        try:
            return f"IP:{ipaddress.ip_address(str(value).strip())}"
        except ValueError:
            return f"IP:{str(value).strip()}"
    if kind == "DirName":
        return f"DirName:{rfc4514(value)}"
    return f"{kind}:{value}"


def certificate_fields(cert: Mapping[str, object]) -> dict[str, Any]:
    """``{"subject", "issuer", "serial", "not_after", "sans"}`` of a decoded certificate
    (a new dict each call: nothing a handler does to it reaches another request).

    >>> certificate_fields({"subject": ((("commonName", "ada"),),), "issuer": (),
    ...     "serialNumber": "0A1B", "notAfter": "Jun  1 12:00:00 2030 GMT",
    ...     "subjectAltName": (("email", "ada@example.org"), ("IP Address", "127.0.0.1"))})
    ... # doctest: +NORMALIZE_WHITESPACE
    {'subject': 'CN=ada', 'issuer': '', 'serial': '0A1B', 'not_after': '2030-06-01T12:00:00Z',
     'sans': ['email:ada@example.org', 'IP:127.0.0.1']}
    """
    sans = cert.get("subjectAltName")
    return {
        "subject": rfc4514(cert.get("subject")),
        "issuer": rfc4514(cert.get("issuer")),
        "serial": str(cert.get("serialNumber", "")),
        "not_after": _not_after(cert.get("notAfter")),
        "sans": [
            _alt_name(str(kind), value) for kind, value in (sans if isinstance(sans, tuple) else ())
        ],
    }


def thumbprint(der: bytes) -> str:
    """The ``x5t#S256`` of a certificate (RFC 8705 3.1): SHA-256 of its DER form, base64url
    without padding.

    >>> thumbprint(b"not a certificate")
    'RyCcm3r4Od5p6anNYl6RgsGtY9rnntiKLdaA_jQhhiA'
    """
    digest = hashlib.sha256(der).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def with_thumbprint(
    decoded: Mapping[str, object] | None, der: bytes | None
) -> Mapping[str, object] | None:
    """The decoded certificate of a connection with its :data:`THUMBPRINT` added (None when
    the client sent none); the engine calls it once, when the connection is made."""
    if not decoded or not der:
        return decoded or None
    return {**decoded, THUMBPRINT: thumbprint(der)}
