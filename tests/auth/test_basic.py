"""HTTP Basic with an application validator, one scheme per port (SPEC 3, 4, 4.1, 7). Ports share
pool ``POOL``: ``HTTP_BASIC`` (``OnAuth`` ``auth.check``, a def; ``/rest`` and ``/other`` on its own
pool), ``HTTP_ASYNC`` (``ACheck``, async, named in another case to see it come back as written;
``healthcheck/ok`` public), ``HTTP_GUARDED`` (``auth.guarded``, its own record file: malformed
credentials never reach it), ``HTTP_OPEN``. Validators record every call as JSON lines; verdicts by
user name (``AUTH_SOURCE``).

The pipeline's answers are asked in process (``local``, modules
``tauth_basic_app``/``tauth_basic_auth``); the module's ``fwrest serve`` (``svc``) answers what
needs sockets, stderr or one worker on two ports (raw headers, keep-alive, a refused connection, a
raising ``OnAuth``'s log, the shared pool)."""

from __future__ import annotations

import base64
import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fwrest.testing import Client
from tests.auth.oauth2_support import expect
from tests.conftest import APP_SOURCE, ServerProcess, free_config, module_config, serving, wait_for
from tests.faults.support import pinned_per_worker
from tests.server.rawhttp import RawConnection

CHALLENGE = 'Basic realm="Access to REST", charset="ISO-8859-1"'
BODY_401 = b'{"code":401,"detailedMessage":"","message":"Unauthorized"}'
BODY_403 = b'{"code":403,"detailedMessage":"","message":"Forbidden"}'
BODY_404 = b'{"code":404,"detailedMessage":"","message":"Not Found"}'
BODY_500 = b'{"code":500,"detailedMessage":"","message":"Internal Server Error"}'

ADA_PASSWORD = "Love:lace:1815"  # colons inside: split at the first one only
JURGEN = ("jürgen", "pässword")  # latin-1 representable, so both encodings can carry it
RAISE_PASSWORD = "Raise-Pw-Qz71"  # the validator raises with this in its message

AUTH_SOURCE = '''
"""Validators of the Basic tests; each records what it received."""

import asyncio
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
USERS = {"ada": "Love:lace:1815", "jürgen": "pässword", "": "no-name-Pw"}
ODD = {"false": False, "one": 1, "yes": "yes", "none": None, "list": [True]}


def _record(file, user, password, how):
    with (HERE / file).open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"user": user, "password": password, "how": how}) + "\\n")


def _verdict(user, password):
    if user in ODD:
        return ODD[user]
    if user == "raise":
        raise ValueError(f"cannot check password {password} of {user}")
    return USERS.get(user) == password


def check(user, password):
    _record("calls.jsonl", user, password, "sync")
    return _verdict(user, password)


async def acheck(user, password):
    await asyncio.sleep(0)
    _record("calls.jsonl", user, password, "async")
    return _verdict(user, password)


def guarded(user, password):
    _record("guarded.jsonl", user, password, "guarded")
    return _verdict(user, password)
'''

INFO_SOURCE = """

@get("/whoami")
def whoami():
    return {
        "scheme": rest.getCEntryPointAuthorizationScheme(),
        "on_auth": rest.getCEntryPointAuthorizationOnAuth(),
        "has_callback": rest.getLEntryPointAuthorization(),
        "pool_scheme": rest.getThreadPoolAuthorizationScheme(),
        "pool_on_auth": rest.getThreadPoolAuthorizationOnAuth(),
        "user": rest.getAuthUser(),
    }


@get("/leak")
def leak():
    import logging

    header = rest.getHeaderRequest()["authorization"]
    logging.getLogger("fwrest.app").warning("handler saw %s", header)
    raise RuntimeError(f"handler failed with {header}")
"""

NO_THROTTLE = 1_000_000  # many refusals from one address must not turn into 429s here


def _basic(on_auth: str, max_failures: int = NO_THROTTLE) -> dict[str, Any]:
    return {"Authorization": {"scheme": "basic", "OnAuth": on_auth, "maxFailures": max_failures}}


