"""The OAuth2 settings of the example's HTTPS_REST port (FwData=oauth2.json).

``params()`` is called for every token request; it returns the clients, users (argon2
hashes here) and token lifetimes the port accepts.
"""

from __future__ import annotations

from typing import Any


def params() -> dict[str, Any]:
    return {
        "client_id": "example-app",
        "client_secret": "example-secret",
        "users": [
            {
                "username": "grace",
                # argon2id hash of "hopper"
                "password": "$argon2id$v=19$m=65536,t=3,p=4$/M42iNhtu/+HFnoOgPMXYw$wJ2CK95SgmfQXOOIoXQDo10DChduGN1zsMZsQg1G+Ms",
            },
        ],
        "types": [{"grant_type": "password"}, {"grant_type": "refresh_token"}],
        "access_expires": "15m",
        "refresh_expires": "Date()+1",
    }


def public_paths() -> list[str]:
    """Paths of the HTTPS_REST port that need no token."""
    return ["/hello", "/fw/healthcheck"]
