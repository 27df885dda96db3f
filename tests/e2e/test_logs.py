"""fwrest's log (SPEC 7, 5.1): access lines, redaction, levels, ``LogFile``, no forged lines."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import httpx

from tests.conftest import APP_SOURCE, ServerProcess, free_config, local_port
from tests.e2e.conftest import Served
from tests.server.rawhttp import RawConnection

# an access line; with rest_trace_time=1 its time sits between the status and the port
ACCESS = re.compile(
    r"fwrest\.access \[\w+\] (\S+) (\S+) (\d{3}) (?:total=(\d+)us )?port=\d+ client="
)


def access_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if " fwrest.access " in line]


def test_one_access_line_per_request_with_method_path_status_and_microseconds(
    served: Served,
) -> None:
    # the time per request is rest_trace_time's (SPEC 5.1: 0 off, 1 total time per request)
    server = served(general={"rest_trace_time": 1})
    base = server.url()
    assert httpx.get(f"{base}/items/5").status_code == 200
    assert httpx.post(f"{base}/echo", content=b"x").status_code == 200
    assert httpx.get(f"{base}/sleep/30").status_code == 200
    assert httpx.get(f"{base}/nowhere").status_code == 404
    server.stop()
    lines = access_lines(server.log())
    parsed = [ACCESS.search(line) for line in lines]
    assert all(parsed), lines
    seen = [(m.group(1), m.group(2), m.group(3)) for m in parsed if m]
    assert seen == [
        ("GET", "/rest/items/5", "200"),
        ("POST", "/rest/echo", "200"),
        ("GET", "/rest/sleep/30", "200"),
        ("GET", "/rest/nowhere", "404"),
    ]
    assert " INFO fwrest.access " in lines[0], lines  # a success, at the default level 3
    assert all(m.group(4) for m in parsed if m), lines
    slept_us = int(next(m.group(4) for m in parsed if m and m.group(2) == "/rest/sleep/30"))
    print(f"/sleep/30 took {slept_us} us by the access log")
    assert slept_us >= 30_000  # the figure is microseconds: 30 ms is at least 30000


def test_every_access_line_once_and_the_last_lines_of_each_worker(
    served: Served, tmp_path: Path
) -> None:
    """Written once per loop turn, the same to stderr and ``LogFile``: none lost at a worker's
    exit, none twice after a fork."""
    server = served(2)
    base = server.url()
    sent = 60
    for i in range(sent):
        with httpx.Client() as client:  # a new connection each: both workers serve
            assert client.get(f"{base}/items/{i}").status_code == 200
    server.stop()
    assert access_lines(server.file_log()) == access_lines(server.log())  # the same, in order
    for text in (server.log(), (tmp_path / "server.log").read_text()):
        paths = [m.group(2) for m in map(ACCESS.search, access_lines(text)) if m]
        assert sorted(paths) == sorted(f"/rest/items/{i}" for i in range(sent)), paths
        stopped = re.findall(r"worker (\d) stopped after (\d+) request\(s\)", text)
        assert sorted(w for w, _ in stopped) == ["1", "2"], text[-2000:]
        assert sum(int(n) for _, n in stopped) == sent
        assert text.count("worker 1 ready") == 1 and text.count("worker 2 ready") == 1


def test_secret_query_values_are_redacted(served: Served) -> None:
    server = served()
    # names as read decoded too: %70assword is password, client%5Fsecret client_secret
    query = (
        "password=hunter2pw&client_secret=cs-s3cr3t&access_token=at-t0ken"
        "&api_key=ak-k3y&page=7&user=ann&%70assword=enc0dedpw&client%5Fsecret=enc0dedcs"
    )
    assert httpx.get(f"{server.url()}/hello?{query}").status_code == 200
    text = server.wait_log("GET /rest/hello")
    for secret in ("hunter2pw", "cs-s3cr3t", "at-t0ken", "ak-k3y", "enc0dedpw", "enc0dedcs"):
        assert secret not in text, secret
    line = next(line for line in access_lines(text) if "/rest/hello" in line)
    for name in ("password", "client_secret", "access_token", "api_key", "%70assword"):
        assert f"{name}=***" in line, line
    assert "page=7" in line and "user=ann" in line


def test_credentials_in_headers_never_reach_the_log(served: Served) -> None:
    server = served(general={"rest_log_level": 5})
    headers = {
        "Authorization": "Bearer authz-header-value-1234",
        "Proxy-Authorization": "Basic cHJveHktdmFsdWUtNTY3OA==",
        "Cookie": "session=cookie-value-9012",
    }
    for path in ("/hello", "/boom", "/nowhere"):
        httpx.get(f"{server.url()}{path}", headers=headers)
    httpx.post(f"{server.url()}/echo", headers=headers, content=b"{}")
    server.stop()
    text = server.log() + server.file_log()
    assert "GET /rest/hello 200" in text  # the requests were logged ...
    for value in ("authz-header-value-1234", "cHJveHktdmFsdWUtNTY3OA", "cookie-value-9012"):
        assert value not in text, value  # ... their credentials were not


def test_level_2_logs_errors_but_not_successes(served: Served) -> None:
    server = served(general={"rest_log_level": 2})
    hello = httpx.get(f"{server.url()}/hello")
    assert hello.status_code == 200 and hello.json()["hello"] == "world"
    assert httpx.get(f"{server.url()}/boom").status_code == 500
    assert server.stop() == 0
    text = server.log()
    assert "GET /rest/hello" not in text  # no access line for a success at level 2
    errors = [line for line in text.splitlines() if " ERROR " in line]
    # the 500 is still logged, as an error naming the request, with the exception text
    assert any("GET /rest/boom" in line for line in errors), text
    assert "kaboom-secret-detail" in text


def test_cr_lf_in_the_request_cannot_forge_a_log_line(served: Served) -> None:
    server = served()
    forged = "2030-01-01T00:00:00.000Z%20INFO%20fwrest.access%20[w1]%20FORGED"
    targets = (
        f"/hello?x=1%0d%0a{forged}",
        f"/hello?x=1%0a{forged}&y=%0d",
        f"/hello?x=%1b[31m{forged}",
        f"/items/a%0d%0a{forged}",  # decoded in the path: a control character, 400
        f"/items/%1b[31m{forged}",
    )
    statuses = [httpx.get(f"{server.url()}{target}").status_code for target in targets]
    assert statuses == [200, 200, 200, 400, 400]
    server.stop()
    for text in (server.log(), server.file_log()):
        assert len(access_lines(text)) == 5
        for line in text.splitlines():
            # every mention sits inside a real access line, never at the start of its own
            if "FORGED" in line:
                assert re.match(r"\S+Z INFO fwrest\.access \[w1\] GET /rest/hello\?", line), line
            assert not line.startswith("2030-"), line
        assert "\x1b" not in text
        assert "\r" not in text


RAISER = """

