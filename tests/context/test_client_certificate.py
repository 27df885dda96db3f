"""``rest.getClientCertificate()`` (SPEC 11.2, docs/decisions.md "TLS options") for awkward names:
each certificate goes through a real in-memory TLS handshake, the server's ``getpeercert()`` becomes
the fields, and cryptography's reading gives the expected values."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path
from typing import Any

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from fwrest.config.tls import handshake_in_memory
from fwrest.context.certs import certificate_fields

NOT_AFTER = datetime.datetime(2031, 2, 3, 4, 5, 6, tzinfo=datetime.UTC)
FIELDS = {"issuer": "O=Odd Names CA,C=DE", "not_after": "2031-02-03T04:05:06Z"}


class Issuer:
    """A CA made with cryptography, so that any subject can be issued."""

    def __init__(self) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = name((NameOID.COUNTRY_NAME, "DE"), (NameOID.ORGANIZATION_NAME, "Odd Names CA"))
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )

    def issue(
        self, subject: x509.Name, sans: list[x509.GeneralName], serial: int
    ) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(serial)
            .not_valid_before(NOT_AFTER - datetime.timedelta(days=3650))
            .not_valid_after(NOT_AFTER)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        pkcs8 = serialization.PrivateFormat.PKCS8
        key_pem = key.private_bytes(serialization.Encoding.PEM, pkcs8, serialization.NoEncryption())
        return cert.public_bytes(serialization.Encoding.PEM), key_pem


def presented(tmp_path: Path, issuer: Issuer, cert_pem: bytes, key_pem: bytes) -> Any:
    """What a server that asks for a client certificate decodes of this one."""
    server_ca = trustme.CA()
    server_cert = server_ca.issue_cert("localhost")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_cert.configure_cert(server)
    server.verify_mode = ssl.CERT_REQUIRED
    server.load_verify_locations(
        cadata=issuer.cert.public_bytes(serialization.Encoding.PEM).decode()
    )
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False  # the server's certificate is still verified
    server_ca.configure_trust(client)
    (tmp_path / "c.pem").write_bytes(cert_pem)
    (tmp_path / "c.key").write_bytes(key_pem)
    client.load_cert_chain(tmp_path / "c.pem", tmp_path / "c.key")
    return handshake_in_memory(server, client).getpeercert()


def name(*attributes: tuple[x509.ObjectIdentifier, str]) -> x509.Name:
    return x509.Name([x509.NameAttribute(oid, value) for oid, value in attributes])


ODD = {
    "a comma": "Acme, Inc.",
    "a plus": "a+b",
    "a leading hash": "#1",
    "a trailing space": "ends with a space ",
    "a leading space": " starts with a space",
    "quotes and backslash": 'say "hi" \\ bye',
    "angles and semicolon": "<x>;y",
    "an equals sign": "a=b",
    "not ASCII": "Jürgen Ørsted 山田",
}


@pytest.mark.parametrize("case", ODD)
def test_subject_names_are_rfc4514_strings(case: str, tmp_path: Path) -> None:
    issuer = Issuer()
    country, organization = (NameOID.COUNTRY_NAME, "FR"), (NameOID.ORGANIZATION_NAME, "Clients")
    subject = name(country, organization, (NameOID.COMMON_NAME, ODD[case]))
    fields = certificate_fields(presented(tmp_path, issuer, *issuer.issue(subject, [], 7)))
    assert fields["subject"] == subject.rfc4514_string()
    assert fields["issuer"] == issuer.name.rfc4514_string() == "O=Odd Names CA,C=DE"


def test_a_multi_valued_name_and_every_kind_of_alternative_name(tmp_path: Path) -> None:
    issuer = Issuer()
    rdn, attribute = x509.RelativeDistinguishedName, x509.NameAttribute
    cn_uid = [attribute(NameOID.COMMON_NAME, "ada"), attribute(NameOID.USER_ID, "u-1")]
    subject = x509.Name([rdn([attribute(NameOID.ORGANIZATION_NAME, "O1")]), rdn(cn_uid)])
    sans: list[x509.GeneralName] = [
        x509.DNSName("ada.example.org"),
        x509.IPAddress(ipaddress.ip_address("10.0.0.7")),
        x509.IPAddress(ipaddress.ip_address("2001:db8::1")),
        x509.RFC822Name("ada@example.org"),
        x509.UniformResourceIdentifier("spiffe://example.org/ada"),
    ]
    cert_pem, key_pem = issuer.issue(subject, sans, 0x00FF_0102)
    fields = certificate_fields(presented(tmp_path, issuer, cert_pem, key_pem))
    names = ["DNS:ada.example.org", "IP:10.0.0.7", "IP:2001:db8::1", "email:ada@example.org"]
    want_sans = [*names, "URI:spiffe://example.org/ada"]
    assert fields == {
        **FIELDS,
        "subject": subject.rfc4514_string(),
        "serial": "FF0102",
        "sans": want_sans,
    }
    assert fields["subject"] in ("CN=ada+UID=u-1,O=O1", "UID=u-1+CN=ada,O=O1")


def test_each_call_gives_a_new_dict(tmp_path: Path) -> None:
    issuer = Issuer()
    decoded = presented(
        tmp_path, issuer, *issuer.issue(name((NameOID.COMMON_NAME, "ada")), [], 0x0102)
    )
    first = certificate_fields(decoded)
    first["sans"].append("DNS:changed")
    first["subject"] = "changed"
    want = {**FIELDS, "subject": "CN=ada", "serial": "0102", "sans": []}
    assert certificate_fields(decoded) == want
