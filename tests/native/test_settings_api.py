"""``/fw/rest/config`` (SPEC 5). Both services: ``rest_log_level=3``, ``rest_log_stringsize=60``,
``rest_reload_time=1``, sqlite. ``server`` (``--workers 2``, open ``HTTP_REST`` and ``HTTP_BASIC``
whose ``onAdmin`` allows ada) for what reaches every worker within 1 s (``settled``, from their own
lines); ``client``/``basic_client`` (in process) for what one worker answers and logs. An autouse
fixture clears run-time values, waiting the 1 s after a change on ``server``; a worker may show old
values until then, so reads across workers wait for each one's line."""

from __future__ import annotations

import html
import json
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from fwrest.testing import Client
from tests.builders import own_ports
from tests.conftest import APP_SOURCE, ServerProcess, free_config, local_port, serving
from tests.native.support import (
    SETTING_NAMES,
    FileLog,
    auth_service,
    basic,
    change,
    clear_settings,
    form_token,
    get_settings,
    hit_both_workers,
    in_process,
    labels_of,
    post_form,
    post_settings,
    settle,
    settled,
    settled_change,
    wait_for,
    wait_shown,
    wait_worker_labels,
)

AUTH_SOURCE = """
USERS = {"ada": "Ada-Pw-1", "bob": "Bob-Pw-2", "carl": "C-1", "dan": "D-1"}


def check(user, password):
    return USERS.get(user) == password


def admin(user):
    return {"ada": True, "carl": 1, "dan": "yes"}.get(user, False)
"""

ADA = basic("ada", "Ada-Pw-1")
BOB = basic("bob", "Bob-Pw-2")
FILE_GENERAL = {"rest_log_level": 3, "rest_log_stringsize": 60, "rest_reload_time": 1}


SERVERS = {
    "HTTP_REST": local_port(),
    "HTTP_BASIC": local_port(
        FwData={
            "Authorization": {
                "scheme": "basic",
                "OnAuth": "auth.check",
                "onAdmin": "auth.admin",
                "maxFailures": 1_000_000,
            }
        }
    ),
}


