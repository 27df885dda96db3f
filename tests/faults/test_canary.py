"""Canary sweep (SPEC 4.2, 7 "Logs"; issue 9): ``rest_log_level=5`` (every header and body) and
``rest_error_full=1``, ``--workers 2``, a Basic and an oAuth2 port, distinctive passwords, secrets
and tokens sent every way a client can (headers, queries, forms, JSON, cookies, each shape of SPEC
7.1 "Logs", odd spellings of the routes such as ``%74oken``), a handler raising with the
``Authorization`` header, introspection, revocation and a settings change (SPEC 12.3, 13.5).

Every line on stderr, in ``LogFile`` and stdout's lifecycle lines is searched for each canary plain,
URL-encoded (``%XX``, ``+``, once or twice) and base64 (standard, URL-safe, padded or not), and each
token (a JWT by its signature, a refresh token whole and by 16-character prefix): zero hits. The log
must be the verbose one (debug lines, a traceback, masks), so an empty log cannot pass. The audit
trail is searched alike (route and store). Run with ``LogFormat=text`` and ``json`` (SPEC 13.4),
JSON lines searched as written and as parsed. The Redis password (SPEC 15,
``StateStorePassword=env:NAME``) alike, through an outage and ``fwrest check``/``serve`` of URL
passwords."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import time
from pathlib import Path
from urllib.parse import quote, quote_plus, urlencode

import httpx
import pytest
import trustme

from fwrest.config.loader import load_config
from fwrest.store import open_store
from tests.auth.oauth2_support import TOKEN, client_context, issue_certs, oauth_section
from tests.conftest import free_config, free_port, local_port, run_cli, wait_for
from tests.faults.support import app_with, served_cleanly
from tests.redis_support import RedisServer

# Each canary has a slash, a plus and a space, so that its encodings differ from it.
BASIC_PW = "Cn4ry-basicPW/7+x y"
BASIC_WRONG = "Cn4ry-wrongPW/8+w v"
OAUTH_PW = "Cn4ry-oauthPW/9+z u"
OAUTH_WRONG = "Cn4ry-owrongPW/1+q t"
CLIENT_SECRET = "Cn4ry-clientSEC/2+r s"
JSON_PW = "Cn4ry-jsonPW/3+s p"
COOKIE = "Cn4ry-cookie/4+c o"
API_KEY = "Cn4ry-apikey/5+k n"
# SPEC 7.1 "Logs"
HEADER_KEY = "Cn4ry-hdrkey/6+h m"
HEADER_TOKEN = "Cn4ry-hdrtok/7+g l"
SET_COOKIE = "Cn4ry-setck/8+f k"
SESSION_ID = "Cn4ry-sessid/9+e j"
REFERER_PW = "Cn4ry-refpw/1+d i"
ESCAPED_PW = "Cn4ry-escpw/2+c h"
SEMICOLON_PW = "Cn4ry-semipw/3+b g"
XML_PW = "Cn4ry-xmlpw/4+a f"
BRACE_PW = "Cn4ry-bracepw/5+z e"
TEXT_SECRET = "Cn4ry-text/6+y d"
MULTIPART_PW = "Cn4ry-multipw/7+x c"
USERINFO_PW = "Cn4ry-userinfo/8+w b"
URL_PARAM_PW = "Cn4ry-urlparam/9+v a"
REDIS_PW = "Cn4ry-redisPW/5+r t"  # SPEC 15: StateStorePassword=env:NAME
REDIS_URL_PW = "Cn4ry-redisURL/6+s u"  # SPEC 15: in the URL
TOKEN_USER = "Cn4ryTokUser"  # a user name: logged only where tokens are issued to it
CANARIES = {
    "basic password": BASIC_PW, "wrong basic password": BASIC_WRONG, "oauth password": OAUTH_PW,
    "wrong oauth password": OAUTH_WRONG, "client secret": CLIENT_SECRET, "JSON password": JSON_PW,
    "cookie": COOKIE, "api key": API_KEY, "X-Api-Key header": HEADER_KEY,
    "X-Auth-Token header": HEADER_TOKEN, "Set-Cookie header": SET_COOKIE,
    "X-Session-Id header": SESSION_ID, "Referer userinfo": REFERER_PW,
    "JSON key with \\u escapes": ESCAPED_PW, "form with ;": SEMICOLON_PW, "XML body": XML_PW,
    "form starting with {": BRACE_PW, "text body": TEXT_SECRET, "multipart body": MULTIPART_PW,
    "URL userinfo in a parameter": USERINFO_PW, "password in a URL-valued parameter": URL_PARAM_PW,
    "basic credentials": f"basil:{BASIC_PW}", "wrong basic credentials": f"basil:{BASIC_WRONG}",
    "client credentials": f"web:{CLIENT_SECRET}",
    "client credentials, form-encoded": f"web:{quote_plus(CLIENT_SECRET)}",
}  # fmt: skip
BASIC_AUTH = {"scheme": "basic", "OnAuth": "app.basic_check"}
PARAMS = {
    "client": [{"client_id": "web", "client_secret": CLIENT_SECRET}],
    "users": [
        {"username": "ada", "password": OAUTH_PW},
        {"username": TOKEN_USER, "password": OAUTH_PW},
    ],
    "access_expires": "1h",
    "refresh_expires": "Date()+1",
}


def forms(secret: str) -> set[str]:
    """Every form a secret could take in a log line."""
    raw = secret.encode()
    out = {secret, quote(secret, safe=""), quote(secret), quote_plus(secret)}
    # encoded twice: a URL inside a query value (a password in its userinfo or its own query)
    once = quote(secret, safe="")
    out |= {quote(once, safe=""), quote_plus(once), quote_plus(quote_plus(secret))}
    for encoded in (base64.b64encode(raw), base64.urlsafe_b64encode(raw)):
        out |= {encoded.decode(), encoded.decode().rstrip("=")}
    return out


def hits_in(texts: dict[str, str], needles: dict[str, set[str]]) -> list[tuple[str, str, str, str]]:
    """Every form of every needle found in a text: (where, needle, form, the text around it)."""
    return [
        (where, name, form, text[max(0, text.find(form) - 80) : text.find(form) + 80])
        for where, text in texts.items()
        for name, variants in needles.items()
        for form in variants
        if form in text
    ]


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_no_secret_reaches_the_log_at_debug_level(
    ca: trustme.CA, tmp_path: Path, log_format: str
) -> None:
    certs = issue_certs(ca, tmp_path / "certs")
    basic = local_port(FwData={"Authorization": BASIC_AUTH})
    oauth = oauth_section(certs, onAuthparams="app.params", onAuthNoCheckUri="app.public")
    config = free_config(
        tmp_path,
        app=app_with(PARAMS, {"basil": BASIC_PW}),
        servers={"BASIC": basic, "OAUTH": oauth},
        general={"rest_log_level": 5, "rest_error_full": 1, "rest_log_stringsize": 100000},
        extra={"HTTPSERVER": {"StateStore": "sqlite", "LogFormat": log_format}},
    )
    tokens: list[str] = []
    seen: list[tuple[str, int]] = []
    with served_cleanly(config, workers=2) as proc:
        ctx = client_context(certs)
        with (
            httpx.Client(timeout=15) as http,
            httpx.Client(verify=ctx, timeout=15) as https,
        ):
            b = proc.url("BASIC")

            def basic(method: str, path: str, password: str = BASIC_PW, **kw: object) -> int:
                status = http.request(method, b + path, auth=("basil", password), **kw).status_code  # type: ignore[arg-type]
                seen.append((f"basic {method} {path[:20]}", status))
                return status

            assert basic("GET", "/hello") == 200
            assert basic("GET", "/hello", BASIC_WRONG) == 403
            assert basic("GET", "/hello", headers={"X-Debug": BASIC_PW}) == 200
            assert basic("GET", "/hello?" + urlencode({"password": BASIC_PW})) == 200
            assert basic("GET", "/hello?" + urlencode({"api_key": API_KEY})) == 200
            assert basic("GET", "/hello", headers={"Cookie": f"session={quote(COOKIE)}"}) == 200
            login = json.dumps({"username": "basil", "password": JSON_PW})
            headers = {"Content-Type": "application/json"}
            assert basic("POST", "/login-json", content=login, headers=headers) == 200
            assert basic("GET", "/raise-auth") == 500
            # SPEC 7.1 "Logs": header names, bodies after parsing, URLs
            named = {
                "X-Api-Key": HEADER_KEY,
                "X-Auth-Token": HEADER_TOKEN,
                "Set-Cookie": f"sid={quote(SET_COOKIE)}",
                "X-Session-Id": SESSION_ID,
                "Referer": f"https://basil:{quote(REFERER_PW, safe='')}@app.example/p",
            }
            assert basic("GET", "/hello", headers=named) == 200
            escaped = '{"p\\u0061ssword": ' + json.dumps(ESCAPED_PW) + ', "user": "basil"}'
            assert basic("POST", "/login-json", content=escaped, headers=headers) == 200
            form_type = {"Content-Type": "application/x-www-form-urlencoded"}
            semicolon = f"user=basil;password={quote_plus(SEMICOLON_PW)};x=1&page=2"
            assert basic("POST", "/sink", content=semicolon, headers=form_type) == 200
            xml = f"<login><password>{XML_PW}</password></login>"
            xml_type = {"Content-Type": "application/xml"}
            assert basic("POST", "/sink", content=xml, headers=xml_type) == 200
            brace = "{user=basil&password=" + quote_plus(BRACE_PW)
            assert basic("POST", "/sink", content=brace, headers=form_type) == 200
            text_type = {"Content-Type": "text/plain"}
            assert basic("POST", "/sink", content=TEXT_SECRET, headers=text_type) == 200
            multipart = {"password": (None, MULTIPART_PW)}
            assert basic("POST", "/sink", files=multipart) == 200  # type: ignore[arg-type]
            urls = {
                "next": f"https://basil:{quote(USERINFO_PW, safe='')}@app.example/cb",
                "back": f"https://app.example/cb?password={quote_plus(URL_PARAM_PW)}&x=1",
            }
            assert basic("GET", "/hello?" + urlencode(urls)) == 200

            o = proc.url("OAUTH")
            token_url = o + TOKEN

            def token(response: httpx.Response, expect: int) -> dict[str, str]:
                seen.append((f"token {response.request.method}", response.status_code))
                assert response.status_code == expect, response.text
                body = response.json()
                tokens.extend(v for k, v in body.items() if k.endswith("_token"))
                return dict(body)

            def refresh_of(issued: dict[str, str]) -> dict[str, str]:
                return {"grant_type": "refresh_token", "refresh_token": issued["refresh_token"]}

            grant = {"grant_type": "password", "username": "ada", "password": OAUTH_PW}
            query = {**grant, "client_id": "web", "client_secret": CLIENT_SECRET}
            first = token(https.post(token_url, data=query), 200)
            # RFC 6749 2.3.1: the client id and secret are form-encoded, then base64 in the header
            header_auth = ("web", quote_plus(CLIENT_SECRET))
            second = token(https.post(token_url, data=grant, auth=header_auth), 200)
            third = token(https.get(token_url + "?" + urlencode(query)), 200)
            wrong = urlencode({**query, "password": OAUTH_WRONG})
            token(https.get(token_url + "?" + wrong), 400)
            refreshed = token(https.post(token_url, data=refresh_of(first)), 200)
            token(https.get(token_url + "?" + urlencode(refresh_of(second))), 200)
            token(https.post(token_url, data=refresh_of(first)), 400)  # revokes first's family
            token(https.post(token_url, content=json.dumps(grant).encode(), headers=headers), 400)
            twice = (urlencode(grant) + "&password=" + quote(OAUTH_PW)).encode()
            token(https.post(token_url, content=twice, headers=form_type), 400)
            # the token route spelled otherwise: known by the normalised path (SPEC 7.1)
            spelled = o + TOKEN.replace("/token", "/%74oken")
            by_name = {**grant, "username": TOKEN_USER, "client_id": "web"}
            by_name["client_secret"] = CLIENT_SECRET
            named = token(https.post(spelled, data=by_name), 200)
            wrong_user = urlencode({**by_name, "password": OAUTH_WRONG})
            token(https.get(spelled + "?" + wrong_user), 400)

            def bearer(path: str, access: str, expect: int, **kw: object) -> None:
                headers = {"Authorization": f"Bearer {access}", **kw.pop("headers", {})}  # type: ignore[dict-item]
                response = https.request(kw.pop("method", "GET"), o + path, headers=headers, **kw)  # type: ignore[arg-type]
                seen.append((f"bearer {path[:20]}", response.status_code))
                assert response.status_code == expect, response.text

            access = third["access_token"]
            bearer("/hello", access, 200)
            bearer("/hello?" + urlencode({"access_token": access}), access, 200)
            bearer("/raise-auth", access, 500)
            bearer("/login-json", access, 200, method="POST", content=login, headers=headers)
            tampered = access[:-4] + ("AAAA" if not access.endswith("AAAA") else "BBBB")
            bearer("/hello", tampered, 401)
            revoked_bearer = {"Authorization": f"Bearer {refreshed['access_token']}"}
            # refused within 1 s; a hang guard on a busy machine
            wait_for(
                lambda: https.get(o + "/hello", headers=revoked_bearer).status_code == 401,
                15,
                "the revoked bearer refused",
            )
            seen.append(("bearer revoked", 401))
            # SPEC 12.3: introspection and revocation carry tokens in bodies and queries too (revoke
            # spelled otherwise: known by the normalised path)
            introspect_url = o + "/fw/oauth2/introspect"
            client = {"client_id": "web", "client_secret": CLIENT_SECRET}
            by_query = introspect_url + "?" + urlencode({"token": named["refresh_token"]})
            for response in (
                https.post(introspect_url, data={"token": access, **client}),
                https.post(by_query, auth=header_auth),
            ):
                seen.append(("introspect", response.status_code))
                assert response.json()["active"] is True, response.text
            revoked = https.post(
                o + "/fw/oauth2/%72evoke", data={"token": named["refresh_token"], **client}
            )
            seen.append(("revoke", revoked.status_code))
            assert revoked.status_code == 200, revoked.text
            # SPEC 13.5: a settings change, then the trail from the route (BASIC has no onAdmin: any
            # user reads it) once it holds the change, replay and revocation
            assert basic("POST", "/fw/rest/config", json={"rest_log_stringsize": 100001}) == 200
            wanted = {"settings.change", "refresh.replay", "revocation"}
            deadline = time.monotonic() + 10
            while True:
                trail = http.get(b + "/fw/rest/audit?limit=10000", auth=("basil", BASIC_PW))
                assert trail.status_code == 200, trail.text
                if wanted <= {e["event"] for e in trail.json()}:
                    break
                assert time.monotonic() < deadline, trail.text
                time.sleep(0.05)
            seen.append(("audit", trail.status_code))
    # the audit trail as the state store keeps it
    with contextlib.closing(open_store("sqlite", load_config(config).data_path)) as store:
        kept = b"\n".join(store.audit_events(0.0, None, 10000)).decode()
    assert "settings.change" in kept and "refresh.replay" in kept and "revocation" in kept

    stdout = "\n".join(proc.stdout_lines) + "\n"
    logs = {"stderr": proc.log(), "LogFile": proc.file_log(), "stdout": stdout}
    if log_format == "json":
        # each line JSON; searched as written and as read (JSON escapes what text shows as is)
        for where in ("stderr", "LogFile"):
            records = [json.loads(line) for line in logs[where].splitlines()]
            assert all({"ts", "level", "logger", "message"} <= set(r) for r in records)
            logs[f"{where} (read)"] = "".join(
                f"{r['message']}\n{r.get('exception', '')}\n{r.get('path', '')}\n"
                f"{r.get('user') or ''}\n"
                for r in records
            )
    # the audit trail, read by the route and in the store: no secret either
    logs["audit route"] = trail.text
    logs["audit route (read)"] = json.dumps(trail.json(), ensure_ascii=False)
    logs["audit store"] = kept
    lines = sum(text.count("\n") for text in logs.values())
    needles: dict[str, set[str]] = {name: forms(value) for name, value in CANARIES.items()}
    for i, value in enumerate(tokens):
        if value.count(".") == 2:  # a JWT: its signature is the secret part
            needles[f"access token {i}"] = {value, value.rsplit(".", 1)[1]}
        else:  # a refresh token: random throughout
            needles[f"refresh token {i}"] = {value, quote(value, safe=""), value[:16]}
    hits = hits_in(logs, needles)
    print(
        f"canary sweep: {len(seen)} requests {sorted(set(seen))}; {len(CANARIES)} canaries and "
        f"{len(tokens)} tokens in {sum(len(v) for v in needles.values())} forms searched in "
        f"{lines} log lines ({', '.join(f'{k} {len(v)} bytes' for k, v in logs.items())}): "
        f"{len(hits)} hits"
    )
    for hit in hits:
        print("  HIT", hit)
    assert hits == []
    # the log is the verbose one, so the sweep searched something
    text = logs["LogFile (read)" if log_format == "json" else "LogFile"]
    assert "request headers {" in text and "response 200 body" in text  # level 5
    assert "Traceback (most recent call last)" in text  # rest_error_full=1
    assert "Authorization was Basic ***" in text and "Authorization was Bearer ***" in text
    assert "authorization: ***" in text and "cookie: ***" in text
    assert "password=***" in text and "client_secret=***" in text and "api_key=***" in text
    assert '"password":"***"' in text
    for masked in ("x-api-key: ***", "x-auth-token: ***", "set-cookie: ***", "x-session-id: ***"):
        assert masked in text, masked
    assert "referer: https://***@app.example/p" in text
    assert "user=basil;password=***&page=2" in text
    assert text.count("not logged: neither JSON nor a URL-encoded form") >= 4
    assert "next=https://***@app.example/cb" in text
    assert "(not logged: token route)" in text
    # the grant's user: only on the auth log's own lines (issued or refused, a family revoked, SPEC
    # 12.3) and that revocation's audit events (JSON, log line, the route's answer at debug), never
    # an access or debug line
    named = (
        "tokens issued to",
        "password grant refused for user",
        "token family of user",
        '"event":"revocation"',
        '\\"event\\":\\"revocation\\"',  # the route's answer in a JSON line
        "revocation actor=",
    )
    for where, logged in logs.items():
        if where.startswith("audit route"):
            continue  # one line of every event: the store's lines are checked one by one
        for line in logged.splitlines():
            assert TOKEN_USER not in line or any(n in line for n in named), (where, line)
    assert f"tokens issued to '{TOKEN_USER}'" in text
    assert "its whole token family is revoked" in text
    assert f"token family of user '{TOKEN_USER}' revoked by client 'web'" in text
    assert lines > 100


def test_the_redis_password_is_never_shown(tmp_path: Path) -> None:
    (tmp_path / "redis").mkdir()
    redis = RedisServer(tmp_path / "redis", password=REDIS_PW).start()
    env = {"FWREST_CANARY_REDIS_PW": REDIS_PW}
    basic = local_port(FwData={"Authorization": BASIC_AUTH})
    monitor_port = free_port()
    store = {"StateStore": redis.url, "StateStorePassword": "env:FWREST_CANARY_REDIS_PW"}
    config = free_config(
        tmp_path,
        app=app_with(None, {"basil": BASIC_PW}),
        servers={"BASIC": basic},
        general={"rest_log_level": 5, "rest_error_full": 1},
        extra={
            "HTTPSERVER": store,
            "APP_MONITOR": {"Enable": 1, "HostName": "127.0.0.1", "Port": monitor_port},
        },
    )
    answers: list[str] = []
    with served_cleanly(config, workers=2, env=env) as proc:
        base = proc.url("BASIC")
        monitor = f"http://127.0.0.1:{monitor_port}"
        routes = ["/fw/rest/config", "/fw/healthcheck", "/fw/healthcheck/ready",
                  "/fw/environment", "/fw/server/environment", "/fw/rest/usage/time"]  # fmt: skip
        probes = ["/server/metrics?all", "/health/ready", "/health/live"]
        with httpx.Client(timeout=15, auth=("basil", BASIC_PW)) as http:

            def read_all(expect_store: str) -> None:
                for route in routes:
                    for accept in ("application/json", "text/html"):
                        answer = http.get(base + route, headers={"Accept": accept})
                        answers.append(f"{route} {answer.status_code} {answer.text}")
                for route in probes:
                    answers.append(httpx.get(monitor + route, timeout=15).text)
                health = http.get(base + "/fw/healthcheck/ready").json()
                assert health["checks"]["store"]["status"] == expect_store, health

            assert http.get(base + "/hello").status_code == 200
            read_all("UP")
            redis.stop()  # the store's errors: logged, and reported by the probes
            # the store check runs every second: wait for its verdict (a hang guard of 15 s)
            ready = base + "/fw/healthcheck/ready"
            store_down = lambda: http.get(ready).json()["checks"]["store"]["status"] == "DOWN"  # noqa: E731
            wait_for(store_down, 15, "the store check's DOWN")
            for _ in range(3):
                wrong = http.get(base + "/hello", auth=("basil", BASIC_WRONG))
                answers.append(f"{wrong.status_code} {wrong.text}")
            change = http.post(base + "/fw/rest/config", json={"rest_log_level": 4})
            answers.append(f"{change.status_code} {change.text}")
            # a usage reset fails closed as a settings change does (SPEC 7): it was a 500
            reset = http.post(base + "/fw/rest/usage/time/reset", json={})
            assert (reset.status_code, reset.headers.get("retry-after")) == (503, "1"), reset.text
            answers.append(f"{reset.status_code} {reset.text}")
            read_all("DOWN")
    # checks of this service and of a URL password, a start refused for a wrong one (Redis up)
    redis.start()
    try:
        admin = redis.client()  # an ACL user of its own, its password in the URL
        admin.acl_setuser(
            "canary", enabled=True, passwords=[f"+{REDIS_URL_PW}"], keys="*", commands=["+@all"]
        )
        admin.close()
        outputs = {}
        text = config.read_text()
        in_url = redis.url.replace("redis://", f"redis://canary:{quote(REDIS_URL_PW, safe='')}@")
        for name, keys in {
            "check env": store,
            "check url": {"StateStore": in_url},
            # redis-py's query form (the usual one for unix:// sockets)
            "check query": {
                "StateStore": f"{redis.url}?username=canary&password={quote(REDIS_URL_PW, safe='')}"
            },
            "serve wrong url": {"StateStore": in_url.replace("Cn4ry", "Wr0ng")},
        }.items():
            folder = tmp_path / name.replace(" ", "-")
            folder.mkdir()
            (folder / "app.py").write_text((tmp_path / "app.py").read_text())
            sections = json.loads(text)
            sections["HTTPSERVER"].pop("StateStorePassword")
            sections["HTTPSERVER"].update(keys)
            sections["APP_MONITOR"]["Port"] = free_port()
            path = folder / "service.json"
            path.write_text(json.dumps(sections))
            os.environ.update(env)
            try:
                done = run_cli(name.split()[0], str(path), cwd=folder, timeout=60)
            finally:
                os.environ.pop("FWREST_CANARY_REDIS_PW")
            outputs[name] = (done.returncode, done.stdout + done.stderr)
    finally:
        redis.stop()
    for name, code, shown in [
        ("check env", 0, "state store: redis://127.0.0.1"),
        ("check url", 0, "state store: redis://***@127.0.0.1"),
        ("check query", 0, "username=***&password=***"),
        ("serve wrong url", 2, "[HTTPSERVER] StateStore: Redis refused the password"),
    ]:
        assert outputs[name][0] == code and shown in outputs[name][1], (name, outputs[name])
    log = proc.log() + proc.file_log() + "\n".join(proc.stdout_lines)
    seen = {"log": log, "answers": "\n".join(answers)}
    seen.update((name, out) for name, (_code, out) in outputs.items())
    # the store's errors were logged, with the URL, and answered
    assert f"redis store {redis.url}: Error 111" in seen["log"]
    assert "the state store is unavailable" in seen["answers"]
    needles = {"StateStorePassword": forms(REDIS_PW), "URL password": forms(REDIS_URL_PW)}
    needles["wrong URL password"] = forms(REDIS_URL_PW.replace("Cn4ry", "Wr0ng"))
    hits = hits_in(seen, needles)
    sizes = ", ".join(f"{k} {len(v)} bytes" for k, v in seen.items())
    print(f"Redis password sweep: {len(answers)} answers, {sizes}: {len(hits)} hits")
    assert hits == []
