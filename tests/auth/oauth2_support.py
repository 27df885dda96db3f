"""Helpers of the OAuth2 tests: certificates, oAuth2 sections, port clients, JWT helpers, ``expect``
and ``assert_error``. A port is reached over real TLS on a real ``fwrest serve``
(:func:`serve_oauth`) or in process through ``fwrest.testing.Client``, the same pipeline without
socket or handshake (:func:`local_oauth`); nothing is mocked."""

from __future__ import annotations

import base64
import contextlib
import json
import re
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Generic, Protocol, Self, TypeVar
from urllib.parse import quote, quote_plus

import httpx
import jwt
import pytest
import trustme

from fwrest.testing import Client
from tests.conftest import APP_SOURCE, ServerProcess, free_port, serving, tls_server
from tests.conftest import issue_certs as issue_certs
from tests.conftest import wait_for as wait_for

TOKEN = "/fw/oauth2/token"
BEARER_REALM = 'Bearer realm="Access to REST"'
# a 401 without a token: the realm and the resource metadata's URL (SPEC 4.2, 16.3)
MISSING_CHALLENGE = re.compile(
    re.escape(BEARER_REALM)
    + r', resource_metadata="https://[^"/]+/\.well-known/oauth-protected-resource(/[^"]*)?"'
)
TOKEN_KEYS = {"access_token", "refresh_token", "scope", "token_type", "expires_in"}
# the client and the user most tests use (their onAuthparams entries)
WEB = {"client_id": "web", "client_secret": "Web-Secret-9q"}
ADA = {"username": "ada", "password": "Ada-Pw-7731"}


def params_source(name: str = "params", **params: Any) -> str:
    """The source of an app module's ``onAuthparams`` function ``name`` returning ``params``
    (values written as Python literals), to add to an app's source.

    >>> print(params_source(**WEB, access_expires="10m").strip())
    def params():
        return {'client_id': 'web', 'client_secret': 'Web-Secret-9q', 'access_expires': '10m'}
    """
    return f"\n\ndef {name}():\n    return {params!r}\n"


# key set tests (test_keys.py, test_jwks_clients.py): ten-minute tokens, a port per algorithm
KEYS_APP = APP_SOURCE + params_source(**WEB, users=[ADA], access_expires="10m")
KEYS_ALGS = {"ED": "EdDSA", "EC": "ES256", "RSA": "RS256"}
KEYS_ADA = ("ada", "Ada-Pw-7731")
NO_THROTTLE = 1_000_000  # many failed grants from one address must not turn into 429s here


def oauth_section(certs: dict[str, Path], locations: str = "ROOT", **auth: Any) -> dict[str, Any]:
    """An oAuth2 server section on a free port; ``auth`` goes into ``FwData.Authorization``."""
    authorization = {"scheme": "oAuth2", "onAuth": "", "maxFailures": NO_THROTTLE, **auth}
    return tls_server(certs, Locations=locations, FwData={"Authorization": authorization})


def client_context(certs: dict[str, Path]) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certs["ca"]))


class OAuthPort:
    """A client of one oAuth2 port: ``http`` reaches it, ``base`` is its location (``/rest``)."""

    def __init__(self, server: str, http: httpx.Client, base: str) -> None:
        self.server = server
        self.http = http
        self.base = base

    @property
    def token_url(self) -> str:
        return self.base + TOKEN

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Self:
        """The port, its service started (a port in this process: started when made)."""
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def post(self, data: dict[str, str] | None = None, **kw: Any) -> httpx.Response:
        return self.http.post(self.token_url, data=data, **kw)

    def grant(self, username: str, password: str, **extra: str) -> httpx.Response:
        """A password grant by POST with a form body."""
        return self.post(
            {"grant_type": "password", "username": username, "password": password, **extra}
        )

    def tokens(self, username: str, password: str, **extra: str) -> dict[str, Any]:
        return expect(self.grant(username, password, **extra)).json()

    def refresh(self, refresh_token: str, **extra: str) -> httpx.Response:
        return self.post({"grant_type": "refresh_token", "refresh_token": refresh_token, **extra})

    def get(self, path: str, token: str | None = None, **kw: Any) -> httpx.Response:
        headers = dict(kw.pop("headers", {}))
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return self.http.get(self.base + path, headers=headers, **kw)