@get("/raise")
def raise_from_query():
    raise ValueError("bad value " + rest.getQueryRequest()["v"])
"""


def test_exception_text_from_input_cannot_forge_a_log_line(tmp_path: Path, serve) -> None:  # type: ignore[no-untyped-def]
    forged = "2030-01-01T00:00:00.000Z INFO fwrest.access [w1] FORGED"
    for full in (0, 1):
        folder = tmp_path / f"full{full}"
        folder.mkdir()
        config = free_config(folder, app=APP_SOURCE + RAISER, general={"rest_error_full": full})
        server: ServerProcess = serve(config)
        r = httpx.get(f"{server.url()}/raise", params={"v": f"x\r\n{forged}\n{forged}\x1b[2J"})
        assert r.status_code == 500
        assert "FORGED" not in r.text
        server.stop()
        for text in (server.log(), server.file_log()):
            assert "FORGED" in text  # the message was logged ...
            for line in text.splitlines():
                assert not line.startswith("2030-"), line  # ... but never as a line of its own
            assert "\x1b" not in text and "\r" not in text


APP_LOGGERS = """

import logging


def check(user, password):
    return password == "Own-Loggers-Pw-7Hk"


@get("/applog")
def applog():
    header = rest.getHeaderRequest()["authorization"]
    note = rest.getQueryRequest().get("note", "")
    logging.getLogger("myapp.views").warning("myapp saw %s and %s", header, note)
    logging.getLogger().error("root saw %s", header)
    return {"ok": True}