def _server(locations: str, fw_data: dict[str, Any] | None = None) -> dict[str, Any]:
    section: dict[str, Any] = {"HostName": "127.0.0.1", "Port": 0, "Locations": locations}
    if fw_data is not None:
        section["FwData"] = fw_data
    return section


EXTRA = {
    "OTHER": {"Path": "/other", "ThreadPool": "POOL2"},
    "POOL2": {"Environment": "ENV", "MinThreads": 1, "MaxThreads": 2},
}
# the module names of the service in this process (unique in the test session)
LOCAL_APP, LOCAL_AUTH = "tauth_basic_app", "tauth_basic_auth"
LOCAL_ON_AUTH = f"{LOCAL_AUTH}.check"


def write_service(tmp: Path, app_module: str = "app", auth_module: str = "auth", **kw: Any) -> Path:
    """Endpoints in ``app_module``, validators in ``auth_module`` (both imported here)."""
    (tmp / f"{auth_module}.py").write_text(AUTH_SOURCE, encoding="utf-8")
    servers = {
        "HTTP_BASIC": _server("ROOT, OTHER", _basic(f"{auth_module}.check")),
        "HTTP_OPEN": _server("ROOT"),
        "HTTP_ASYNC": _server(
            "ROOT", {**_basic("ACheck"), "NativeRoutes": {"public": ["healthcheck/ok"]}}
        ),
        "HTTP_GUARDED": _server("ROOT", _basic(f"{auth_module}.guarded")),
    }
    extra = {**EXTRA, "ENV": {"Repository": f"{app_module},{auth_module}"}}
    source = APP_SOURCE + INFO_SOURCE
    return module_config(tmp, app_module, servers=servers, extra=extra, app=source, **kw)


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def basic_header(user: str, password: str, encoding: str = "utf-8", scheme: str = "Basic") -> str:
    return f"{scheme} {b64(f'{user}:{password}'.encode(encoding))}"


def records(folder: Path, name: str = "calls.jsonl") -> list[dict[str, str]]:
    path = folder / name
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


class Recorded:
    """A service in ``folder``, whose validators record what reached them."""

    folder: Path

    def calls(self, name: str = "calls.jsonl") -> list[dict[str, str]]:
        """What reached the validators (``name``: the file they record to)."""
        return records(self.folder, name)


class Service(Recorded):
    """The module's running service and small helpers around it."""

    def __init__(self, proc: ServerProcess) -> None:
        self.proc = proc
        self.folder = proc.config.parent

    def base(self, server: str = "HTTP_BASIC") -> str:
        return f"http://127.0.0.1:{self.proc.ports[server]}"

    def get(self, path: str, server: str = "HTTP_BASIC", **kw: Any) -> httpx.Response:
        return httpx.get(self.base(server) + path, timeout=10, **kw)

    def wait_file_log(self, needle: str, timeout: float = 10) -> str:
        wait_for(lambda: needle in self.proc.file_log(), timeout, f"{needle!r} in the LogFile")
        return self.proc.file_log()


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with serving(write_service(tmp_path_factory.mktemp("basic"))) as proc:
        yield Service(proc)


class InProcess(Recorded):
    """In process: a ``fwrest.testing.Client`` per port, made on first use, one worker each."""

    def __init__(self, config: Path) -> None:
        self.config = config
        self.folder = config.parent
        self._clients: dict[str, Client] = {}

    def client(self, server: str = "HTTP_BASIC") -> Client:
        if server not in self._clients:
            self._clients[server] = Client(self.config, server=server)
        return self._clients[server]

    def get(self, path: str, server: str = "HTTP_BASIC", **kw: Any) -> httpx.Response:
        return self.client(server).get(path, **kw)

    def close(self) -> None:
        for client in self._clients.values():
            client.close()


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    folder = tmp_path_factory.mktemp("basic_local")
    with contextlib.closing(InProcess(write_service(folder, LOCAL_APP, LOCAL_AUTH))) as service:
        yield service