class OAuth(OAuthPort):
    """An HTTPS client of one oAuth2 port of a running service."""

    def __init__(self, proc: ServerProcess, server: str, certs: dict[str, Path]) -> None:
        self.proc = proc
        self.certs = certs
        self.ctx = client_context(certs)
        super().__init__(server, httpx.Client(verify=self.ctx, timeout=15), proc.url(server))


class LocalOAuth(OAuthPort):
    """An in-process oAuth2 port's client (``https://``, no TLS); its keys exist once it is made."""

    def __init__(self, config: Path, server: str, location: str = "/rest") -> None:
        super().__init__(server, Client(config, server=server).__enter__(), location)


P = TypeVar("P", bound=OAuthPort)


class Ports(Generic[P]):
    """A client of each oAuth2 port (``svc["NAME"]``), made on first use, closed by ``close``."""

    def __init__(self, make: Callable[[str], P]) -> None:
        self._make = make
        self._ports: dict[str, P] = {}

    def __getitem__(self, name: str) -> P:
        if name not in self._ports:
            self._ports[name] = self._make(name)
        return self._ports[name]

    def close(self) -> None:
        for port in self._ports.values():
            port.close()


class LocalService(Ports[LocalOAuth]):
    """oAuth2 ports in process, a :class:`LocalOAuth` each; the log is ``server.log``."""

    def __init__(self, config: Path, certs: dict[str, Path]) -> None:
        super().__init__(lambda name: LocalOAuth(config, name))
        self.config = config
        self.certs = certs
        self.folder = config.parent

    def log(self) -> str:
        path = self.folder / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""


def local_oauth(
    ca: trustme.CA, folder: Path, write_service: Callable[[Path, dict[str, Path]], Path]
) -> Iterator[LocalService]:
    """``yield from local_oauth(...)``: ``write_service(folder, certs)``'s service in process."""
    certs = issue_certs(ca, folder / "certs")
    with contextlib.closing(LocalService(write_service(folder, certs), certs)) as service:
        yield service


class OAuthService(Ports[OAuth]):
    """A running service of oAuth2 ports: process, folder, an :class:`OAuth` client per port."""

    def __init__(self, proc: ServerProcess, certs: dict[str, Path]) -> None:
        super().__init__(lambda name: OAuth(proc, name, certs))
        self.proc = proc
        self.certs = certs
        self.folder = proc.config.parent


def serve_oauth(
    ca: trustme.CA,
    folder: Path,
    write_service: Callable[[Path, dict[str, Path]], Path],
    workers: int = 1,
) -> Iterator[OAuthService]:
    """``yield from serve_oauth(...)``: ``fwrest serve --workers WORKERS`` of ``write_service``."""
    certs = issue_certs(ca, folder / "certs")
    config = write_service(folder, certs)
    with (
        serving(config, workers=workers) as proc,
        contextlib.closing(OAuthService(proc, certs)) as service,
    ):
        yield service


def local_service(
    write_service: Callable[[Path, dict[str, Path]], Path], folder: str, name: str = "svc"
) -> Any:
    """A module's fixture ``name``: :func:`local_oauth` of ``write_service`` in a temporary
    folder named ``folder``, shared by the module's tests."""

    @pytest.fixture(scope="module", name=name)
    def service(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalService]:
        yield from local_oauth(ca, tmp_path_factory.mktemp(folder), write_service)

    return service


def served_service(
    write_service: Callable[[Path, dict[str, Path]], Path],
    folder: str,
    name: str = "served",
    workers: int = 1,
) -> Any:
    """A module's fixture ``name``: :func:`serve_oauth` of ``write_service`` (``fwrest serve
    --workers WORKERS``) in a temporary folder named ``folder``, shared by the module's tests."""

    @pytest.fixture(scope="module", name=name)
    def service(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthService]:
        yield from serve_oauth(ca, tmp_path_factory.mktemp(folder), write_service, workers)

    return service