"""


def test_the_applications_own_loggers_write_to_the_log_scrubbed(served: Served) -> None:
    """An endpoint's ``logging.getLogger(__name__)`` joins fwrest's log (stderr and LogFile, its
    format), Basic credentials scrubbed, CR/LF escaped, not Python's raw last-resort handler."""
    basic = {"Authorization": {"scheme": "basic", "OnAuth": "app.check"}}
    servers = {"HTTP_REST": local_port(FwData=basic)}
    server = served(servers=servers, app=APP_SOURCE + APP_LOGGERS)
    forged = "2030-01-01T00:00:00.000Z INFO fwrest.access [w1] FORGED"
    r = httpx.get(
        f"{server.url()}/applog",
        params={"note": f"x\r\n{forged}"},
        auth=("ada", "Own-Loggers-Pw-7Hk"),
    )
    assert r.status_code == 200, r.text
    server.stop()
    credentials = "YWRhOk93bi1Mb2dnZXJzLVB3LTdIaw=="  # base64 of ada:Own-Loggers-Pw-7Hk
    for text in (server.log(), server.file_log()):
        assert re.search(r"Z WARNING myapp\.views \[w1\] myapp saw Basic \*\*\* and x", text), text
        assert re.search(r"Z ERROR root \[w1\] root saw Basic \*\*\*", text), text
        assert credentials not in text and "Own-Loggers-Pw-7Hk" not in text, text
        for line in text.splitlines():
            assert not line.startswith("2030-"), line
        assert "\r" not in text


LOGIN = """

@post("/login")
def login():
    return {"user": "ann", "access_token": "Resp-Token-Cn4ry-51", "session_pin": 735198642}
"""


def test_secret_fields_of_any_body_are_redacted_at_level_5(served: Served) -> None:
    """Level 5 writes bodies: secret fields redacted after parsing (JSON with white space, a number
    value, a form holding a brace), in answers too; multipart by its length only (SPEC 7.1)."""
    general = {"rest_log_level": 5, "rest_log_stringsize": 100000}
    server = served(app=APP_SOURCE + LOGIN, general=general)
    url = f"{server.url()}/login"
    json_type = {"Content-Type": "application/json"}
    sent = [
        httpx.post(url, content=' \n{"password": "Space-Json-Pw-41"}', headers=json_type),
        httpx.post(url, content='{"user": "ann", "password": 918273645501}', headers=json_type),
        httpx.post(url, data={"password": "Form-Brace-Pw-42", "data": '{"a": 1}'}),
        httpx.post(url, data={"name": "ann"}, files={"password": (None, "Multi-Part-Pw-43")}),
        httpx.post(
            url, data={"name": "ann", "Client_Secret": "Multi-Part-Sec-44"}, files={"f": b"x"}
        ),
    ]
    assert [r.status_code for r in sent] == [200] * 5
    assert sent[0].json()["access_token"] == "Resp-Token-Cn4ry-51"
    server.stop()
    secrets = ["Space-Json-Pw-41", "918273645501", "Form-Brace-Pw-42", "Multi-Part-Pw-43"]
    secrets += ["Multi-Part-Sec-44", "Resp-Token-Cn4ry-51", "735198642"]
    for text in (server.log(), server.file_log()):
        assert text.count("response 200 body") == 5, text  # the bodies were logged ...
        assert '"access_token":"***","session_pin":"***"' in text, text
        assert "password=***&data=%7B%22a%22%3A+1%7D" in text, text
        assert text.count("bytes, not logged: neither JSON nor a URL-encoded form)") == 2, text
        for secret in secrets:
            assert secret not in text, (secret, text)  # ... without their secrets


SHAPES_APP = """

import logging


@post("/login")
def login():
    return {"user": "ann", "access_token": "Resp-Tok-C4n-61"}


@post("/sink")
def sink():
    # takes a body, answers its length (an echo would put it in a JSON string: free text
    # inside a string is data, which the log shows)
    return {"length": len(rest.getBodyRequest())}


@get("/fetch")
def fetch():
    logging.getLogger("myapp.client").warning("fetching %s", rest.getQueryRequest()["url"])
    return {"ok": True}
"""


