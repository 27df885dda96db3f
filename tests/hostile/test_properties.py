"""Hypothesis on the parsers hostile input reaches first (Basic header, token request, path
normaliser, ``onAuthNoCheckUri`` matcher, configuration loader): each refuses only its documented
way (None, ``OAuthError``, ``BadPath``, ``ConfigError``)."""

from __future__ import annotations

import base64
import contextlib
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from fwrest.auth.basic import parse_basic
from fwrest.auth.oauth2.guard import NoCheckPaths
from fwrest.auth.oauth2.params import OAuthError, request_params
from fwrest.config.loader import load_config
from fwrest.errors import ConfigError
from fwrest.routing import BadPath, normalise_path

# database=None: no example database in the work tree; a failure prints its seed to rerun
_COMMON = {"deadline": None, "database": None, "suppress_health_check": [HealthCheck.too_slow]}
FAST = settings(max_examples=300, **_COMMON)
SLOW = settings(max_examples=120, **_COMMON)

# text a client can put in a header or a form: no lone surrogates (they cannot be sent)
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
HEADER = st.one_of(
    st.text(max_size=60),
    st.builds(lambda s, t: f"{s} {t}", st.sampled_from(["Basic", "basic", "BASIC", "x"]), TEXT),
    st.builds(lambda s, raw: f"{s} {base64.b64encode(raw).decode()}",
              st.sampled_from(["Basic", "bAsIc", "Bearer"]), st.binary(max_size=40)),
)  # fmt: skip
USER = TEXT.filter(lambda u: ":" not in u)  # a Basic user name holds no colon


# -- parse_basic -----------------------------------------------------------------------------------


@FAST
@given(HEADER)
def test_parse_basic_never_raises(header: str) -> None:
    result = parse_basic(header)
    assert result is None or (isinstance(result, tuple) and len(result) == 2)


@FAST
@given(USER, TEXT, st.sampled_from(["Basic", "basic", "BASIC", "bAsIc"]),
       st.sampled_from(["", " ", "  ", "\t"]))  # fmt: skip
def test_parse_basic_round_trips(user: str, password: str, scheme: str, pad: str) -> None:
    encoded = base64.b64encode(f"{user}:{password}".encode()).decode()
    assert parse_basic(f"{pad}{scheme} {pad}{encoded}{pad}") == (user, password)


@FAST
@given(user=st.text(st.characters(max_codepoint=255), max_size=20).filter(lambda u: ":" not in u))
def test_parse_basic_falls_back_to_latin1(user: str) -> None:
    raw = f"{user}:p\xe4ss".encode("latin-1")  # "\xe4" alone is not UTF-8
    assert parse_basic("Basic " + base64.b64encode(raw).decode()) == (user, "p\xe4ss")


@FAST
@given(st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=12),
       USER, TEXT)  # fmt: skip
def test_parse_basic_refuses_other_schemes(scheme: str, user: str, password: str) -> None:
    assume(scheme.lower() != "basic")
    encoded = base64.b64encode(f"{user}:{password}".encode()).decode()
    assert parse_basic(f"{scheme} {encoded}") is None


@FAST
@given(st.binary(max_size=40).filter(lambda raw: b":" not in raw))
def test_parse_basic_refuses_credentials_without_colon(raw: bytes) -> None:
    assert parse_basic("Basic " + base64.b64encode(raw).decode()) is None


# -- request_params (the token route's parameters) -------------------------------------------------

FORM_TYPES = [
    "application/x-www-form-urlencoded", "application/x-www-form-urlencoded; charset=utf-8",
    "APPLICATION/X-WWW-FORM-URLENCODED", "application/json", "text/plain",
    "multipart/form-data; boundary=x", "",
]  # fmt: skip
CONTENT_TYPES = st.one_of(st.none(), st.sampled_from(FORM_TYPES), st.text(max_size=40))
QUERY = st.one_of(
    st.text(max_size=200),
    st.lists(st.tuples(st.text(max_size=8), st.text(max_size=8)), max_size=40).map(
        lambda pairs: "&".join(f"{quote(k)}={quote(v)}" for k, v in pairs)
    ),
    st.text(st.sampled_from("a=&%2+;0fF"), max_size=300),
)


@FAST
@given(
    query=QUERY,
    body=st.one_of(st.binary(max_size=300), QUERY.map(lambda q: q.encode("utf-8", "replace"))),
    content_type=CONTENT_TYPES,
    method=st.sampled_from(["GET", "POST", "PUT", "HEAD"]),
)
def test_request_params_raises_only_oauth_errors(
    query: str, body: bytes, content_type: str | None, method: str
) -> None:
    try:
        params = request_params(query, body, content_type, method)
    except OAuthError as exc:
        assert exc.error == "invalid_request" and exc.status in (400, 413), exc
        return
    assert isinstance(params, dict)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in params.items())


NAME = st.text(st.characters(min_codepoint=97, max_codepoint=122) | st.just("_"), min_size=1)
NAMES = st.lists(NAME, min_size=1, max_size=12, unique=True)