def uvicorn_app(folder: Path, module: str, source: str, env: dict[str, str]) -> Iterator[str]:
    """``source`` under uvicorn with ``env``; its URL once ``/orders`` is 401; stderr printed."""
    (folder / f"{module}.py").write_text(source)
    port = free_port()
    with (folder / "stderr.log").open("wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "uvicorn", f"{module}:app", "--port", str(port)],
                                cwd=folder, env={**env, "PATH": "/usr/bin:/bin"},
                                stdout=subprocess.DEVNULL, stderr=stderr)  # fmt: skip
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(url + "/orders", timeout=5).status_code == 401
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, 30, f"the ASGI app {module}")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        print((folder / "stderr.log").read_text(errors="replace")[-3000:])


def signing_key(config_dir: Path) -> bytes:
    """The service's signing key: ``<config dir>/.fwrest/signing.key``, base64url text."""
    text = (config_dir / ".fwrest" / "signing.key").read_text().strip()
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def claims_of(svc: LocalService, access_token: str) -> dict[str, Any]:
    """An access token's claims, signature checked (the audience: tests/auth/test_audience.py)."""
    claims: dict[str, Any] = jwt.decode(
        access_token, signing_key(svc.folder), algorithms=["HS256"], options={"verify_aud": False}
    )
    return claims


def jwks_kids(port: OAuthPort) -> list[str]:
    """The key ids the port's JWK Set (``/fw/oauth2/jwks``) publishes."""
    answer = expect(port.http.get(port.base + "/fw/oauth2/jwks"))
    return [key["kid"] for key in answer.json()["keys"]]


def expire_retired_key(folder: Path, kid: str | None = None, alg: str = "EdDSA") -> dict[str, Any]:
    """A retired key of the service's key set file (``kid``, else the last of ``alg``) made one
    whose tokens' lifetime is over (an operator's edit, written whole as fwrest writes it): the
    set drops it, as a leaked key. Its entry."""
    path = folder / ".fwrest" / "keyset.json"
    doc = json.loads(path.read_text())
    retired = [k for k in doc["keys"] if k["retired"] is not None]
    if kid is None:
        entry = [k for k in retired if k["alg"] == alg][-1]
    else:
        [entry] = [k for k in retired if k["kid"] == kid]
    entry["retired"] = time.time() - 3600
    edited = path.with_name("keyset.edited")
    edited.write_text(json.dumps(doc))
    edited.replace(path)
    return dict(entry)


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def unsigned_jwt(header: dict[str, Any], claims: dict[str, Any]) -> str:
    """A JWT with ``alg: none`` style empty signature, built by hand."""
    head = b64url(json.dumps(header).encode())
    body = b64url(json.dumps(claims).encode())
    return f"{head}.{body}."


def sign(claims: dict[str, Any], key: bytes, headers: dict[str, Any] | None = None,
         algorithm: str = "HS256") -> str:  # fmt: skip
    return jwt.encode(claims, key, algorithm=algorithm, headers=headers or {"typ": "at+jwt"})


def fresh_claims(
    sub: str = "ada", ttl: int = 600, aud: object = "OAUTH", iss: str = "https://unknown.invalid"
) -> dict[str, Any]:
    """What fwrest signs for ``sub`` on section ``aud`` (SPEC 7.1) as ``iss`` (SPEC 12.2)."""
    now = int(time.time())
    return {"iss": iss, "aud": aud, "sub": sub, "client_id": "web", "iat": now, "exp": now + ttl,
            "jti": "j" * 32, "scope": "default"}  # fmt: skip


def issuer_of(port: OAuthPort) -> str:
    """The issuer of a port's location, as its metadata route names it (SPEC 12.2)."""
    return str(expect(port.http.get(port.base + "/fw/oauth2/metadata")).json()["issuer"])


def error_of(response: httpx.Response) -> str:
    return str(response.json().get("error"))