def assert_401(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    assert response.headers.get_list("www-authenticate") == [CHALLENGE]
    assert response.headers["content-type"].startswith("application/json")
    assert response.content == BODY_401


def assert_403(response: httpx.Response) -> None:
    assert response.status_code == 403, response.text
    assert "www-authenticate" not in response.headers
    assert response.headers["content-type"].startswith("application/json")
    assert response.content == BODY_403


# -- 401: no usable Basic credentials ------------------------------------------------------------


ADA_TOKEN = b64(f"ada:{ADA_PASSWORD}".encode())
# (no header, another scheme, not base64, an inner space, no colon: the hostile corpus's ba-*)
UNUSABLE = {
    # not base64's encoding (RFC 4648 3.3, 3.5), though Python's strict decoder takes it: "=" after
    # a whole group, non-zero pad bits ("YWRhOng=" is "ada:x": "h" is "g" with a pad bit)
    "base64-padding-after-a-whole-group": f"Basic {ADA_TOKEN}=",
    "base64-pad-bits-not-zero": "Basic YWRhOnh=",
}


@pytest.mark.parametrize("value", list(UNUSABLE.values()), ids=list(UNUSABLE))
def test_unusable_credentials_are_401(local: InProcess, value: str | None) -> None:
    headers = {} if value is None else {"Authorization": value}
    assert_401(local.get("/rest/hello", headers=headers))


# latin-1 text: the raw request carries these characters as single bytes
@pytest.mark.parametrize(
    "value",
    ["Basic ", "Basic", "Basic    ", "Basic \xe9\xe9\xe9\xe9"],
    ids=["empty-space", "empty-bare", "empty-spaces", "non-ascii-bytes"],
)
def test_a_basic_header_without_a_value_or_with_non_ascii_bytes_is_401(
    svc: Service, value: str
) -> None:
    # Raw bytes: an HTTP client library would trim or refuse the trailing space.
    with RawConnection(svc.proc.ports["HTTP_BASIC"]) as conn:
        response = conn.request("GET", "/rest/hello", headers=[("Authorization", value)])
    assert response.status == 401
    assert response.header_all("WWW-Authenticate") == [CHALLENGE]
    assert response.body == BODY_401


def test_on_auth_is_not_called_without_usable_credentials(svc: Service) -> None:
    port = svc.proc.ports["HTTP_GUARDED"]
    digest = 'Digest username="ada", realm="r", nonce="n", uri="/", response="r"'
    bad = [
        None,
        "Bearer x",
        digest,
        "Basic !!!",
        f"Basic {b64(b'no-colon-at-all')}",
        "Basic ",
        "Basic",
    ]
    for value in bad:
        headers = [] if value is None else [("Authorization", value)]
        with RawConnection(port) as conn:
            response = conn.request("GET", "/rest/hello", headers=headers)
        assert (value, response.status, response.body) == (value, 401, BODY_401)
    assert not (svc.folder / "guarded.jsonl").exists() or svc.calls("guarded.jsonl") == []
    # Control: the validator of this port does record when credentials are well-formed.
    assert svc.get("/rest/hello", "HTTP_GUARDED", auth=("ada", ADA_PASSWORD)).status_code == 200
    assert svc.calls("guarded.jsonl") == [
        {"user": "ada", "password": ADA_PASSWORD, "how": "guarded"}
    ]


# -- what reaches OnAuth -------------------------------------------------------------------------


def test_credentials_split_at_the_first_colon(local: InProcess) -> None:
    expect(local.get("/rest/hello", auth=("ada", ADA_PASSWORD)))
    assert local.calls()[-1] == {"user": "ada", "password": "Love:lace:1815", "how": "sync"}


@pytest.mark.parametrize(
    ("encoding", "wire"),
    [("utf-8", b"j\xc3\xbcrgen:p\xc3\xa4ssword"), ("iso-8859-1", b"j\xfcrgen:p\xe4ssword")],
    ids=["utf8", "iso-8859-1"],
)
def test_credentials_reach_on_auth_decoded(local: InProcess, encoding: str, wire: bytes) -> None:
    header = basic_header(*JURGEN, encoding=encoding)
    assert base64.b64decode(header.split()[1]) == wire  # really this encoding on the wire
    response = expect(local.get("/rest/whoami", headers={"Authorization": header}))
    assert response.json()["user"] == "jürgen"
    assert local.calls()[-1] == {"user": "jürgen", "password": "pässword", "how": "sync"}


def test_empty_user_and_empty_password_reach_on_auth(local: InProcess) -> None:
    assert local.get("/rest/hello", auth=("", "no-name-Pw")).status_code == 200
    assert local.calls()[-1] == {"user": "", "password": "no-name-Pw", "how": "sync"}
    assert_403(local.get("/rest/hello", auth=("ada", "")))
    assert local.calls()[-1] == {"user": "ada", "password": "", "how": "sync"}


# -- the verdict ---------------------------------------------------------------------------------


@pytest.mark.parametrize("server", ["HTTP_BASIC", "HTTP_ASYNC"])
@pytest.mark.parametrize("user", ["false", "one", "yes", "none", "list"])
def test_anything_but_exactly_true_is_403(local: InProcess, server: str, user: str) -> None:
    # The validator returns False, 1, "yes", None or [True] for these users.
    assert_403(local.get("/rest/hello", server, auth=(user, "whatever-pw")))
    how = "sync" if server == "HTTP_BASIC" else "async"
    assert local.calls()[-1] == {"user": user, "password": "whatever-pw", "how": how}


@pytest.mark.parametrize("server", ["HTTP_BASIC", "HTTP_ASYNC"])
def test_on_auth_raising_is_500_logged_without_the_password(svc: Service, server: str) -> None:
    password = f"{RAISE_PASSWORD}-{server}"
    response = expect(svc.get("/rest/hello", server, auth=("raise", password)), 500)
    assert response.headers["content-type"].startswith("application/json")
    assert response.content == BODY_500
    assert "www-authenticate" not in response.headers
    assert svc.calls()[-1]["password"] == password  # the validator did get it, and raised
    name = "auth.check" if server == "HTTP_BASIC" else "ACheck"
    line = re.compile(rf"ERROR .*\[{server}\] OnAuth {re.escape(name)} raised ValueError")
    wait_for(lambda: bool(line.search(svc.proc.log())), 10, "the OnAuth error on stderr")
    stderr = svc.proc.log()
    assert line.search(stderr), stderr
    assert password not in stderr
    file_log = svc.wait_file_log(f"[{server}] OnAuth")
    assert line.search(file_log), file_log
    assert password not in file_log


def test_a_refused_user_name_is_cut_to_rest_log_stringsize(svc: Service) -> None:
    """A client's user name is cut in the log as its other values are (an 11 KB name was
    written whole, ignoring ``rest_log_stringsize``)."""
    user = "Long-User-" + "u" * 11000 + "-Tail-Mark"
    assert_403(svc.get("/rest/hello", auth=(user, "whatever-pw")))
    shown = f"OnAuth refused user '{user[:200]}...({len(user)} chars)'"
    assert shown in svc.wait_file_log("OnAuth refused user 'Long-User-")
    assert "-Tail-Mark" not in svc.proc.log()
    assert "-Tail-Mark" not in svc.proc.file_log()


# -- authorization runs before routing -----------------------------------------------------------


@pytest.mark.parametrize("path", ["/rest/no/such/route", "/nowhere", "/"])
def test_unknown_path_with_valid_credentials_is_404(local: InProcess, path: str) -> None:
    response = expect(local.get(path, auth=("ada", ADA_PASSWORD)), 404)
    assert response.content == BODY_404


# native routes' paths outside every location (SPEC 7.1): authorization runs first, on every method
OUTSIDE_NATIVE = [("GET", "/fw/oauth2/token"), ("POST", "/fw/oauth2/token"), ("GET", "/fw/rest/config"),
                  ("POST", "/fw/rest/config"), ("GET", "/fw/healthcheck/ok"),
                  ("GET", "/fw/rest/openapi.json")]  # fmt: skip


@pytest.mark.parametrize(("method", "path"), OUTSIDE_NATIVE)
@pytest.mark.parametrize("server", ["HTTP_BASIC", "HTTP_ASYNC"])
def test_a_native_path_outside_every_location_is_401_not_404(
    local: InProcess, server: str, method: str, path: str
) -> None:
    """``HTTP_ASYNC`` makes ``healthcheck/ok`` public: under its location only."""
    client = local.client(server)
    assert_401(client.request(method, path))
    response = client.request(method, path, auth=("ada", ADA_PASSWORD))
    assert response.status_code == 404, response.text  # authorized: then the router speaks
    if server == "HTTP_ASYNC" and path == "/fw/healthcheck/ok":
        assert client.get("/rest" + path).status_code == 200


def test_unknown_path_with_a_wrong_password_is_403_not_404(local: InProcess) -> None:
    assert_403(local.get("/rest/no/such/route", auth=("ada", "wrong")))


def test_wrong_method_without_credentials_is_401_not_405(local: InProcess) -> None:
    assert_401(local.client().post("/rest/hello"))
    expect(local.client().post("/rest/hello", auth=("ada", ADA_PASSWORD)), 405)


# -- one scheme per port -------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/rest/hello", "/rest/items/7", "/rest/users/u/orders/o"])
def test_open_port_needs_no_credentials(local: InProcess, path: str) -> None:
    response = expect(local.get(path, "HTTP_OPEN"))
    assert "www-authenticate" not in response.headers


@pytest.mark.parametrize(
    "path", ["/rest/hello", "/rest/items/7", "/rest/users/u/orders/o", "/other/hello"]
)
def test_every_location_of_the_basic_server_is_protected(local: InProcess, path: str) -> None:
    assert_401(local.get(path))
    assert local.get(path, auth=("ada", ADA_PASSWORD)).status_code == 200


def test_post_route_of_the_basic_server_is_protected(local: InProcess) -> None:
    assert_401(local.client().post("/rest/echo", json={"a": 1}))
    response = expect(local.client().post("/rest/echo", json={"a": 1}, auth=("ada", ADA_PASSWORD)))
    assert response.json()["body"] == '{"a":1}'


def test_open_port_ignores_credentials_and_never_calls_on_auth(local: InProcess) -> None:
    before = len(local.calls())
    response = expect(local.get("/rest/whoami", "HTTP_OPEN", auth=("ada", ADA_PASSWORD)))
    assert response.json()["user"] == ""
    expect(local.get("/rest/hello", "HTTP_OPEN", auth=("ada", "wrong")))
    assert len(local.calls()) == before


@pytest.mark.parametrize(
    "route", ["/fw/healthcheck/ok", "/fw/environment", "/fw/rest/list/service"]
)
def test_native_routes_are_protected_by_the_basic_scheme(local: InProcess, route: str) -> None:
    for location in ("/rest", "/other"):
        assert_401(local.get(location + route))
        assert local.get(location + route, auth=("ada", ADA_PASSWORD)).status_code == 200
    assert local.get("/rest" + route, "HTTP_OPEN").status_code == 200


def test_public_native_route_skips_the_basic_scheme(local: InProcess) -> None:
    before = len(local.calls())
    response = expect(local.get("/rest/fw/healthcheck/ok", "HTTP_ASYNC"))
    assert response.text.strip() == "ok"
    assert len(local.calls()) == before  # OnAuth was not asked
    assert_401(local.get("/rest/fw/healthcheck", "HTTP_ASYNC"))  # only the listed route is open
    assert_401(local.get("/rest/hello", "HTTP_ASYNC"))
    assert_401(local.get("/rest/fw/healthcheck/ok"))  # public on HTTP_ASYNC only


# -- the REST object -----------------------------------------------------------------------------


BASIC_INFO = {"scheme": "basic", "on_auth": "auth.check", "has_callback": True,
              "pool_scheme": "basic", "pool_on_auth": "auth.check", "user": "ada"}  # fmt: skip
LOCAL_BASIC_INFO = {**BASIC_INFO, "on_auth": LOCAL_ON_AUTH, "pool_on_auth": LOCAL_ON_AUTH}
OPEN_INFO = {**dict.fromkeys(BASIC_INFO, ""), "has_callback": False}


@pytest.mark.parametrize("location", ["/rest", "/other"], ids=["first", "second"])
def test_rest_object_on_each_location_of_the_basic_port(local: InProcess, location: str) -> None:
    response = expect(local.get(f"{location}/whoami", auth=("ada", ADA_PASSWORD)))
    assert response.json() == LOCAL_BASIC_INFO


def test_rest_object_names_on_auth_as_written(local: InProcess) -> None:
    assert expect(local.get("/rest/whoami", "HTTP_ASYNC", auth=("jürgen", "pässword"))).json() == {
        **BASIC_INFO,
        "on_auth": "ACheck",
        "pool_on_auth": "ACheck",
        "user": "jürgen",
    }


def test_rest_object_on_the_open_port_sharing_the_pool(svc: Service) -> None:
    # Alternate ports on the shared pool: nothing of one port's request leaks into the next.
    for _ in range(3):
        basic = svc.get("/rest/whoami", auth=("ada", ADA_PASSWORD))
        assert basic.json() == BASIC_INFO
        assert expect(svc.get("/rest/whoami", "HTTP_OPEN")).json() == OPEN_INFO


# -- real clients (curl: the guide's commands, tests/docs/test_examples.py) -----------------------


def test_httpx_basic_auth_works(svc: Service) -> None:
    with httpx.Client(base_url=svc.base(), auth=("ada", ADA_PASSWORD), timeout=10) as client:
        for _ in range(3):  # keep-alive: every request on the connection is checked
            assert expect(client.get("/rest/whoami")).json()["user"] == "ada"
    with httpx.Client(base_url=svc.base(), auth=httpx.BasicAuth(*JURGEN), timeout=10) as client:
        assert client.get("/rest/whoami").json()["user"] == "jürgen"
    with httpx.Client(base_url=svc.base(), auth=("ada", "bad-httpx-pw"), timeout=10) as client:
        assert_403(client.get("/rest/whoami"))


def test_keep_alive_connection_is_checked_per_request(svc: Service) -> None:
    good = basic_header("ada", ADA_PASSWORD)
    with RawConnection(svc.proc.ports["HTTP_BASIC"]) as conn:
        first = conn.request("GET", "/rest/whoami", headers=[("Authorization", good)])
        second = conn.request("GET", "/rest/whoami")
    assert first.status == 200
    assert json.loads(first.body)["user"] == "ada"
    assert second.status == 401
    assert second.body == BODY_401


# -- secrets never reach the log -----------------------------------------------------------------


@pytest.mark.parametrize("level", [3, 5])
def test_no_password_or_credential_in_the_whole_log(serve: Any, tmp_path: Path, level: int) -> None:
    server = serve(write_service(tmp_path, general={"rest_log_level": level}))
    basic, async_ = (
        f"http://127.0.0.1:{server.ports[name]}" for name in ("HTTP_BASIC", "HTTP_ASYNC")
    )
    ok_pw, bad_pw, raise_pw = "Okay-Pw-x9Tq2", "Fail-Pw-k3Lm8", "Boom-Pw-r7Ws4"
    sent: list[tuple[str, str, str, int]] = [
        (basic, "ada", ok_pw, 403),  # ada's password is another: refused
        (basic, "ada", ADA_PASSWORD, 200),
        (basic, "ada", bad_pw, 403),
        (basic, "raise", raise_pw, 500),
        (async_, "ada", ok_pw + "-a", 403),
        (async_, "ada", ADA_PASSWORD, 200),
        (async_, "raise", raise_pw + "-a", 500),
        (basic, "jürgen", "pässword", 200),
    ]
    headers_sent: list[str] = []
    for base, user, password, status in sent:
        header = basic_header(user, password)
        headers_sent.append(header)
        response = httpx.get(f"{base}/rest/hello", headers={"Authorization": header}, timeout=10)
        assert response.status_code == status, (user, password, response.text)
    # A 404 after authorization, and a handler that logs and raises with the credentials.
    header = basic_header("ada", ADA_PASSWORD)
    assert httpx.get(f"{basic}/rest/nope", headers={"Authorization": header}).status_code == 404
    assert httpx.get(f"{basic}/rest/leak", headers={"Authorization": header}).status_code == 500
    no_colon = f"Basic {b64(b'NoColon-Secret-p5Vb')}"
    assert httpx.get(f"{basic}/rest/hello", headers={"Authorization": no_colon}).status_code == 401
    headers_sent.append(no_colon)
    assert server.stop() == 0

    stdout = "\n".join(server.stdout_lines)
    logs = {"stderr": server.log(), "LogFile": server.file_log(), "stdout": stdout}
    assert "OnAuth auth.check raised ValueError" in logs["LogFile"]  # the log was written
    assert "handler saw Basic ***" in logs["LogFile"]
    assert "GET /rest/hello 200" in logs["stderr"]
    secrets = [ok_pw, bad_pw, raise_pw, ADA_PASSWORD, "pässword", "NoColon-Secret-p5Vb"]
    secrets += [header.split(" ", 1)[1] for header in headers_sent]
    for where, text in logs.items():
        for secret in secrets:
            assert secret not in text, f"{secret!r} appears in {where}:\n{text}"


# -- brute force: the throttle guards OnAuth failures (SPEC 4.2, last rule on Basic ports) ----


def test_failed_on_auth_calls_lock_the_user_out(tmp_path: Path) -> None:
    """Both ports share a sqlite store, as one worker's ports share its store."""
    app, auth = "tauth_lockout_app", "tauth_lockout_auth"
    (tmp_path / f"{auth}.py").write_text(AUTH_SOURCE, encoding="utf-8")
    servers = {
        "HTTP_BASIC": _server("ROOT", _basic(f"{auth}.check", 3)),
        "HTTP_OPEN": _server("ROOT"),
    }
    extra = {"HTTPSERVER": {"StateStore": "sqlite"}, "ENV": {"Repository": f"{app},{auth}"}}
    config = module_config(tmp_path, app, servers=servers, extra=extra)
    log_file = tmp_path / "server.log"
    with Client(config, server="HTTP_BASIC") as basic, Client(config, server="HTTP_OPEN") as open_:
        url = "/rest/hello"
        guesses = ["Guess-Pw-1a", "Guess-Pw-2b", "Guess-Pw-3c"]
        for guess in guesses:  # maxFailures refusals are answered as usual
            assert_403(basic.get(url, auth=("ada", guess)))
        calls = len(records(tmp_path))
        assert calls == 3
        locked = expect(basic.get(url, auth=("ada", "Guess-Pw-4d")), 429)
        assert locked.json()["code"] == 429
        assert 1 <= int(locked.headers["retry-after"]) <= 300
        right = basic.get(url, auth=("ada", ADA_PASSWORD))  # the right password too
        assert right.status_code == 429, right.text
        assert len(records(tmp_path)) == calls  # OnAuth is not asked during the lock-out
        assert_401(basic.get(url))  # no credentials: still the challenge
        assert open_.get(url).status_code == 200
        wait_for(lambda: "locked out" in log_file.read_text(), 10, "the lock-out in the LogFile")
    text = log_file.read_text()
    lockouts = [line for line in text.splitlines() if "WARNING" in line and "user:ada" in line]
    assert len(lockouts) == 1, text  # one warning per lock-out
    for secret in [*guesses, "Guess-Pw-4d", ADA_PASSWORD]:
        assert secret not in text


def test_failures_on_every_worker_count_toward_one_lock_out(serve: Any, tmp_path: Path) -> None:
    """``--workers 2``, memory store: failures count across workers (SPEC 4.2)."""
    (tmp_path / "auth.py").write_text(AUTH_SOURCE, encoding="utf-8")
    config = free_config(
        tmp_path,
        servers={"HTTP_BASIC": _server("ROOT", _basic("auth.check", 3))},
        extra={"ENV": {"Repository": "app,auth"}},
    )
    server = serve(config, workers=2)
    base = f"http://127.0.0.1:{server.ports['HTTP_BASIC']}"
    url = base + "/rest/hello"
    # one keep-alive connection per worker (told apart by the pid /hello answers with)
    first, second = pinned_per_worker(base, auth=("ada", ADA_PASSWORD), pid_path="/rest/hello")
    try:
        # three user names (only the address's count grows) over both workers: neither saw three
        for client, user in ((first, "false"), (second, "none"), (first, "one")):
            assert_403(client.http.get(url, auth=(user, "Guess-Pw-5e")))
        locked = expect(second.http.get(url, auth=("list", "Guess-Pw-6f")), 429)
        assert 1 <= int(locked.headers["retry-after"]) <= 300
        assert first.http.get(url, auth=("ada", ADA_PASSWORD)).status_code == 429
    finally:
        first.close()
        second.close()
    server.wait_log("locked out")
    assert server.stop() == 0
    text = server.log()
    workers = {m.group(1) for m in re.finditer(r"\[(w\d)\] \[HTTP_BASIC\] OnAuth refused", text)}
    assert workers == {"w1", "w2"}, text  # the refusals were answered by both workers
    lockouts = [line for line in text.splitlines() if "locked out" in line]
    assert len(lockouts) == 1 and "ip:127.0.0.1" in lockouts[0], text


def test_verbose_level_and_full_tracebacks_of_on_auth(serve: Any, tmp_path: Path) -> None:
    """Level 4: a line per accepted user (3: the access line only); ``rest_error_full=1``: an
    ``OnAuth`` traceback without its password, even one too short for the scrubbing, where it
    stands as a word: masking every ``o`` of the lines mangled them and showed the password."""
    server = serve(write_service(tmp_path, general={"rest_log_level": 4, "rest_error_full": 1}))
    url = f"http://127.0.0.1:{server.ports['HTTP_BASIC']}"
    ada = ("ada", ADA_PASSWORD)
    assert httpx.get(f"{url}/rest/hello", auth=ada, timeout=10).status_code == 200
    assert httpx.get(f"{url}/rest/hello", auth=("raise", "o"), timeout=10).status_code == 500
    text = server.wait_log("ValueError: cannot check password")
    assert "cannot check password *** of raise" in text, text
    assert 'raise ValueError(f"cannot check password {password} of {user}")' in text, text
    assert "***" not in text.replace("password *** of", ""), text  # nothing else masked
    since = len(server.log())
    assert httpx.get(f"{url}/rest/hello", auth=("raise", "Zq"), timeout=10).status_code == 500
    server.wait_log("ValueError: cannot check password", since=since)
    text = server.log()
    assert re.search(
        r" VERBOSE fwrest\.auth \[w1\] \[HTTP_BASIC\] OnAuth accepted user 'ada'", text
    )
    assert "Traceback (most recent call last)" in text
    assert 'raise ValueError(f"cannot check password {password} of {user}")' in text
    assert "ValueError: cannot check password *** of raise" in text
    assert "Zq" not in text
    quiet = {"rest_log_level": 3, "rest_error_full": 0}
    expect(httpx.post(f"{url}/rest/fw/rest/config", json=quiet, auth=ada, timeout=10))
    # its lines leave after the loop turn, maybe after the answer: read from its access line on
    server.wait_log("POST /rest/fw/rest/config 200")
    since = len(server.log())
    assert httpx.get(f"{url}/rest/items/3", auth=ada, timeout=10).status_code == 200
    assert httpx.get(f"{url}/rest/hello", auth=("raise", "o"), timeout=10).status_code == 500
    text = server.wait_log("GET /rest/hello 500", since=since)
    assert "GET /rest/items/3 200" in text
    assert "OnAuth accepted" not in text and "Traceback" not in text
    assert "cannot check password *** of raise" in text
    assert "(rest_error_full=1 logs the whole traceback)" in text, text
    assert server.stop() == 0
