"""Create a local certificate authority and a certificate for 127.0.0.1/localhost if absent.

The example's HTTPS port uses certs/server.crt and certs/server.key; curl trusts them with
``--cacert examples/certs/ca.pem``.
"""

from __future__ import annotations

from pathlib import Path

import trustme

CERTS = Path(__file__).resolve().parent / "certs"


def main() -> None:
    if (CERTS / "server.crt").is_file() and (CERTS / "server.key").is_file():
        return
    CERTS.mkdir(exist_ok=True)
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ca.cert_pem.write_to_path(str(CERTS / "ca.pem"))
    cert.private_key_pem.write_to_path(str(CERTS / "server.key"))
    cert.cert_chain_pems[0].write_to_path(str(CERTS / "server.crt"))
    for extra in cert.cert_chain_pems[1:]:
        with (CERTS / "server.crt").open("ab") as fh:
            fh.write(extra.bytes())
    (CERTS / "server.key").chmod(0o600)
    print(f"created a test CA and a certificate for 127.0.0.1 in {CERTS}")


if __name__ == "__main__":
    main()