def assert_invalid_token(response: httpx.Response) -> None:
    """401 with ``error="invalid_token"`` and the SPEC's body, with a reason in it."""
    assert response.status_code == 401, response.text
    challenge = response.headers.get("www-authenticate", "")
    assert challenge.startswith(BEARER_REALM), challenge
    assert 'error="invalid_token"' in challenge, challenge
    body = response.json()
    assert set(body) == {"code", "detailedMessage", "message"}, body
    assert body["code"] == 401 and body["message"] == "Unauthorized", body
    assert body["detailedMessage"], body


def assert_missing_token(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    [challenge] = response.headers.get_list("www-authenticate")
    # SPEC 16.3: the realm, then the location's protected resource metadata (RFC 9728 5.1)
    assert MISSING_CHALLENGE.fullmatch(challenge), challenge
    body = response.json()
    assert body["code"] == 401 and body["message"] == "Unauthorized", body


def encoded_forms(secret: str) -> set[str]:
    """The forms a secret may take in a log line: as is, percent- and form-encoded."""
    return {secret, quote(secret, safe=""), quote_plus(secret), quote(secret)}


# state shared by workers and hosts (tests/e2e/): /hello answers the worker's pid
PID_USERS = {"ada": "Ada-Pw-7731", "bob": "Bob-Pw-2207", "cy": "Cy-Pw-1188", "dee": "Dee-Pw-4620"}
PID_CLIENT = ("web", "Web-Secret-9q")
PID_APP = f"""
import os

from fwrest import get

USERS = {PID_USERS!r}


@get("/hello", description="which worker answered")
def hello():
    return {{"pid": os.getpid()}}


def params():
    return {{
        "client_id": "web",
        "client_secret": "Web-Secret-9q",
        "users": [{{"username": u, "password": p}} for u, p in USERS.items()],
        "access_expires": "1h",
    }}
"""


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class WorkersHost:
    """``--workers N`` of :data:`PID_APP` (``OAUTH``): grants of ``users``, a client per worker."""

    def __init__(self, proc: ServerProcess, ca_file: Path, workers: int,
                 users: dict[str, str] = PID_USERS, client: tuple[str, str] = PID_CLIENT) -> None:  # fmt: skip
        self.proc, self.ca_file = proc, ca_file
        self.ctx = ssl.create_default_context(cafile=ca_file)
        self.base = proc.url("OAUTH")  # https://127.0.0.1:{port}/rest
        self.users, self.client_auth, self.workers = users, client, workers

    def client(self) -> httpx.Client:
        return httpx.Client(verify=self.ctx, timeout=15)

    def tokens(self, user: str) -> dict[str, Any]:
        form = {"grant_type": "password", "username": user, "password": self.users[user]}
        with self.client() as http:
            answer = http.post(self.base + TOKEN, data=form, auth=self.client_auth)
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    def per_worker(self, ask: Callable[[httpx.Client], int]) -> dict[int, httpx.Client]:
        """pid -> a client kept alive on that worker (``ask``: the pid a new client reaches)."""
        found: dict[int, httpx.Client] = {}
        for _ in range(60):
            http = self.client()
            pid = ask(http)
            if pid in found:
                http.close()
            else:
                found[pid] = http
            if len(found) == self.workers:
                return found
        raise AssertionError(f"60 connections reached only the workers {sorted(found)}")

    def oauth_workers(self, token: str) -> dict[int, httpx.Client]:
        """:meth:`per_worker` by the pid ``/hello`` answers with the bearer ``token``."""
        return self.per_worker(
            lambda http: int(http.get(self.base + "/hello", headers=bearer(token)).json()["pid"])
        )


def assert_error(response: httpx.Response, error: str, status: int = 400) -> httpx.Response:
    """An OAuth2 error answer (RFC 6749 5.2) with ``status`` and ``error``; returns ``response``."""
    assert response.status_code == status, response.text
    assert error_of(response) == error, response.text
    return response


class Answer(Protocol):
    """An HTTP answer of httpx or requests."""

    @property
    def status_code(self) -> int: ...

    @property
    def text(self) -> str: ...


A = TypeVar("A", bound=Answer)


def expect(response: A, status: int = 200) -> A:
    """``response``, its status ``status`` (else the assertion shows its body)."""
    assert response.status_code == status, response.text
    return response