def write_service(tmp: Path, name: str = "") -> Path:
    """Modules ``app``/``auth`` for ``server``, ``{name}_app``/``{name}_auth`` in process."""
    servers = SERVERS
    if name:  # each port on a number of its own in the client's URL and Host, as a server's
        servers = own_ports(SERVERS)
        authorization = servers["HTTP_BASIC"]["FwData"]["Authorization"]
        authorization.update(OnAuth=f"{name}_auth.check", onAdmin=f"{name}_auth.admin")
    extra = {"HTTPSERVER": {"StateStore": "sqlite"}}
    general = dict(FILE_GENERAL)
    return auth_service(
        tmp, name, AUTH_SOURCE, servers=servers, extra=extra, general=general, app=APP_SOURCE
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    config = write_service(tmp_path_factory.mktemp("settings_api"))
    with serving(config, workers=2) as proc:
        yield proc


@pytest.fixture(scope="module")
def basic_base(server: ServerProcess) -> str:
    return server.url("HTTP_BASIC")


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The in-process service: ``HTTP_REST`` and ``HTTP_BASIC`` as ``server`` has them."""
    return write_service(tmp_path_factory.mktemp("settings_api_inproc"), "settings_api")


@pytest.fixture(scope="module")
def client(config: Path) -> Iterator[Client]:
    """The in-process client of ``HTTP_REST`` (base URL ``http://127.0.0.1:PORT/rest``)."""
    with in_process(config, "HTTP_REST") as client:
        yield client


@pytest.fixture(scope="module")
def basic_client(config: Path) -> Iterator[Client]:
    """The in-process client of ``HTTP_BASIC``."""
    with in_process(config, "HTTP_BASIC") as client:
        yield client


@pytest.fixture(autouse=True)
def no_runtime_values(request: pytest.FixtureRequest) -> Iterator[None]:
    """No run-time value left: the client's worker at once, ``server``'s within 1 s (SPEC 5)."""
    yield
    if "client" in request.fixturenames:
        change(request.getfixturevalue("client"), dict.fromkeys(SETTING_NAMES))
    if "base" in request.fixturenames:
        clear_settings(request.getfixturevalue("base"))


def since(server: ServerProcess | FileLog, mark: int) -> str:
    return server.log()[mark:]


def access_lines(text: str, path: str = "") -> list[str]:
    return [line for line in text.splitlines() if " fwrest.access " in line and path in line]


# -- the JSON API ----------------------------------------------------------------------------------


def test_get_json_gives_exactly_the_five_settings_with_their_sources(client: Client) -> None:
    r = client.get("/fw/rest/config", headers={"Accept": "application/json"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert list(body) == ["settings"]
    settings = body["settings"]
    assert sorted(settings) == sorted(SETTING_NAMES)
    for name, info in settings.items():
        assert sorted(info) == ["allowed", "default", "effective", "file", "runtime"], name
        low, high = (int(x) for x in info["allowed"].split("-"))
        assert low <= info["default"] <= high, (name, info)
    assert settings["rest_log_level"] == dict(
        runtime=None, file=3, default=3, effective=3, allowed="0-5"
    )
    assert settings["rest_error_full"] == dict(
        runtime=None, file=None, default=0, effective=0, allowed="0-1"
    )
    assert settings["rest_trace_time"] == dict(
        runtime=None, file=None, default=0, effective=0, allowed="0-2"
    )
    assert settings["rest_reload_time"] == dict(
        runtime=None, file=1, default=60, effective=1, allowed="1-86400"
    )
    assert settings["rest_log_stringsize"] == dict(
        runtime=None, file=60, default=200, effective=60, allowed="0-1048576"
    )


def test_post_changes_a_setting_and_null_clears_it(server: ServerProcess, base: str) -> None:
    mark = len(server.log())
    r = post_settings(base, {"rest_log_level": 5})
    assert r.status_code == 200, r.text
    assert r.json()["settings"]["rest_log_level"] == dict(
        runtime=5, file=3, default=3, effective=5, allowed="0-5"
    )
    # a second, partial change leaves the first alone
    change(base, {"rest_trace_time": 1})
    # within 1 s every worker shows both: GETs on fresh connections (both workers) agree
    settled(server, mark, "rest_log_level 3 -> 5", "rest_trace_time 0 -> 1")
    for _ in range(6):
        settings = get_settings(base)
        assert settings["rest_log_level"]["effective"] == 5
        assert settings["rest_trace_time"]["runtime"] == 1
    mark = len(server.log())
    r = post_settings(base, {"rest_log_level": None})
    assert r.status_code == 200, r.text
    level = r.json()["settings"]["rest_log_level"]
    assert (level["runtime"], level["effective"]) == (None, 3)
    settled(server, mark, "rest_log_level 5 -> 3")
    for _ in range(6):
        settings = get_settings(base)
        level = settings["rest_log_level"]
        assert (level["runtime"], level["effective"]) == (None, 3)
        assert settings["rest_trace_time"]["runtime"] == 1  # only the named key was cleared


@pytest.mark.parametrize(
    ("body", "names"),
    [
        ({"rest_log_level": 6}, ("rest_log_level", "0-5")),
        ({"rest_log_level": "x"}, ("rest_log_level", "0-5")),
        ({"rest_log_level": -1}, ("rest_log_level", "0-5")),
        ({"rest_log_level": 2.5}, ("rest_log_level", "0-5")),
        ({"rest_log_level": True}, ("rest_log_level", "0-5")),
        ({"rest_error_full": 2}, ("rest_error_full", "0-1")),
        ({"rest_trace_time": 3}, ("rest_trace_time", "0-2")),
        ({"no_such_setting": 1}, ("no_such_setting", "rest_log_level")),
        # a valid value beside an invalid one: the whole change is refused
        ({"rest_log_level": 4, "rest_error_full": 6}, ("rest_error_full", "0-1")),
        ({"rest_log_level": 4, "no_such_setting": 1}, ("no_such_setting", "rest_log_level")),
        # JSON is typed: a number in a string, an empty string (null clears), other digits
        ({"rest_log_level": "5"}, ("rest_log_level", "0-5", "null to clear")),
        ({"rest_log_level": ""}, ("rest_log_level", "0-5", "null to clear")),
        ({"rest_log_level": "\u0663"}, ("rest_log_level", "0-5")),  # ARABIC-INDIC DIGIT THREE
        ({"rest_log_level": {"level": 5}}, ("rest_log_level", "0-5")),
        ({"rest_log_level": [5]}, ("rest_log_level", "0-5")),
        ({"rest_log_stringsize": 10**30}, ("rest_log_stringsize", "0-1048576")),
        # past the digits int() converts (4300): was a 500
        ({"rest_log_stringsize": "9" * 5000}, ("rest_log_stringsize", "0-1048576", "(5002 chars)")),
    ],
)
def test_an_invalid_value_is_400_naming_the_key_and_changes_nothing(
    client: Client, body: dict[str, Any], names: tuple[str, ...]
) -> None:
    before = get_settings(client)
    r = post_settings(client, body)
    print(r.status_code, r.text)
    assert r.status_code == 400
    detail = r.json()["detailedMessage"]
    for name in names:
        assert name in detail, detail
    assert len(detail) < 300, detail  # a huge value is not repeated whole
    assert get_settings(client) == before


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"{not json", "line 1 column 2"),
        (b"[1, 2]", "send an object"),
        (b'"rest_log_level"', "send an object"),
        (b"null", "send an object"),
        (b"", "the body is empty"),  # was 200, as if it were {}
        (b" \n", "the body is empty"),
        (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
        (b"\xff\xfe{}", "not valid JSON"),
        # a key given twice, as the audit and token routes refuse a repeated parameter (which
        # value was meant?); it was 200, the last one in force
        (b'{"rest_log_level": 3, "rest_log_level": 4}', "'rest_log_level' is given twice"),
        # one key in two spellings (keys are case-insensitive, SPEC 9)
        (b'{"rest_log_level": 3, "REST_LOG_LEVEL": 4}', "'rest_log_level' is given twice"),
        (b'{"rest_trace_time": 1, "x": 1, "x": 2}', "'x' is given twice"),
    ],
)
def test_a_body_that_is_no_object_or_names_a_key_twice_is_400_and_changes_nothing(
    client: Client, raw: bytes, why: str
) -> None:
    before = get_settings(client)
    r = client.post("/fw/rest/config", content=raw, headers={"Content-Type": "application/json"})
    print(r.status_code, r.text[:200])
    assert r.status_code == 400, r.text
    assert why in r.json()["detailedMessage"], r.text
    assert get_settings(client) == before


def test_a_form_field_given_twice_or_unread_is_400_on_the_page_and_changes_nothing(
    client: Client,
) -> None:
    before = get_settings(client)
    token = form_token(client)
    for body, said in (
        (f"fw_csrf={token}&rest_log_level=3&rest_log_level=5", "is given twice"),
        (f"fw_csrf={token}&rest_log_level=3&REST_Log_Level=5", "is given twice"),
        (f"fw_csrf={token}&fw_csrf={token}&rest_log_level=5", "is given twice"),
        # it answered these with the JSON error body
        (f"fw_csrf={token}&rest_log_level=5" + "&x=" * 31, "has more than 32 fields"),
        (f"fw_csrf={token}&rest_log_level=5&x=\udcff", "is not UTF-8 text"),
    ):
        r = client.post(
            "/fw/rest/config",
            content=body.encode("utf-8", "surrogateescape"),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert r.status_code == 400, (body, r.text[:300])
        assert r.headers["content-type"].startswith("text/html"), r.text[:300]
        message = re.search(r'<p id="message" class="error"[^>]*>([^<]*)</p>', r.text)
        assert message and said in html.unescape(message.group(1)), r.text[:500]
        assert get_settings(client) == before


def test_setting_names_are_case_insensitive_and_answered_in_lower_case(client: Client) -> None:
    """SPEC 9: keys are case-insensitive; the answer names the canonical key (the audit
    event too: tests/native/test_audit.py)."""
    r = post_settings(client, {"REST_LOG_LEVEL": 4, "Rest_Trace_Time": 1})
    assert r.status_code == 200, r.text
    settings = r.json()["settings"]
    assert (settings["rest_log_level"]["runtime"], settings["rest_trace_time"]["runtime"]) == (4, 1)
    assert "REST_LOG_LEVEL" not in settings
    assert r.json()["changed"] == ["rest_log_level", "rest_trace_time"]
    bad = post_settings(client, {"REST_LOG_LEVEL": 9})
    assert bad.status_code == 400
    assert "rest_log_level must be a whole number in 0-5" in bad.json()["detailedMessage"]
    # the form's fields too
    form = post_form(client, {"fw_csrf": form_token(client), "REST_ERROR_FULL": "1"})
    assert form.status_code == 200 and "Saved" in form.text, form.text[:500]
    assert get_settings(client)["rest_error_full"]["runtime"] == 1


def test_a_body_over_max_body_size_is_413_and_changes_nothing(client: Client) -> None:
    before = get_settings(client)
    huge = b'{"rest_log_level": 5, "pad": "' + b"x" * (1024 * 1024) + b'"}'
    r = client.post("/fw/rest/config", content=huge, headers={"Content-Type": "application/json"})
    assert r.status_code == 413, r.text
    assert get_settings(client) == before


# -- every worker, within 1 s ----------------------------------------------------------------------


def test_a_change_reaches_both_workers_within_one_second(server: ServerProcess, base: str) -> None:
    labels = wait_worker_labels(server, 2)
    assert len(labels) == 2, labels

    # SPEC 5's second: from the change's answer to each worker's own line applying it (``settled``),
    # not the test's read nor the requests' arrival
    mark = settled_change(server, base, {"rest_log_level": 2}, "rest_log_level 3 -> 2")
    pids = hit_both_workers(base)
    print(f"level 2: {len(pids)} requests on workers {sorted(labels_of(labels, pids))}")
    # lines are in order: once each logged the next change, a (wrong) access line is before it
    change(base, {"rest_log_level": 3})
    settled(server, mark, "rest_log_level 2 -> 3")
    lines = access_lines(since(server, mark))
    quiet = [line for line in lines if "POST /rest/fw/rest/config 200" not in line]  # but 2 -> 3
    assert quiet == [], quiet  # neither worker logs successes at level 2

    mark = len(server.log())
    pids = hit_both_workers(base)
    wanted = labels_of(labels, pids)
    assert wanted == {"w1", "w2"}
    answered = {w: sum(1 for p in pids if labels[p] == w) for w in wanted}

    def per_worker() -> dict[str, int]:
        return {w: len(access_lines(since(server, mark), f"[{w}]")) for w in wanted}

    # a line is written after the answer, at the loop turn's end: wait for each worker's count
    took = wait_for(
        lambda: all(n >= answered[w] for w, n in per_worker().items()),
        5,
        "access lines of both workers at level 3",
    )
    print(f"level 3: both workers logged again ({took:.3f} s after the requests)")
    assert per_worker() == answered, per_worker()


@contextmanager
def general_edited(server: ServerProcess, base: str, **values: int) -> Iterator[None]:
    """[GENERAL] rewritten for the block (both workers read it), restored and read back after."""
    path = server.config
    original = path.read_text()
    doc = json.loads(original)
    doc["GENERAL"].update(values)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2))
    os.replace(tmp, path)
    try:
        yield
    finally:
        mark = len(server.log())
        tmp.write_text(original)
        os.replace(tmp, path)
        # each worker re-reads on its own clock: a second after one shows it, the other may not
        back = [f"{k} {v} -> {FILE_GENERAL[k]}" for k, v in values.items()]
        wait_shown(server, mark, *back)
        restored = get_settings(base)
        assert all(restored[k]["file"] == FILE_GENERAL[k] for k in values), restored


def both_reread(server: ServerProcess, mark: int, change_text: str, timeout: float) -> None:
    """Both workers logged, after ``mark``, re-reading ``[GENERAL]`` into ``change_text``."""

    def both() -> bool:
        text = since(server, mark)
        return all(f"[{w}] settings changed (sync): {change_text}" in text for w in ("w1", "w2"))

    took = wait_for(both, timeout, f"both workers re-reading [GENERAL]: {change_text}", 0.1)
    print(f"both workers re-read [GENERAL] {took:.3f} s after the edit")


def test_the_config_file_general_is_reread_after_rest_reload_time(
    server: ServerProcess, base: str
) -> None:
    assert get_settings(base)["rest_log_stringsize"]["file"] == 60
    mark = len(server.log())
    with general_edited(server, base, rest_log_stringsize=73):
        both_reread(server, mark, "rest_log_stringsize 60 -> 73", 8)  # rest_reload_time=1
        settings = get_settings(base)["rest_log_stringsize"]
        assert (settings["file"], settings["effective"]) == (73, 73)


def test_a_file_change_that_turns_the_log_off_or_on_is_in_the_log(
    server: ServerProcess, base: str
) -> None:
    """SPEC 13.5: the re-read of [GENERAL] that sets rest_log_level 0 is an audit line (at the
    level before it), as is the one that sets it back (at the level after it)."""
    mark = len(server.log())
    with general_edited(server, base, rest_log_level=0):
        server.wait_log('"key":"rest_log_level","old":3,"new":0,"file":0', 8, mark)
        time.sleep(2.5)  # the other worker re-reads it meanwhile (every second), silently
    server.wait_log('"key":"rest_log_level","old":0,"new":3,"file":3', 8, mark)


def test_a_shorter_rest_reload_time_set_at_run_time_applies_at_once(
    server: ServerProcess, base: str
) -> None:
    # a long interval first: every worker re-reads once more, then would wait 30 s ...
    change(base, {"rest_reload_time": 30})
    time.sleep(2.0)
    # ... until the interval is shortened again at run time
    mark = settled_change(server, base, {"rest_reload_time": 1}, "rest_reload_time 30 -> 1")
    with general_edited(server, base, rest_log_stringsize=74):
        both_reread(server, mark, "rest_log_stringsize 60 -> 74", 6)  # 1 set at run time
        change(base, {"rest_reload_time": None})


# -- the visible effect of each setting on the log -------------------------------------------------


def test_rest_log_level_0_silences_access_lines(server: ServerProcess, base: str) -> None:
    settle(change(base, {"rest_log_level": 0}))
    mark = len(server.log())
    pids = hit_both_workers(base)
    assert httpx.get(f"{base}/nowhere").status_code == 404
    assert httpx.get(f"{base}/boom").status_code == 500
    time.sleep(0.3)
    text = since(server, mark)
    print(f"{len(pids) + 2} requests at level 0; log grew by {len(text)} characters")
    assert access_lines(text) == []
    assert " fwrest." not in text


def test_rest_error_full_0_short_and_1_full_traceback(server: ServerProcess, base: str) -> None:
    mark = len(server.log())
    for _ in range(4):
        assert httpx.get(f"{base}/boom").status_code == 500
    wait_for(lambda: len(access_lines(since(server, mark), "/rest/boom 500")) == 4, 5, "4 lines")
    short = since(server, mark)
    assert short.count("RuntimeError: kaboom-secret-detail at ") == 4, short
    assert "rest_error_full=1 logs the whole traceback" in short
    assert "Traceback (most recent call last)" not in short

    mark = settled_change(server, base, {"rest_error_full": 1}, "rest_error_full 0 -> 1")
    for _ in range(4):
        assert httpx.get(f"{base}/boom").status_code == 500
    wait_for(lambda: len(access_lines(since(server, mark), "/rest/boom 500")) == 4, 5, "4 lines")
    full = since(server, mark)
    print(full)
    assert full.count("Traceback (most recent call last)") == 4  # both workers, every time
    assert 'raise RuntimeError("kaboom-secret-detail")' in full
    assert "rest_error_full=1 logs the whole traceback" not in full


PLAIN = re.compile(
    r"fwrest\.access \[w\d\] GET /rest/hello 200 port=\d+ client=\S+ request_id=\w+$", re.M
)
ACCESS = re.compile(
    r"fwrest\.access \[w\d\] GET /rest/hello 200 (.*) port=\d+ client=\S+ request_id=\w+$", re.M
)


def test_rest_trace_time_1_total_and_2_per_phase(server: ServerProcess, base: str) -> None:
    mark = len(server.log())
    pids = hit_both_workers(base)
    # at least one line a request (a loaded worker writes its lines late: 15 s)
    wait_for(lambda: len(PLAIN.findall(since(server, mark))) >= len(pids), 15, "access lines")
    # default 0: the access line has no time at all
    assert ACCESS.findall(since(server, mark)) == [], since(server, mark)
    assert not re.search(r"\d+us\b", since(server, mark)), since(server, mark)

    mark = settled_change(server, base, {"rest_trace_time": 1}, "rest_trace_time 0 -> 1")
    pids = hit_both_workers(base)
    wait_for(lambda: len(ACCESS.findall(since(server, mark))) >= len(pids), 15, "access lines")
    lines = ACCESS.findall(since(server, mark))
    print(lines[:2])
    assert all(re.fullmatch(r"total=\d+us", line) for line in lines), lines

    mark = settled_change(server, base, {"rest_trace_time": 2}, "rest_trace_time 1 -> 2")
    pids = hit_both_workers(base)
    wait_for(lambda: len(ACCESS.findall(since(server, mark))) >= len(pids), 15, "access lines")
    lines = ACCESS.findall(since(server, mark))
    print(lines[:2])
    phases = re.compile(
        r"authorization=(\d+)us handler=(\d+)us serialization=(\d+)us total=(\d+)us"
    )
    for line in lines:
        m = phases.fullmatch(line)
        assert m, line
        auth, handler, serial, total = (int(x) for x in m.groups())
        assert auth + handler + serial <= total + 3, line  # the phases add up (rounding)


def test_rest_log_stringsize_cuts_headers_and_bodies_in_the_debug_lines(
    client: Client, file_log: FileLog
) -> None:
    # a form body (300 characters): a body neither JSON nor form is logged by length only (SPEC 7.1)
    long_header, long_body = "A" * 300, {"b": "B" * 298}
    form = {"X-Long": long_header, "Content-Type": "application/x-www-form-urlencoded"}

    def send_and_read() -> str:
        mark = len(file_log.log())
        for _ in range(4):
            r = client.post("/echo", data=long_body, headers=form)
            assert r.status_code == 200
        wait_for(lambda: since(file_log, mark).count("response 200 body") >= 4, 5, "debug lines")
        return since(file_log, mark)

    # one worker: a change is in force once it is answered
    change(client, {"rest_log_level": 5, "rest_log_stringsize": 40})
    text = send_and_read()
    print(next(line for line in text.splitlines() if "x-long" in line))
    assert text.count("x-long: " + "A" * 40 + "...(300 chars)") == 4
    assert "request headers {" in text
    assert "body b=" + "B" * 38 + "...(300 chars)" in text
    assert "A" * 41 not in text and "B" * 41 not in text

    change(client, {"rest_log_stringsize": None})  # back to the file's 60
    text = send_and_read()
    print(next(line for line in text.splitlines() if "x-long" in line))
    assert text.count("x-long: " + "A" * 60 + "...(300 chars)") == 4
    assert "A" * 61 not in text

    change(client, {"rest_log_stringsize": 0})  # 0: a value's length only
    text = send_and_read()
    assert text.count("x-long: ...(300 chars)") == 4
    assert "body ...(300 chars)" in text
    assert "AAA" not in text and "BBB" not in text
    change(client, {"rest_log_stringsize": None})


# -- anti-forgery, Origin, onAdmin -------------------------------------------------------------


def test_form_post_without_or_with_a_wrong_token_is_403_and_changes_nothing(client: Client) -> None:
    before = get_settings(client)
    token = form_token(client)
    wrong = ("0" if token[0] != "0" else "1") + token[1:]
    for fields in (
        {"rest_log_stringsize": "77"},
        {"rest_log_stringsize": "77", "fw_csrf": ""},
        {"rest_log_stringsize": "77", "fw_csrf": wrong},
        {"rest_log_stringsize": "77", "fw_csrf": "not-a-token"},
    ):
        r = post_form(client, fields)
        assert r.status_code == 403, (fields, r.text)
        assert get_settings(client) == before
    # the page's own token is accepted
    r = post_form(client, {"rest_log_stringsize": "77", "fw_csrf": token})
    assert r.status_code == 200, r.text
    assert "text/html" in r.headers["content-type"]
    assert "Saved" in r.text
    assert get_settings(client)["rest_log_stringsize"]["runtime"] == 77  # one worker: at once


def test_json_post_from_a_foreign_origin_is_403_and_changes_nothing(client: Client) -> None:
    before = get_settings(client)
    port = client.base_url.port
    # another scheme on the same host and port is another origin (RFC 6454)
    foreign = ("http://evil.example", "null", "http://127.0.0.1:1", f"https://127.0.0.1:{port}")
    for origin in foreign:
        r = post_settings(client, {"rest_log_level": 5}, headers={"Origin": origin})
        assert r.status_code == 403, (origin, r.text)
        assert get_settings(client) == before
    # a form with the right token does not help a foreign origin either
    r = post_form(
        client,
        {"rest_log_level": "5", "fw_csrf": form_token(client)},
        headers={"Origin": "http://evil.example"},
    )
    assert r.status_code == 403
    assert get_settings(client) == before
    # the page's own origin is accepted (an empty change, so that nothing changes)
    own = f"http://127.0.0.1:{port}"
    r = post_settings(client, {}, headers={"Origin": own})
    assert r.status_code == 200, r.text
    assert r.json()["settings"] == before
    # behind a proxy that ends TLS: the scheme it forwards is the page's
    https = {"Origin": f"https://127.0.0.1:{port}", "X-Forwarded-Proto": "https"}
    assert post_settings(client, {}, headers=https).status_code == 200
    https["X-Forwarded-Proto"] = "http"
    assert post_settings(client, {}, headers=https).status_code == 403


def test_a_change_on_admin_allows_on_one_port_is_read_on_the_other(
    server: ServerProcess, base: str, basic_base: str
) -> None:
    # refusals: test_on_admin_anything_but_true_is_403_and_reading_stays_allowed and
    # test_a_form_refused_by_on_admin_answers_403_with_the_page_saying_why; ada may change
    mark = len(server.log())
    r = post_settings(basic_base, {"rest_log_level": 5}, headers=ADA)
    assert r.status_code == 200, r.text
    settled(server, mark, "rest_log_level 3 -> 5")
    assert get_settings(base)["rest_log_level"]["runtime"] == 5  # one service, one store


CARL, DAN = basic("carl", "C-1"), basic("dan", "D-1")


def test_on_admin_anything_but_true_is_403_and_reading_stays_allowed(
    client: Client, basic_client: Client
) -> None:
    before = get_settings(client)
    assert basic_client.post("/fw/rest/config", json={"rest_log_level": 5}).status_code == 401
    # onAdmin returns False, 1, "yes": all are "not True"
    for who in (BOB, CARL, DAN):
        assert get_settings(basic_client, headers=who) == before
        r = post_settings(basic_client, {"rest_log_level": 5}, headers=who)
        assert r.status_code == 403, r.text
        assert r.json()["detailedMessage"] == "this user may not change settings"
        assert get_settings(basic_client, headers=who) == before
    assert get_settings(client) == before


def test_a_form_refused_by_on_admin_answers_403_with_the_page_saying_why(
    client: Client, basic_client: Client
) -> None:
    before = get_settings(client)
    r = post_form(
        basic_client,
        {"rest_log_level": "5", "fw_csrf": form_token(basic_client, headers=BOB)},
        headers=BOB,
    )
    assert r.status_code == 403
    assert r.headers["content-type"].startswith("text/html")  # was the JSON error body
    message = re.search(r'<p id="message" class="error"[^>]*>([^<]*)</p>', r.text)
    assert message, r.text
    print(message.group(1))
    assert "this user may not change settings" in message.group(1)
    assert "Refused, nothing changed" in message.group(1)
    assert get_settings(basic_client, headers=BOB) == before
    assert get_settings(client) == before


def test_a_form_with_a_wrong_token_answers_403_with_the_page_saying_why(client: Client) -> None:
    before = get_settings(client)
    r = post_form(client, {"rest_log_level": "5", "fw_csrf": "stale"})
    assert r.status_code == 403
    assert r.headers["content-type"].startswith("text/html")
    assert "anti-forgery token is missing or wrong" in r.text
    assert get_settings(client) == before
    # the page it answers carries a good token: submitting again works
    token = re.search(r'name="fw_csrf" value="([^"]+)"', r.text)
    assert token and token.group(1) == form_token(client)


@pytest.mark.parametrize("typed", ["9", "\u0663", "\u00b2", "9" * 4000, "0x3", "3.0", "+3", "-0"])
def test_a_form_value_out_of_range_or_not_ascii_digits_is_refused_on_the_page(
    client: Client, typed: str
) -> None:
    before = get_settings(client)
    r = post_form(client, {"rest_log_level": typed, "fw_csrf": form_token(client)})
    print(r.status_code, typed[:10])
    assert r.status_code == 400  # "\u0663" (ARABIC-INDIC THREE) was taken as 3
    assert r.headers["content-type"].startswith("text/html")
    message = re.search(r'<p id="message" class="error"[^>]*>([^<]*)</p>', r.text)
    assert message, r.text[:500]
    assert "rest_log_level" in message.group(1) and "0-5" in message.group(1)
    assert len(message.group(1)) < 300  # a huge value is not repeated whole
    # the field shows what was typed, to correct it (it showed the stored value, losing it)
    field = re.search(r'<input name="rest_log_level" id="rest_log_level" value="([^"]*)"', r.text)
    assert field and html.unescape(field.group(1)) == typed
    assert get_settings(client) == before


def test_a_memory_store_with_two_workers_shares_changes_with_both(
    tmp_path: Path, serve: Any
) -> None:
    # StateStore=memory is per process: a change reached the answering worker only
    config = free_config(tmp_path, extra={"HTTPSERVER": {"StateStore": "memory"}})
    proc = serve(config, workers=2)
    base = proc.url()
    # wait for the ready lines (after "fwrest: ready": a KeyError on a busy machine)
    labels = wait_worker_labels(proc, 2)
    both = {"rest_log_level": 5, "rest_trace_time": 2}
    mark = settled_change(proc, base, both, "rest_log_level 3 -> 5", "rest_trace_time 0 -> 2")
    pids = hit_both_workers(base)
    workers = labels_of(labels, pids)
    assert workers == {"w1", "w2"}

    def both() -> bool:
        text = proc.log()[mark:]
        return all(
            f"fwrest.access [{w}] request headers {{" in text
            and re.search(rf"\[{w}\] GET /rest/hello 200 authorization=\d+us", text)
            for w in workers
        )

    took = wait_for(both, 5, "debug lines and phase times from both workers")
    print(f"both workers follow a change in a memory store ({took:.3f} s after the requests)")
    for _ in range(6):  # GETs on fresh connections reach both workers: all agree
        assert get_settings(base)["rest_log_level"]["runtime"] == 5
    settled_change(proc, base, {"rest_log_level": None}, "rest_log_level 5 -> 3")
    for _ in range(6):
        assert get_settings(base)["rest_log_level"]["runtime"] is None
        assert get_settings(base)["rest_trace_time"]["runtime"] == 2