def test_every_shape_of_secret_of_spec_7_1_stays_out_of_the_log(
    served: Served, tmp_path: Path
) -> None:
    """SPEC 7.1 "Logs" at level 5: secret-named headers masked whole, bodies redacted after parsing
    (``\\u``-escaped JSON keys, ``;``-split forms), other bodies by length only, URL userinfo and a
    password in a URL-valued parameter masked (access line, header, app record); ``LogFile`` mode
    0600."""
    general = {"rest_log_level": 5, "rest_log_stringsize": 100000}
    server = served(app=APP_SOURCE + SHAPES_APP, general=general)
    base = server.url()
    secrets: list[str] = []

    def secret(n: int) -> str:
        value = f"Shape-Cn4ry-{n:02d}"
        secrets.append(value)
        return value

    form = {"Content-Type": "application/x-www-form-urlencoded"}
    json_type = {"Content-Type": "application/json"}
    answers = [
        # header names that carry secrets
        httpx.get(
            f"{base}/hello",
            headers={
                "X-Api-Key": secret(1),
                "X-Auth-Token": secret(2),
                "Set-Cookie": f"sid={secret(3)}",
                "X-Session-Id": secret(4),
                "X-Client-Secret": secret(5),
                "X-Password": secret(6),
                "Referer": f"https://ann:{secret(7)}@app.example/p?password={secret(8)}",
                "X-Note": f"next=/login?token={secret(9)}",
            },
        ),
        # JSON whose keys are written with \\u escapes, nested, a secret in a nested form
        httpx.post(
            f"{base}/echo",
            content=json.dumps(
                {
                    "x": {"api_key": secret(11)},
                    "data": f"a=1&token={secret(12)}",
                    "cfg": json.dumps({"secret": secret(13)}),
                }
            )
            .replace('"api_key"', '"api\\u005fkey"')
            .replace("{", '{"p\\u0061ssword": "' + secret(10) + '", ', 1),
            headers=json_type,
        ),
        # JSON sent as text: parsed all the same; a key given twice
        httpx.post(
            f"{base}/echo",
            content='{"password": "' + secret(14) + '", "password": "x"}',
            headers={"Content-Type": "text/plain"},
        ),
        # forms with ";" separators
        httpx.post(f"{base}/echo", content=f"user=ann;password={secret(15)};x=1&p=2", headers=form),
        httpx.post(f"{base}/echo", content=f"a=1&pwd={secret(16)};b=2", headers=form),
        # bodies of other types: their length only
        httpx.post(
            f"{base}/sink",
            content=f"<login><password>{secret(17)}</password></login>",
            headers={"Content-Type": "application/xml"},
        ),
        httpx.post(f"{base}/sink", content="{user=ann&password=" + secret(18), headers=form),
        httpx.post(f"{base}/sink", content=f"password {secret(19)}", headers=form),
        httpx.post(f"{base}/sink", content=secret(20), headers={"Content-Type": "text/plain"}),
        httpx.post(f"{base}/sink", files={"password": (None, secret(21))}),
        # URLs in the query: userinfo, a password in a URL-valued parameter, encoded or not
        httpx.get(
            f"{base}/hello",
            params={
                "next": f"https://ann:{secret(22)}@app.example/cb",
                "back": f"https://app.example/cb?password={secret(23)}&x=1",
            },
        ),
        httpx.get(f"{base}/hello?redirect=/login?token={secret(24)}"),
        httpx.get(f"{base}/hello?a=1;password={secret(25)}"),
        # an application's own record holding a URL with userinfo and a key in its query
        httpx.get(
            f"{base}/fetch",
            params={"url": f"https://svc:{secret(26)}@api.example/v1?api_key={secret(27)}"},
        ),
        # the response of an endpoint answering JSON with a token
        httpx.post(f"{base}/login", json={"user": "ann"}),
    ]
    assert [r.status_code for r in answers] == [200] * len(answers), [
        (r.request.url, r.status_code) for r in answers
    ]
    # absolute-form target with userinfo: refused (RFC 9112 3.2), its secret in no line
    with RawConnection(server.ports["HTTP_REST"]) as conn:
        target = f"http://ann:{secret(28)}@127.0.0.1/rest/hello"
        assert conn.request("GET", target).status == 400
    assert len(secrets) == 28
    server.stop()
    texts = {"stderr": server.log(), "LogFile": server.file_log()}
    for where, text in texts.items():
        hits = [(value, line) for value in secrets for line in text.splitlines() if value in line]
        assert hits == [], (where, hits)
        # the log is the verbose one, with the redactions in place
        for masked in (
            "x-api-key: ***",
            "x-auth-token: ***",
            "set-cookie: ***",
            "x-session-id: ***",
            "referer: https://***@app.example/p?password=***",
            "x-note: next=/login?token=***",
            '"password":"***"',
            '"api_key":"***"',
            "user=ann;password=***&p=2",
            "a=1&pwd=***",
            "next=https://***@app.example/cb",
            "back=https://app.example/cb?password=***",
            "redirect=/login?token=***",
            "a=1;password=***",
            "fetching https://***@api.example/v1?api_key=***",
            '"access_token":"***"',
        ):
            assert masked in text, (where, masked, text)
        assert text.count("bytes, not logged: neither JSON nor a URL-encoded form)") >= 5, text
    mode = stat.S_IMODE((tmp_path / "server.log").stat().st_mode)
    assert mode == 0o600, oct(mode)