@FAST
@given(data=st.data(), names=NAMES)
def test_request_params_refuses_every_duplicate(data: st.DataObject, names: list[str]) -> None:
    twice = data.draw(st.sampled_from(names), label="twice")
    pairs = [(name, data.draw(TEXT, label=name)) for name in [*names, twice]]
    pairs = data.draw(st.permutations(pairs), label="order")
    in_body = data.draw(st.lists(st.booleans(), min_size=len(pairs), max_size=len(pairs)))
    query = "&".join(
        f"{quote(k)}={quote(v)}" for (k, v), b in zip(pairs, in_body, strict=True) if not b
    )
    body = "&".join(f"{quote(k)}={quote(v)}" for (k, v), b in zip(pairs, in_body, strict=True) if b)
    with pytest.raises(OAuthError) as caught:
        request_params(query, body.encode(), "application/x-www-form-urlencoded", "POST")
    assert caught.value.error == "invalid_request"


@FAST
@given(data=st.data(), names=NAMES)
def test_request_params_keep_distinct_parameters(data: st.DataObject, names: list[str]) -> None:
    values = {name: data.draw(TEXT, label=name) for name in names}
    split = data.draw(st.integers(0, len(names)))
    query = "&".join(f"{quote(k)}={quote(values[k])}" for k in names[:split])
    body = "&".join(f"{quote(k)}={quote(values[k])}" for k in names[split:])
    got = request_params(query, body.encode(), "application/x-www-form-urlencoded", "POST")
    # RFC 6749 3.1: a parameter sent without a value counts as omitted
    assert got == {name: value for name, value in values.items() if value}


# -- normalise_path --------------------------------------------------------------------------------

SEGMENT_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="/")
TRICKY_SEGMENTS = [
    "", ".", "..", "%2e", "%2E%2e", ".%2e", "%2f", "%5C", "%00", "%", "%25", ";", "%3b", "a", "b",
]  # fmt: skip
PATHS = st.one_of(
    st.text(max_size=60).map(lambda t: "/" + t),
    st.lists(
        st.one_of(st.sampled_from(TRICKY_SEGMENTS), st.text(SEGMENT_CHARS, max_size=6)),
        max_size=10,
    ).map(lambda segments: "/" + "/".join(segments)),
    st.text(st.sampled_from("/.%2eEfF5cC0a;\\"), max_size=40).map(lambda t: "/" + t),
)


def _normalised(path: str) -> str | None:
    try:
        return normalise_path(path)
    except BadPath:
        return None


@FAST
@given(PATHS)
def test_normalise_raises_only_bad_path(path: str) -> None:
    result = _normalised(path)
    assert result is None or isinstance(result, str)


@FAST
@given(PATHS)
def test_normalise_is_idempotent(path: str) -> None:
    once = _normalised(path)
    assume(once is not None)
    assert once is not None
    # decoded: fwrest never decodes twice, so a "%" (from "%25") quoted back is unchanged
    assert normalise_path(once.replace("%", "%25")) == once
    if "%" not in once:
        assert normalise_path(once) == once


@FAST
@given(PATHS)
def test_normalise_result_is_canonical(path: str) -> None:
    result = _normalised(path)
    assume(result is not None)
    assert result is not None
    assert result.startswith("/")
    for bad in ("//", "/./", "/../"):
        assert bad not in result, (path, result)
    assert not result.endswith(("/.", "/..")), (path, result)
    assert result == "/" or not result.endswith("/"), (path, result)
    # decoding never makes a separator: no more segments come out than went in
    assert len(result.split("/")) <= len(path.split("/")), (path, result)


@FAST
@given(st.lists(st.text(SEGMENT_CHARS, max_size=5), min_size=1, max_size=5),
       st.sampled_from(["%2f", "%2F", "%5c", "%5C"]), st.data())  # fmt: skip
def test_normalise_refuses_encoded_slashes(
    segments: list[str], slash: str, data: st.DataObject
) -> None:
    at = data.draw(st.integers(0, len(segments) - 1))
    segments[at] += slash + data.draw(st.text(SEGMENT_CHARS, max_size=3))
    with pytest.raises(BadPath):
        normalise_path("/" + "/".join(quote(s, safe="%") for s in segments))


# -- NoCheckPaths (onAuthNoCheckUri) ---------------------------------------------------------------

LITERAL_CHARS = st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/:*%")
LITERAL_SEGMENT = st.text(LITERAL_CHARS, min_size=1, max_size=8).filter(
    lambda s: s not in (".", "..")
)
# configured patterns are stripped of surrounding white space (a typing leniency)
LITERAL = (
    st.lists(LITERAL_SEGMENT, min_size=1, max_size=4)
    .map(lambda s: "/" + "/".join(s))
    .filter(lambda p: p == p.strip())
)


