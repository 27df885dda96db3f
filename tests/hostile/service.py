"""The service the hostile tests attack, and a raw wire client. ``fwrest serve --workers 2`` on
sqlite: ``basic`` (``HTTP_BASIC``, ``OnAuth`` ``app.on_auth``, ``healthcheck/ok`` public), ``oauth``
(``HTTPS_OAUTH``, trustme TLS, ``app.params``, ``onAuthNoCheckUri`` ``app.nocheck``: ``/public/*``,
``/items/:id``; ``healthcheck`` public), ``monitor`` (``[APP_MONITOR]``, no authorization).

``deadline_ms`` shortens the two application ports' header, body and handshake deadlines, so a
waiting request ends in 408 well inside the client's hang guard; None keeps the defaults for cases
waiting on none, so a starved worker (nice 10) never ends a request that arrived whole. Every secret
is a canary (``SECRETS`` and the tokens issued at start) searched in the logs; ``/smuggled/:name``
records calls in ``smuggled.log``."""

from __future__ import annotations

import base64
import contextlib
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import httpx
import psutil
import trustme

from tests.auth.oauth2_support import client_context, issue_certs, oauth_section
from tests.conftest import APP_SOURCE, ServerProcess, free_config, wait_for
from tests.server.rawhttp import RawSocket

__all__ = [
    "BASIC_PASSWORD", "BASIC_USER", "CLIENT_ID", "CLIENT_SECRET", "DEADLINE_MS", "KINDS",
    "OAUTH_PASSWORD", "OAUTH_USER", "SECRETS", "Answer", "HostileService", "Wire", "start_service",
]  # fmt: skip

BASIC_USER, BASIC_PASSWORD = "ada", "Hx-Basic-Pw-5nQ8"
RAISER_PASSWORD = "Hx-Raiser-Pw-2Lm4"  # OnAuth raises with this in its message
WRONG_PASSWORD = "Hx-Wrong-Pw-8Rr1"
CLIENT_ID, CLIENT_SECRET = "web", "Hx-Client-Secret-3Kp7"
OAUTH_USER, OAUTH_PASSWORD = "ada", "Hx-Oauth-Pw-9Zt2"
SECRETS = (BASIC_PASSWORD, RAISER_PASSWORD, WRONG_PASSWORD, CLIENT_SECRET, OAUTH_PASSWORD)

KINDS = ("basic", "oauth", "monitor")
SECTIONS = {"basic": "HTTP_BASIC", "oauth": "HTTPS_OAUTH", "monitor": "APP_MONITOR"}
DEADLINE_MS = 1500
BODY_LIMIT = 65536
NO_THROTTLE = 1_000_000
WIRE_TIMEOUT = 5.0  # the hang guard of every read (seconds)
# 5xx allowed besides an app's 500: 501 (transfer coding), 503 (store), 505 (HTTP/0.9, 2.0)
ALLOWED_5XX = {501, 503, 505}

HOSTILE_APP = (
    APP_SOURCE
    + """

from pathlib import Path as _Path

_HERE = _Path(__file__).resolve().parent


def on_auth(user, password):
    if user == "raiser":
        raise ValueError("the validator broke on " + password)
    return user == "ada" and password == "Hx-Basic-Pw-5nQ8"


def params():
    return {"client_id": "web", "client_secret": "Hx-Client-Secret-3Kp7", "username": "ada",
            "password": "Hx-Oauth-Pw-9Zt2", "access_expires": 600000, "refresh_expires": "Date()+1"}


def nocheck():
    return ["/public/*", "/items/:id"]


@get("/public/info")
def public_info():
    return {"public": "info"}


@get("/public/a/b")
def public_deep():
    return {"public": "deep"}


@get("/publicity")
def publicity():
    return {"protected": "publicity"}


@get("/admin/secret")
def admin_secret():
    return {"protected": "admin", "user": rest.getAuthUser()}


@get("/items/:id/owner")
def item_owner(id):
    return {"protected": "owner", "id": id}


@get("/q")
def query():
    return {"query": dict(rest.getQueryRequest()), "path": rest.getPathRequest()}


@get("/hdr/:name")
def header(name):
    return {"value": rest.getHeaderRequest().get(name)}


@get("/p/:value")
def path_param(value):
    return {"value": value}


def _smuggled(name):
    with (_HERE / "smuggled.log").open("a", encoding="utf-8") as fh:
        fh.write(name + "\\n")
    return {"smuggled": name}


@get("/smuggled/:name")
def smuggled_get(name):
    return _smuggled(name)


@post("/smuggled/:name")
def smuggled_post(name):
    return _smuggled(name)
"""
)


