"""Token requests: parameters from the query and the form body, client credentials, and what
``onAuthparams`` returns, normalised (SPEC 4.2)."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, unquote_plus

from fwrest import log
from fwrest.auth.basic import parse_basic
from fwrest.auth.oauth2.errors import InvalidClient, InvalidRequest, OAuthError
from fwrest.auth.oauth2.passwords import malformed_hash
from fwrest.auth.oauth2.redirects import redirect_problem, registered_form
from fwrest.auth.throttle import user_key
from fwrest.config.reading import loads_unique
from fwrest.repository import is_async
from fwrest.repository.scopes import scope_list
from fwrest.routing.names import TOKEN_BODY_LIMIT

__all__ = [
    "CLIENT_PREFIX",
    "AuthParams",
    "ClientCredentials",
    "OAuthError",
    "ParamsSource",
    "client_credentials",
    "malformed_hashes",
    "name_clashes",
    "request_params",
]

# what a client token's bearer is to the application (rest.getAuthUser(), onAdmin, the audit
# trail's actor): "client:<id>", which no user name may begin with (docs/decisions.md)
CLIENT_PREFIX = "client:"

_KEPT_BACK = ("password", "client_secret", "refresh_token")
# not handed to a legacy onAuthparams either: a request must not name its own scopes (SPEC 12.4)
_NOT_SHOWN = (*_KEPT_BACK, "scopes")
MAX_FIELDS = 32
MAX_FIELD = 4096
MAX_BODY = TOKEN_BODY_LIMIT


def _pairs(text: str, where: str) -> list[tuple[str, str]]:
    if not text:
        return []
    if text.count("&") + 1 > MAX_FIELDS * 2:
        raise InvalidRequest(f"too many parameters in the {where}")
    try:
        pairs = parse_qsl(
            text,
            keep_blank_values=True,
            strict_parsing=False,
            max_num_fields=MAX_FIELDS,
            errors="strict",
        )
    except ValueError:
        raise InvalidRequest(f"too many or malformed parameters in the {where}") from None
    for name, value in pairs:
        if len(name) > MAX_FIELD or len(value) > MAX_FIELD:
            raise InvalidRequest(f"a parameter in the {where} is too long")
    return pairs


def request_params(
    query: str,
    body: bytes,
    content_type: str | None,
    method: str,
    repeated: list[str] | None = None,
) -> dict[str, str]:
    """Merge query and form parameters; a parameter given twice is ``invalid_request``, or,
    when the caller passes a ``repeated`` list, named there (once, in the order first seen)
    and left out of the answer: none of its values counts (the authorize route's redirect,
    RFC 6749 4.1.2.1)."""
    pairs = _pairs(query, "query string")
    if method == "POST" and body:
        media = (content_type or "").split(";", 1)[0].strip().lower()
        if media != "application/x-www-form-urlencoded":
            raise InvalidRequest(
                "the body must be application/x-www-form-urlencoded (RFC 6749 4.3.2)"
            )
        if len(body) > MAX_BODY:
            raise InvalidRequest("the body is too large", status=413)
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRequest("the body is not UTF-8") from None
        pairs += _pairs(text, "body")
    if len(pairs) > MAX_FIELDS:  # SPEC 7: 32 fields in all, query and body together
        raise InvalidRequest(f"more than {MAX_FIELDS} parameters")
    params: dict[str, str] = {}
    seen: set[str] = set()
    for name, value in pairs:
        if name in seen:
            if repeated is None:
                raise InvalidRequest(f"the parameter {name!r} is given more than once")
            if name not in repeated:
                repeated.append(name)
            continue
        seen.add(name)
        if value:  # RFC 6749 3.1: a parameter sent without a value counts as omitted
            params[name] = value
    for name in repeated or ():
        params.pop(name, None)
    return params


class ClientCredentials(NamedTuple):
    """A client's id and secret as a request gives them. ``as_sent``: the Basic header's two
    values not form-decoded, when decoding changed them: RFC 6749 2.3.1 has a client encode
    them, but many clients (Authlib, requests' and httpx's Basic auth) send them as they are,
    so a secret with ``+`` or ``%`` is also tried so."""

    client_id: str
    secret: str
    as_sent: tuple[str, str] | None = None


def client_credentials(
    params: dict[str, str], authorization: str | None
) -> ClientCredentials | None:
    """Client id and secret from the Basic header (RFC 6749 2.3.1) or the parameters."""
    from_header = None
    if authorization and authorization.strip()[:6].lower() == "basic ":
        creds = parse_basic(authorization)
        if creds is None:
            raise InvalidClient("malformed client credentials")
        decoded = (unquote_plus(creds[0]), unquote_plus(creds[1]))
        as_sent = None if decoded == (creds[0], creds[1]) else (creds[0], creds[1])
        from_header = ClientCredentials(*decoded, as_sent)
    in_params = "client_id" in params or "client_secret" in params
    if from_header and in_params:
        raise InvalidRequest("client credentials given both in the header and in the parameters")
    if from_header:
        return from_header
    if in_params:
        return ClientCredentials(params.get("client_id", ""), params.get("client_secret", ""))
    return None


@dataclass(frozen=True, slots=True)
class AuthParams:
    """What ``onAuthparams`` allows, normalised."""

    clients: tuple[tuple[str, str], ...]
    users: tuple[tuple[str, str], ...]
    access_expires: Any
    refresh_expires: Any
    types: tuple[str, ...] | None  # None: not restricted
    # lifetimes given by more than one entry (single keys and ``expires``): the first applies
    repeated: tuple[str, ...] = ()
    # the scopes each user and client entry may be granted (SPEC 12.4), by user name and by
    # client id; an entry without ``scopes`` is not here (it may be granted ``default`` only)
    user_scopes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    client_scopes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # SPEC 16.1: each client's redirect URIs as registered (client id -> their compared form,
    # redirects.registered_form), and the public clients (no secret: a browser or native app)
    redirect_uris: Mapping[str, frozenset[str]] = field(default_factory=dict)
    public: frozenset[str] = frozenset()

    @property
    def client_ids(self) -> tuple[str, ...]:
        return tuple(cid for cid, _ in self.clients)


class ParamsError(ValueError):
    """``onAuthparams`` returned something unusable (the application's fault)."""


def _fold(obj: dict[str, Any]) -> dict[str, Any]:
    return {str(k).lower(): v for k, v in obj.items()}


def _entries(
    data: dict[str, Any], array: str, keys: tuple[str, ...], extra: tuple[str, ...] = ()
) -> list[tuple[Any, ...]]:
    """The entries of ``array`` (their ``keys`` then ``extra``), after the one the single keys
    make when ``data`` has any of ``keys`` (``extra`` alone makes no entry)."""
    out: list[tuple[Any, ...]] = []
    keys_extra = (*keys, *extra)
    if any(k in data for k in keys):
        out.append(tuple(data.get(k) for k in keys_extra))
    items = data.get(array)
    if items is None:
        return out
    if isinstance(items, dict):
        items = [items]
    if not isinstance(items, list):
        raise ParamsError(f"{array!r} must be an array of objects")
    for item in items:
        if not isinstance(item, dict):
            raise ParamsError(f"each entry of {array!r} must be an object, got {item!r}")
        folded = _fold(item)
        out.append(tuple(folded.get(k) for k in keys_extra))
    return out


def _scopes(found: dict[str, tuple[str, ...]], ident: str, value: Any, what: str) -> None:
    """Record an entry's ``scopes`` (the first entry of a name decides, as for passwords)."""
    if value is None:
        return
    try:
        names = scope_list(value, f"the scopes of {what}")
    except ValueError as exc:
        raise ParamsError(str(exc)) from None
    found.setdefault(ident, names)


def normalise(raw: Any) -> AuthParams:
    """``onAuthparams``'s object -> :class:`AuthParams` (single keys and arrays mixed)."""
    if not isinstance(raw, dict):
        raise ParamsError(f"onAuthparams must return an object, got {type(raw).__name__}")
    data = _fold(raw)
    # a top-level ``scopes`` belongs to the single keys' entries (user and client alike)
    clients: list[tuple[str, str]] = []
    client_scopes: dict[str, tuple[str, ...]] = {}
    redirects: dict[str, frozenset[str]] = {}
    public: set[str] = set()
    for cid, secret, scopes, uris, is_public in _entries(
        data, "client", ("client_id", "client_secret"), ("scopes", "redirect_uris", "public")
    ):
        if not isinstance(cid, str) or not cid:
            raise ParamsError("a client_id must be non-empty text")
        first = all(cid != known for known, _ in clients)
        clients.append((cid, "" if secret is None else str(secret)))
        _scopes(client_scopes, cid, scopes, f"the client {cid!r}")
        _client_kind(cid, secret, uris, is_public, redirects, public, first)
    users = []
    user_scopes: dict[str, tuple[str, ...]] = {}
    for name, password, scopes in _entries(data, "users", ("username", "password"), ("scopes",)):
        if not isinstance(name, str) or not isinstance(password, str):
            raise ParamsError("each user needs username and password as text")
        if user_key(name).startswith(CLIENT_PREFIX):
            raise ParamsError(
                f"the user name {name!r} begins with {CLIENT_PREFIX!r}, which names client "
                "tokens (rest.getAuthUser(), onAdmin); rename the user"
            )
        users.append((name, password))
        _scopes(user_scopes, name, scopes, f"the user {name!r}")
    if "scopes" in data and not any(k in data for k in ("client_id", "username")):
        raise ParamsError(
            "a top-level scopes belongs to the single username or client_id, and there is none"
        )
    # Each lifetime comes from the first entry that gives it (the single keys first): an
    # entry with only refresh_expires does not reset access_expires to its default. The
    # original product shows no structure for several entries; the rest are warned about.
    expires = _entries(data, "expires", ("access_expires", "refresh_expires"))
    access = next((e[0] for e in expires if e[0] is not None), None)
    refresh = next((e[1] for e in expires if e[1] is not None), None)
    repeated = tuple(
        name
        for i, name in enumerate(("access_expires", "refresh_expires"))
        if sum(e[i] is not None for e in expires) > 1
    )
    # Grant types are restricted only when the ``types`` array is given (SPEC 4.2); the single
    # ``grant_type`` is then one more entry. Alone, it is the original product's fixed
    # "password", which never stopped its documented refresh grant.
    types_entries = _entries(data, "types", ("grant_type",)) if "types" in data else []
    types = None
    if types_entries:
        types = tuple(str(t[0]) for t in types_entries if t[0] is not None)
    return AuthParams(
        tuple(clients),
        tuple(users),
        access,
        refresh,
        types,
        repeated,
        user_scopes,
        client_scopes,
        redirects,
        frozenset(public),
    )


def _client_kind(
    cid: str,
    secret: Any,
    uris: Any,
    is_public: Any,
    redirects: dict[str, frozenset[str]],
    public: set[str],
    first: bool,
) -> None:
    """Check a client entry's ``redirect_uris`` and ``public`` (SPEC 16.1) and record them
    when it is the ``first`` entry of its client id (which decides, as for its secret)."""
    if is_public is not None and not isinstance(is_public, bool):
        raise ParamsError(f"the client {cid!r}: public must be true or false, got {is_public!r}")
    if is_public and secret not in (None, ""):
        raise ParamsError(
            f"the client {cid!r} is public (no secret: a browser or native app) and has a "
            "client_secret; remove one of them"
        )
    if first and is_public:
        public.add(cid)
    if uris is None:
        return
    if isinstance(uris, str):
        uris = [uris]
    if not isinstance(uris, list) or not uris:
        raise ParamsError(f"the client {cid!r}: redirect_uris must be a list of URLs")
    for uri in uris:
        problem = redirect_problem(uri)
        if problem is not None:
            raise ParamsError(f"the client {cid!r}: {problem}")
    if first:
        redirects[cid] = frozenset(registered_form(uri) for uri in uris)


def name_clashes(params: AuthParams) -> list[str]:
    """The names that fold to one key (case-folded, NFKC-normalised, as the throttle counts
    them: SPEC 7.1): two spellings of one user (``NEWUSER`` and ``newuser``), of one client,
    or a user and a client of one name. Empty when there is none."""
    out: list[str] = []
    seen: dict[str, tuple[str, str]] = {}  # key -> (noun, name as written)
    for noun, names in (("user", (n for n, _ in params.users)), ("client", params.client_ids)):
        for name in dict.fromkeys(names):  # a name given twice is one entry (the first decides)
            key = user_key(name)
            first = seen.setdefault(key, (noun, name))
            if first != (noun, name):
                out.append(
                    f"the {noun} {name!r} and the {first[0]} {first[1]!r} are one name "
                    "(names are compared case-folded and NFKC-normalised)"
                )
    return out


_ARTICLE = {"argon2": "an", "bcrypt": "a"}


def malformed_hashes(params: AuthParams) -> list[str]:
    """The users and clients whose password or secret begins as an argon2 or bcrypt hash but
    is not one (the docs' ``$argon2id$...`` placeholder, a hash cut short): every login of
    theirs would fail as a wrong password. Names them, never the value. Empty when none."""
    out: list[str] = []
    entries = (
        *(("user", name, "password", stored) for name, stored in params.users),
        *(("client", cid, "client_secret", secret) for cid, secret in params.clients),
    )
    for noun, name, key, stored in entries:
        kind = malformed_hash(stored)
        if kind is not None:
            out.append(
                f"the {noun} {name!r}: its {key} begins as {_ARTICLE[kind]} {kind} hash but is "
                "not a valid one, "
                f"so no {key} can match it; write the whole hash (fwrest users and "
                "fwrest clients write them) or the value in plain text"
            )
    return out


class ParamsSource:
    """Calls ``onAuthparams`` (modern or legacy by-reference form) or reads ``file:NAME.json``,
    re-read when the file changes."""

    def __init__(self, func: Callable[..., Any] | None, file: Path | None) -> None:
        self.func = func
        self.file = file
        self.legacy = False
        self.is_async = False
        if func is not None:
            self.is_async = is_async(func)
            try:
                sig = inspect.signature(func)
                required = [
                    p
                    for p in sig.parameters.values()
                    if p.default is p.empty
                    and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                ]
                self.legacy = len(required) == 1
            except (TypeError, ValueError):
                self.legacy = False
        self.label = ""  # the port's section, for log lines (set by the token service)
        self._good: AuthParams | None = None  # the file's last valid content
        self._good_state: tuple[int, ...] | None = None
        self._bad_state: tuple[int, ...] | None = None  # the state last reported as invalid

    def read_file(self) -> AuthParams:
        """The file's settings, read again when it changed (checked at every call).

        A file that becomes invalid or unreadable while serving (an edit half written, a
        typo) leaves its last valid content in force, with one error logged per state of
        the file; the start refuses an invalid file (no content to fall back on).
        """
        assert self.file is not None
        try:
            stat = self.file.stat()
        except OSError as exc:
            return self._fall_back(
                (-1, exc.errno or 0), f"{self.file} cannot be read: {exc.strerror}"
            )
        state = (stat.st_mtime_ns, stat.st_ctime_ns, stat.st_size, stat.st_ino)
        # Two writes of the same size within the file system's timestamp granularity leave
        # the same state: a file changed in the last 2 s is read again on every call.
        racy = time.time_ns() - stat.st_mtime_ns < 2_000_000_000
        if self._good is not None and state == self._good_state and not racy:
            return self._good
        try:
            data = loads_unique(self.file.read_text(encoding="utf-8-sig"))  # a BOM is not JSON
        except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nested too deep
            return self._fall_back(state, f"{self.file} is not valid JSON: {exc}")
        try:
            params = normalise(data)
        except ParamsError as exc:
            return self._fall_back(state, f"{self.file} cannot be used: {exc}")
        clashes = name_clashes(params)
        if clashes:
            # one account under two spellings would share one throttle key; a user and a
            # client of one name are told apart by fwrest, but rarely by whoever reads them
            return self._fall_back(state, f"{self.file} cannot be used: {clashes[0]}")
        malformed = malformed_hashes(params)
        if malformed:
            return self._fall_back(state, f"{self.file} cannot be used: {malformed[0]}")
        self._good, self._good_state, self._bad_state = params, state, None
        return params

    def _fall_back(self, state: tuple[int, ...], problem: str) -> AuthParams:
        if self._good is None:
            raise ParamsError(problem)
        if state != self._bad_state:
            self._bad_state = state
            log.auth_log.error(
                "[%s] onAuthparams: %s; the file's last valid content stays in force until it "
                "is corrected",
                self.label,
                problem,
            )
        return self._good

    def call_sync(self, request: dict[str, str]) -> AuthParams:
        """Run the function (in a worker thread when it is a ``def``)."""
        assert self.func is not None
        if self.legacy:
            filled = legacy_view(request)
            result = self.func(filled)
            return from_legacy(request, filled, result)
        return normalise(self.func())


def legacy_view(request: dict[str, str]) -> dict[str, Any]:
    """The request's parameters as a legacy ``onAuthparams`` receives them: no secrets."""
    return {k: v for k, v in request.items() if k not in _NOT_SHOWN}


def from_legacy(request: dict[str, str], filled: dict[str, Any], result: Any) -> AuthParams:
    """What a legacy function allowed: the dict it filled in place (or one it returned).

    A ``client_id`` or ``username`` still holding the request's own value counts only with the
    secret the function put beside it (secrets are never handed over, so any there is the
    function's); else the request would allow itself: any client id with an empty secret, and
    an unknown user would be a half entry (a 500 instead of ``invalid_grant``).
    """
    if isinstance(result, dict):
        return normalise(result)
    data = dict(filled)
    for ident, secret in (("client_id", "client_secret"), ("username", "password")):
        if secret not in data and ident in request and data.get(ident) == request[ident]:
            del data[ident]
    return normalise(data)