@FAST
@given(
    pattern=LITERAL, other=st.lists(LITERAL_SEGMENT, min_size=1, max_size=4), slash=st.booleans()
)
def test_literal_pattern_matches_exactly_itself(
    pattern: str, other: list[str], slash: bool
) -> None:
    nocheck = NoCheckPaths([pattern + "/" if slash else pattern])
    assert nocheck.matches(pattern)
    assert nocheck.matches(normalise_path(pattern + "/"))  # the trailing slash, as normalised
    for near in (pattern + "x", pattern + "/x", pattern[:-1] or "/", "/x" + pattern,
                 pattern + "/" + "/".join(other), pattern.swapcase()):  # fmt: skip
        if near != pattern:
            assert not nocheck.matches(near), (pattern, near)
    candidate = "/" + "/".join(other)
    assert nocheck.matches(candidate) == (candidate == pattern)


@FAST
@given(prefix=LITERAL, value=LITERAL_SEGMENT, extra=LITERAL_SEGMENT)
def test_param_and_star_patterns(prefix: str, value: str, extra: str) -> None:
    param = NoCheckPaths([prefix + "/:id"])
    assert param.matches(f"{prefix}/{value}")
    assert not param.matches(f"{prefix}/{value}/{extra}")
    assert not param.matches(prefix)
    star = NoCheckPaths([prefix + "/*"])
    assert star.matches(prefix) and star.matches(f"{prefix}/{value}/{extra}")
    assert not star.matches(prefix + value)  # a sibling with the same prefix is not below it


# -- the configuration loader ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def config_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="fwrest-props-") as folder:
        yield Path(folder)


KEYS = [
    "Enable", "Servers", "StateStore", "DataPath", "LogFile", "HostName", "Port", "Locations",
    "FwData", "UserData", "LoadURNs", "Path", "ThreadPool", "Environment", "Repository",
    "MinThreads", "MaxThreads", "AcceptTimeout", "MaxBodySize", "HeaderTimeout",
    "SslCertificate", "SslCertificateKey", "rest_log_level", "ApiPath", "Nope",
]  # fmt: skip
SECTIONS = ["HTTPSERVER", "HTTP_REST", "ROOT", "POOL", "ENV", "GENERAL", "APP_MONITOR", "X"]
SAMPLE_VALUES = [
    "1", "0", "-1", "HTTP_REST", "ROOT", "POOL", "ENV", "/rest", "127.0.0.1", "memory",
    "redis://", "sqlite", '{"Authorization":{"scheme":"basic"}}', '{"Authorization":', "[",
    '{"NativeRoutes":{"public":["*"]}}', "99999999999999999999", "1h", "", "app", "{}",
]  # fmt: skip
VALUES = st.one_of(
    st.sampled_from(SAMPLE_VALUES),
    st.text(max_size=30),
    st.integers(),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=10),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
        ),
        max_leaves=8,
    ),
)
SECTION = st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=6)
CONFIGS = st.dictionaries(st.sampled_from(SECTIONS), SECTION, max_size=7)


def _load(path: Path) -> None:
    try:
        load_config(path)
    except ConfigError as exc:
        assert str(exc)


def _ini(config: dict[str, dict[str, object]]) -> str:
    lines = []
    for section, body in config.items():
        lines.append(f"[{section}]")
        for key, value in body.items():
            text = value if isinstance(value, str) else json.dumps(value)
            lines.append(f"{key}={text}".replace("\n", " "))
    return "\n".join(lines) + "\n"


@SLOW
@given(text=st.text(max_size=400), suffix=st.sampled_from([".ini", ".json"]))
def test_loader_on_random_text(config_dir: Path, text: str, suffix: str) -> None:
    path = config_dir / f"random{suffix}"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    _load(path)


@SLOW
@given(raw=st.binary(max_size=200), suffix=st.sampled_from([".ini", ".json"]))
def test_loader_on_random_bytes(config_dir: Path, raw: bytes, suffix: str) -> None:
    path = config_dir / f"bytes{suffix}"
    path.write_bytes(raw)
    _load(path)


@SLOW
@given(config=CONFIGS)
def test_loader_on_structured_json_and_ini(
    config_dir: Path, config: dict[str, dict[str, object]]
) -> None:
    json_path = config_dir / "structured.json"
    json_path.write_text(json.dumps(config))
    _load(json_path)
    ini_path = config_dir / "structured.ini"
    ini_path.write_text(_ini(config), encoding="utf-8", errors="surrogatepass")
    _load(ini_path)
    with contextlib.suppress(ConfigError):
        load_config(config)  # a mapping, as fwrest.start() takes it


@pytest.mark.parametrize("depth", [1000, 100_000])
def test_loader_on_deeply_nested_json(config_dir: Path, depth: int) -> None:
    nested = "[" * depth + "]" * depth
    (config_dir / "deep.json").write_text(nested)
    with pytest.raises(ConfigError, match=r"nested too deeply|must hold an object"):
        load_config(config_dir / "deep.json")
    ini = f"[HTTPSERVER]\nServers=A\n[A]\nHostName=h\nPort=1\nLocations=L\nFwData={nested}\n"
    (config_dir / "deep.ini").write_text(ini)
    with pytest.raises(ConfigError):
        load_config(config_dir / "deep.ini")