def _servers(
    certs: dict[str, Path], deadline_ms: int | None, keep_alive_ms: int | None
) -> dict[str, dict[str, Any]]:
    deadlines: dict[str, int] = {}
    if deadline_ms is not None:
        deadlines |= {"HeaderTimeout": deadline_ms, "BodyTimeout": deadline_ms,
                      "TlsHandshakeTimeout": deadline_ms}  # fmt: skip
    if keep_alive_ms is not None:
        deadlines["KeepAliveTimeout"] = keep_alive_ms
    oauth = oauth_section(certs, onAuthparams="app.params", onAuthNoCheckUri="app.nocheck")
    oauth["FwData"]["Authorization"]["maxFailures"] = NO_THROTTLE
    oauth["FwData"]["NativeRoutes"] = {"public": ["healthcheck"]}
    oauth.update(deadlines, MaxBodySize=BODY_LIMIT)
    auth = {"scheme": "basic", "OnAuth": "app.on_auth", "maxFailures": NO_THROTTLE}
    fw_data = {"Authorization": auth, "NativeRoutes": {"public": ["healthcheck/ok"]}}
    basic = {"HostName": "127.0.0.1", "Port": 0, "Locations": "ROOT", "MaxBodySize": BODY_LIMIT,
             **{k: v for k, v in deadlines.items() if not k.startswith("Tls")},
             "FwData": fw_data}  # fmt: skip
    return {"HTTP_BASIC": basic, "HTTPS_OAUTH": oauth}


@dataclass
class HostileService:
    proc: ServerProcess
    certs: dict[str, Path]
    tls: ssl.SSLContext
    access_token: str = ""
    refresh_token: str = ""
    signing_key: bytes = b""
    workers: set[int] = field(default_factory=set)
    issued: list[str] = field(default_factory=list)  # tokens issued while the corpus ran

    @property
    def folder(self) -> Path:
        return self.proc.config.parent

    def port(self, kind: str) -> int:
        return self.proc.ports[SECTIONS[kind]]

    def worker_pids(self) -> set[int]:
        with contextlib.suppress(psutil.NoSuchProcess):
            return {child.pid for child in psutil.Process(self.proc.pid).children()}
        return set()

    def alive(self) -> bool:
        return self.proc.proc.poll() is None

    def wire(self, kind: str, timeout: float = WIRE_TIMEOUT) -> Wire:
        return Wire(self.port(kind), tls=self.tls if kind == "oauth" else None, timeout=timeout)

    def grant(self) -> dict[str, Any]:
        """A password grant over HTTPS; its tokens join the secrets searched for in the logs."""
        with httpx.Client(verify=self.tls, timeout=10) as http:
            response = http.post(
                self.proc.url("HTTPS_OAUTH") + "/fw/oauth2/token",
                data={"grant_type": "password", "username": OAUTH_USER, "password": OAUTH_PASSWORD},
            )
        assert response.status_code == 200, response.text
        tokens: dict[str, Any] = response.json()
        self.issued += [tokens["access_token"], tokens["refresh_token"]]
        return tokens

    def fresh_refresh(self) -> str:
        return str(self.grant()["refresh_token"])

    def smuggled(self) -> list[str]:
        path = self.folder / "smuggled.log"
        return path.read_text(encoding="utf-8").split() if path.exists() else []

    def logs(self) -> str:
        return self.proc.log() + "\n" + self.proc.file_log()

    def secrets(self) -> list[str]:
        """Every secret the corpus used, in each form a log line could carry it."""
        out: set[str] = set()
        plain = [*SECRETS, self.access_token, self.refresh_token, *self.issued]
        basic = [f"{BASIC_USER}:{BASIC_PASSWORD}", f"raiser:{RAISER_PASSWORD}",
                 f"{BASIC_USER}:{WRONG_PASSWORD}", f"{CLIENT_ID}:{CLIENT_SECRET}"]  # fmt: skip
        for secret in plain:
            if secret:
                out |= {secret, quote(secret, safe=""), quote_plus(secret)}
                out.add(base64.b64encode(secret.encode()).decode())
        for pair in basic:
            out.add(base64.b64encode(pair.encode()).decode())
        return sorted(out)


