"""Started while Redis is down, the signing key in Redis: SPEC 7 (Basic and valid bearer checks do
not depend on it; recovery without restart) and docs/decisions.md ("a Redis that does not answer is
not a configuration error"). Two hosts start before ``redis-server``: Basic serves; the token route
and bearer checks (HS256 and ES256, whose key set is in Redis) answer 503, ``Retry-After: 1``; ready
says DOWN. Redis starts empty: each host reads the key and key set (the first to ask creates them),
and a grant on each port of each host is accepted by both."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import httpx
import jwt
import trustme

from fwrest.server.worker import SECRET_RETRY_S
from tests.auth.oauth2_support import TOKEN, client_context, issue_certs, oauth_section
from tests.conftest import ServerProcess, free_config, local_port, wait_for
from tests.faults.support import app_with, oauth_params
from tests.redis_support import RedisServer

ADA = ("ada", "Ada-Pw-7731")
BASIC_USER = ("basil", "Basil-Pw-5150")
OAUTH_PORTS = ("OAUTH", "ES")  # HS256 (the signing key) and ES256 (the key set)
RECOVERY_S = 10.0  # the key is read again every second; a hang guard, not a speed test


def host_config(folder: Path, certs: dict[str, Path], url: str) -> Path:
    folder.mkdir()
    basic = local_port(FwData={"Authorization": {"scheme": "basic", "OnAuth": "app.basic_check"}})
    servers = {
        "OAUTH": oauth_section(certs, onAuthparams="app.params"),
        # its key set in Redis too (SPEC 12.1): made there once Redis answers
        "ES": oauth_section(certs, onAuthparams="app.params", signingAlg="ES256"),
        "BASIC": basic,
    }
    app = app_with(oauth_params([ADA]), dict([BASIC_USER]))
    return free_config(folder, app=app, servers=servers, extra={"HTTPSERVER": {"StateStore": url}})


def usage_form(http: httpx.Client, proc: ServerProcess, auth: str) -> tuple[str, str]:
    """The action and anti-forgery token of the usage page's reset form (Basic port)."""
    page = http.get(proc.url("BASIC") + "/fw/rest/usage/time", headers={"Authorization": auth})
    assert page.status_code == 200, page.text
    form = re.search(
        r'<form method="post" action="([^"]+)"><input type="hidden" name="fw_csrf" '
        r'value="([^"]+)">',
        page.text,
    )
    assert form, page.text
    return form.group(1), form.group(2)


def grant(http: httpx.Client, proc: ServerProcess, port: str) -> httpx.Response:
    data = {"grant_type": "password", "username": ADA[0], "password": ADA[1]}
    return http.post(proc.url(port) + TOKEN, data=data)


def assert_unavailable(response: httpx.Response, what: str) -> None:
    assert response.status_code == 503, (what, response.status_code, response.text)
    assert response.headers.get("retry-after") == "1", (what, response.headers)
    body: Any = response.json()  # as when the store fails later (SPEC 7)
    assert body["code"] == 503 and "state store" in body["detailedMessage"], (what, body)


def test_hosts_started_before_redis_serve_and_issue_tokens_once_it_answers(
    ca: trustme.CA, tmp_path: Path
) -> None:
    certs = issue_certs(ca, tmp_path / "certs")
    (tmp_path / "redis").mkdir()
    redis_server = RedisServer(tmp_path / "redis")  # its port chosen, not started yet
    hosts = [host_config(tmp_path / f"host-{n}", certs, redis_server.url) for n in "ab"]
    procs: list[ServerProcess] = []
    http = httpx.Client(verify=client_context(certs), timeout=15)
    basic_auth = "Basic " + base64.b64encode(":".join(BASIC_USER).encode()).decode()
    # well formed, signed with a key the service does not have: nothing to verify it with
    stranger = jwt.encode({"sub": "ada"}, b"s" * 32, algorithm="HS256", headers={"typ": "at+jwt"})
    try:
        for config in hosts:
            procs.append(ServerProcess(config).wait_ready())
        for proc in procs:
            hello = http.get(proc.url("BASIC") + "/hello", headers={"Authorization": basic_auth})
            assert hello.status_code == 200, hello.text
            for port in OAUTH_PORTS:
                assert_unavailable(grant(http, proc, port), f"token route of {port}")
                bearer = http.get(
                    proc.url(port) + "/hello", headers={"Authorization": f"Bearer {stranger}"}
                )
                assert_unavailable(bearer, f"bearer check of {port}")
            ready = http.get(
                proc.url("BASIC") + "/fw/healthcheck/ready", headers={"Authorization": basic_auth}
            )
            assert ready.status_code == 503 and ready.json()["status"] == "DOWN", ready.text
            assert "the signing key was not read from the state store" in proc.log()
        # a form served while the shared key is unknown: signed with the worker's own key meanwhile
        assert usage_form(http, procs[0], basic_auth)[1]

        redis_server.start()
        tokens: dict[str, list[str]] = {port: [] for port in OAUTH_PORTS}
        for proc in procs:
            for port in OAUTH_PORTS:
                answers: list[httpx.Response] = []

                def granted(
                    proc: ServerProcess = proc, port: str = port, answers: list[Any] = answers
                ) -> bool:
                    answers.append(grant(http, proc, port))
                    return bool(answers[-1].is_success)

                wait_for(granted, RECOVERY_S, f"a grant on {port} after Redis started", 0.2)
                assert {a.status_code for a in answers} <= {200, 503}, [a.text for a in answers]
                tokens[port].append(answers[-1].json()["access_token"])
        for proc in procs:
            for port, issued in tokens.items():
                for token in issued:  # each host's token, accepted by both
                    hello = http.get(
                        proc.url(port) + "/hello", headers={"Authorization": f"Bearer {token}"}
                    )
                    assert hello.status_code == 200, (port, hello.text)
            log = proc.log()
            # once per port and worker (one worker here)
            assert log.count("the signing key was read from the state store") == 2, log
            assert log.count("the key set was read from") == 1, log
            assert "Traceback" not in log and "key set was not reloaded" not in log, log

        # asked again (SECRET_RETRY_S), host A's form is then signed with the shared key B takes
        def shared_form() -> bool:
            action, token = usage_form(http, procs[0], basic_auth)
            b = procs[1].url("BASIC").split("/rest")[0]
            done = http.post(
                b + action,
                data={"fw_csrf": token},
                headers={"Authorization": basic_auth, "Origin": b},
            )
            assert done.status_code in (303, 403), done.text
            return done.status_code == 303

        wait_for(shared_form, SECRET_RETRY_S + RECOVERY_S, "a form of host A taken by host B", 1)
        with redis_server.client() as direct:
            assert direct.exists("fwrest:signing_key")
            assert direct.hexists("fwrest:blobs", "fwrest-keyset")
    finally:
        http.close()
        for proc in procs:
            proc.stop()
        if redis_server.proc is not None:
            redis_server.stop()
