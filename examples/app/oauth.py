"""The OAuth2 settings of the example's HTTPS_REST port (FwData=oauth2.json).

``params()`` is called for every token request; it returns the clients, users (argon2
hashes here) and token lifetimes the port accepts.

Besides ``example-app`` (the password grant), two clients of the authorization code grant
with PKCE (docs/authorization-code.md): ``example-native``, a public client (a browser or
native app: no secret) that comes back to the example's own page on loopback, and
``example-web``, a confidential one (a server-side web app with its secret).
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
        "client": [
            {
                "client_id": "example-native",
                "public": True,
                # loopback: any port of 127.0.0.1 (RFC 8252 7.3); the example's own page
                "redirect_uris": ["http://127.0.0.1/app/callback.html"],
            },
            {
                "client_id": "example-web",
                "client_secret": "example-web-secret",
                "redirect_uris": ["https://app.example.com/callback"],
            },
        ],
        "types": [
            {"grant_type": "password"},
            {"grant_type": "refresh_token"},
            {"grant_type": "authorization_code"},
        ],
        "access_expires": "15m",
        "refresh_expires": "Date()+1",
    }


def public_paths() -> list[str]:
    """Paths of the HTTPS_REST port that need no token."""
    return ["/hello", "/fw/healthcheck"]