def start_service(
    folder: Path,
    ca: trustme.CA,
    general: dict[str, Any] | None = None,
    deadline_ms: int | None = DEADLINE_MS,
    keep_alive_ms: int | None = None,
) -> HostileService:
    certs = issue_certs(ca, folder / "certs")
    config = free_config(
        folder,
        servers=_servers(certs, deadline_ms, keep_alive_ms),
        app=HOSTILE_APP,
        general=general,
        extra={
            "HTTPSERVER": {"StateStore": "sqlite"},
            "APP_MONITOR": {"Enable": 1, "HostName": "127.0.0.1", "Port": 0, "ApiPath": "/api"},
        },
    )
    proc = ServerProcess(config, workers=2).wait_ready()
    service = HostileService(proc, certs, client_context(certs))
    wait_for(lambda: len(service.worker_pids()) >= 2, 15, "two workers")
    service.workers = service.worker_pids()
    assert len(service.workers) == 2, service.workers
    tokens = service.grant()
    service.access_token, service.refresh_token = tokens["access_token"], tokens["refresh_token"]
    key_text = (folder / ".fwrest" / "signing.key").read_text().strip()
    service.signing_key = base64.urlsafe_b64decode(key_text + "=" * (-len(key_text) % 4))
    return service


# -- the wire --------------------------------------------------------------------------------------


@dataclass
class Answer:
    """One response as it came over the wire (``status`` None: the connection closed)."""

    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        name = name.lower()
        return next((v for k, v in self.headers if k.lower() == name), None)


class Malformed(AssertionError):
    """The server sent bytes that are not a well-formed HTTP/1.1 response."""


class Hang(AssertionError):
    """The server neither answered nor closed within the hang guard."""


class Wire(RawSocket):
    """Raw bytes out, well-formed responses in: ``read()`` gives the next final response (``100
    Continue`` collected in ``interim``) or None once closed, raises :class:`Hang` past the timeout
    and :class:`Malformed` on non-HTTP bytes; a refused TLS handshake counts as closed."""

    # a reset, any TLS error while reading, any error while sending: the server closed
    closed_on_send: tuple[type[OSError], ...] = (OSError,)
    closed_on_recv: tuple[type[OSError], ...] = (ConnectionResetError, ssl.SSLError)

    def __init__(self, port: int, tls: ssl.SSLContext | None = None, timeout: float = 5.0):
        self.timeout = timeout
        self.interim: list[int] = []
        super().__init__(port, timeout=timeout, tls=tls)

    def hang(self) -> Hang:
        return Hang(
            f"the server sent nothing for {self.timeout} s and kept the connection open; "
            f"buffered: {self.buffer[:200]!r}"
        )

    def read(self, head_only: bool = False) -> Answer | None:
        while True:
            answer = self.read_one(head_only)
            if answer is None or answer.status >= 200:
                return answer
            self.interim.append(answer.status)

    def read_one(self, head_only: bool) -> Answer | None:
        while b"\r\n\r\n" not in self.buffer:
            if not self._fill():
                if self.buffer:
                    raise Malformed(
                        f"the connection closed inside a response: {self.buffer[:300]!r}"
                    )
                return None
        head, rest = self.buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or parts[0] != "HTTP/1.1" or not parts[1].isdigit() or len(parts[1]) != 3:
            raise Malformed(f"not an HTTP/1.1 status line: {lines[0]!r}")
        headers = []
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                raise Malformed(f"not a header line: {line!r}")
            headers.append((name, value.strip()))
        status = int(parts[1])
        answer = Answer(status, parts[2] if len(parts) > 2 else "", headers, b"")
        self.buffer = rest
        if status < 200 or status in (204, 304) or head_only:
            return answer
        length = answer.header("content-length")
        if length is None or not length.isdigit():
            raise Malformed(f"a response without a valid content-length: {head!r}")
        size = int(length)
        while len(self.buffer) < size:
            if not self._fill():
                raise Malformed(f"the connection closed after {len(self.buffer)} of {size} bytes")
        answer.body, self.buffer = self.buffer[:size], self.buffer[size:]
        return answer

    def closed(self) -> bool:
        """True when the server closes with nothing more to send (waits up to the timeout)."""
        if self.buffer:
            return False
        try:
            return not self._fill()
        except Hang:
            return False
