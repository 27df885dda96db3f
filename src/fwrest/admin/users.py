"""``fwrest users`` and ``fwrest clients`` (SPEC 13.6): list and edit the users and clients of
an ``onAuthparams`` file (``file:NAME.json``).

The file is read as the token route reads it (:func:`fwrest.auth.oauth2.params.normalise`:
single keys and arrays, keys in any case), edited in place of its entries (a user's or client's
object; the other keys and entries, and their order, stay as they are), checked again by
``normalise``, then written atomically: a temporary file in the same folder, mode 0600, flushed
to disk, renamed over the original (the running service's ``ParamsSource.read_file`` sees a new
file and reads it at the next token request). A crash before the rename leaves the original
whole; a bad argument or a file that cannot be used leaves it byte for byte as it was.
Passwords and client secrets are stored as argon2id hashes (a new secret is printed once).
A new name must not fold (case-folded, NFKC-normalised, as the throttle counts names) to a
user's or a client's already in the file: the token route tells users from clients, but one
account under two spellings would share a throttle key, and a reader of the audit trail would
not tell ``admin`` the user from ``admin`` the client.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import sys
import tempfile
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fwrest.auth.oauth2.params import CLIENT_PREFIX, ParamsError, normalise
from fwrest.auth.oauth2.passwords import hash_password, signature
from fwrest.auth.throttle import user_key
from fwrest.config.reading import loads_unique

__all__ = ["CLIENTS", "USERS", "AdminError", "Kind", "params_file", "run"]


class AdminError(Exception):
    """A bad argument or a file that cannot be edited: the message, exit 2, nothing written."""


@dataclass(frozen=True, slots=True)
class Kind:
    """Where the entries of one kind live in the file (as ``normalise`` reads them)."""

    noun: str  # "user", "client"
    array: str  # the array of entries
    ident: str  # the entry's name key
    secret: str  # the entry's secret key


USERS = Kind("user", "users", "username", "password")
CLIENTS = Kind("client", "client", "client_id", "client_secret")


def params_file(config_path: str, server: str | None) -> Path:
    """The ``file:NAME.json`` of CONFIG's oAuth2 server (``--server NAME``, else the only
    file among them)."""
    from fwrest.config.loader import load_config

    config = load_config(config_path)
    files: dict[str, Path] = {}
    for srv in config.servers:
        auth = srv.fw_data.authorization
        if auth is not None and auth.on_auth_params_file is not None:
            files[srv.name] = auth.on_auth_params_file
    if not files:
        raise AdminError(
            f"no server of {config_path} reads onAuthparams from a file; this command edits "
            "a \"file:NAME.json\" onAuthparams (a function's users are the application's)"
        )
    names = ", ".join(files)
    if server is not None:
        found = [path for name, path in files.items() if name.lower() == server.lower()]
        if not found:
            raise AdminError(f"no server {server!r} reads onAuthparams from a file; {names} do")
        return found[0]
    if len({os.path.realpath(p) for p in files.values()}) > 1:
        raise AdminError(f"several servers read onAuthparams from a file: {names}; add --server")
    return next(iter(files.values()))


def check_name(name: str, kind: Kind) -> None:
    what = "a user name" if kind is USERS else "a client id"
    if not name:
        raise AdminError(f"{what} must not be empty")
    # Zl/Zp: U+2028 and U+2029 end a line in many readers (a log viewer, JavaScript)
    if any(
        unicodedata.category(c) in ("Zl", "Zp") or unicodedata.category(c)[0] == "C" for c in name
    ):
        raise AdminError(f"{what} must not hold control characters or line separators: {name!r}")
    if name != name.strip():
        raise AdminError(f"{what} must not start or end with a space: {name!r}")
    if kind is USERS and user_key(name).startswith(CLIENT_PREFIX):
        raise AdminError(
            f"a user name must not begin with {CLIENT_PREFIX!r}: the service names a client's "
            f"own tokens so (rest.getAuthUser(), onAdmin): {name!r}"
        )


def _key(obj: dict[str, Any], name: str) -> str | None:
    """The key of ``obj`` that reads as ``name`` (the last one, as ``normalise`` folds)."""
    found = None
    for key in obj:
        if str(key).lower() == name:
            found = key
    return found


def _array(data: dict[str, Any], kind: Kind) -> tuple[str | None, Any]:
    """The key of ``kind``'s array in ``data`` and its value (None, None: no array)."""
    array = _key(data, kind.array)
    return array, (data.get(array) if array is not None else None)


def _entries(data: dict[str, Any], kind: Kind) -> list[dict[str, Any]]:
    """The objects holding an entry: the top level (single keys), then the array's."""
    out = []
    if _key(data, kind.ident) is not None or _key(data, kind.secret) is not None:
        out.append(data)
    _, items = _array(data, kind)
    if isinstance(items, dict):
        items = [items]
    if isinstance(items, list):
        out.extend(item for item in items if isinstance(item, dict))
    return out


def _ident(entry: dict[str, Any], kind: Kind) -> Any:
    key = _key(entry, kind.ident)
    return entry.get(key) if key is not None else None


def _named(data: dict[str, Any], kind: Kind, name: str) -> list[dict[str, Any]]:
    return [entry for entry in _entries(data, kind) if _ident(entry, kind) == name]


def _present(data: dict[str, Any], kind: Kind, name: str, wanted: bool) -> None:
    """Refuse an ``add`` of a name present, any other action on a name absent."""
    if bool(_named(data, kind, name)) != wanted:
        there = "already" if not wanted else "not"
        raise AdminError(f"the {kind.noun} {name!r} is {there} in the file; nothing changed")


def _clash(data: dict[str, Any], kind: Kind, name: str) -> None:
    """Refuse an ``add`` of a name that folds to a user's or a client's in the file."""
    key = user_key(name)
    for other in (USERS, CLIENTS):
        for entry in _entries(data, other):
            known = _ident(entry, other)
            if other is kind and known == name:
                continue  # the same entry: _present says so
            if isinstance(known, str) and user_key(known) == key:
                raise AdminError(
                    f"the {kind.noun} {name!r} would be the {other.noun} {known!r} already in "
                    "the file (names are compared case-folded and NFKC-normalised); nothing "
                    "changed"
                )


def _add(data: dict[str, Any], kind: Kind, name: str, secret: str) -> None:
    _present(data, kind, name, False)
    _clash(data, kind, name)
    entry = {kind.ident: name, kind.secret: secret}
    array, items = _array(data, kind)
    if array is None:
        data[kind.array] = [entry]
    elif isinstance(items, dict):
        data[array] = [items, entry]
    elif isinstance(items, list):
        items.append(entry)
    else:
        raise AdminError(f"{kind.array!r} must be an array of objects")


def _set_secret(data: dict[str, Any], kind: Kind, name: str, secret: str) -> None:
    _present(data, kind, name, True)
    for entry in _named(data, kind, name):
        entry[_key(entry, kind.secret) or kind.secret] = secret


def _remove(data: dict[str, Any], kind: Kind, name: str) -> None:
    _present(data, kind, name, True)
    if _ident(data, kind) == name:  # the single keys' entry
        for key in [k for k in data if str(k).lower() in (kind.ident, kind.secret)]:
            del data[key]
        other = CLIENTS if kind is USERS else USERS
        scopes = _key(data, "scopes")
        if scopes is not None and _key(data, other.ident) is None:
            del data[scopes]  # it belonged to the entry removed
    array, items = _array(data, kind)
    if array is not None and isinstance(items, dict) and _ident(items, kind) == name:
        del data[array]
    elif isinstance(items, list):
        items[:] = [i for i in items if not (isinstance(i, dict) and _ident(i, kind) == name)]


def _password(stdin: bool) -> str:
    if stdin:
        line = sys.stdin.readline()
        password = line[:-1] if line.endswith("\n") else line
        password = password[:-1] if password.endswith("\r") else password
    else:
        import getpass

        try:  # getpass falls back to stdin, echoing, without a terminal: refuse instead
            os.close(os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY))
        except OSError:
            raise AdminError(
                "no terminal to ask for the password on; give it with --password-stdin"
            ) from None
        try:
            password = getpass.getpass("Password: ")
            if password and getpass.getpass("Repeat it: ") != password:
                raise AdminError("the two passwords differ; nothing changed")
        except EOFError:
            raise AdminError("no password given; nothing changed") from None
    if not password:
        raise AdminError("the password must not be empty")
    return password


def _load(raw: bytes, path: Path) -> dict[str, Any]:
    try:
        data = loads_unique(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise AdminError(f"{path} is not valid JSON: {exc}; nothing changed") from None
    try:
        normalise(data)
    except ParamsError as exc:
        raise AdminError(f"{path} cannot be used: {exc}; nothing changed") from None
    assert isinstance(data, dict)  # normalise refuses anything else
    return data


def _write(path: Path, data: dict[str, Any], original: os.stat_result) -> None:
    """``data`` in place of ``path``, atomically, mode 0600, owner kept where allowed."""
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), 0o600)
            if original.st_uid != os.geteuid():  # root editing the service's file
                with contextlib.suppress(OSError):
                    os.fchown(fh.fileno(), original.st_uid, original.st_gid)
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Read ``path``, ``change`` its content, check and write it; one edit at a time (a lock
    on the file, taken again when another edit replaced it meanwhile)."""
    path = Path(os.path.realpath(path))
    while True:
        with open(path, "rb") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            if os.stat(path).st_ino != os.fstat(fh.fileno()).st_ino:
                continue  # replaced while this one waited: read the new file
            data = _load(fh.read(), path)
            change(data)
            try:
                normalise(data)
            except ParamsError as exc:  # pragma: no cover - every edit keeps the shape
                raise AdminError(f"the edited file would not be usable: {exc}") from None
            _write(path, data, os.fstat(fh.fileno()))
            return


def _form(secret: str) -> str:
    """How a password or client secret is kept: ``plain text``, ``argon2id``, ``bcrypt``."""
    kind, *cost = signature(secret).split(":")
    form = {"plain": "plain text", "bcrypt": "bcrypt"}.get(kind, "argon2")
    return form + (cost[0].lower() if kind == "argon2" and cost else "")


def _listing(path: Path, kind: Kind) -> list[str]:
    params = _load(Path(path).read_bytes(), path)
    allowed = normalise(params)
    entries = allowed.users if kind is USERS else allowed.clients
    scopes = allowed.user_scopes if kind is USERS else allowed.client_scopes
    rows = []
    first: dict[str, str] = {}
    for name, secret in entries:
        first.setdefault(name, secret)  # the first entry of a name decides, as at the route
    for name, secret in first.items():
        # the kind of password or secret, never the value or its hash: argon2id, bcrypt, ...
        form = _form(secret) if secret or kind is USERS else "none"
        rows.append((name, form, " ".join(scopes.get(name, ("default",)))))
    head = ("USER", "PASSWORD", "SCOPES") if kind is USERS else ("CLIENT", "SECRET", "SCOPES")
    width = [max(len(r[i]) for r in [head, *rows]) for i in range(2)]
    return [f"{a:<{width[0]}}  {b:<{width[1]}}  {c}".rstrip() for a, b, c in [head, *rows]]


def run(kind: Kind, config: str, action: str, name: str | None, server: str | None,
        password_stdin: bool) -> int:  # fmt: skip
    """One ``fwrest users|clients`` command; returns the exit code."""
    try:
        path = params_file(config, server)
        if action == "list":
            print("\n".join(_listing(path, kind)))
            return 0
        assert name is not None
        check_name(name, kind)
        # before a password is asked for; checked again under the file's lock
        current = _load(path.read_bytes(), path)
        _present(current, kind, name, action != "add")
        if action == "add":
            _clash(current, kind, name)
        secret = stored = ""
        if action in ("add", "passwd", "rotate-secret"):
            if kind is USERS:
                stored = hash_password(_password(password_stdin))
            else:
                # printed once below; the file keeps its argon2id hash, as for passwords
                secret = secrets.token_urlsafe(32)
                stored = hash_password(secret)
        if action == "add":
            edit(path, lambda data: _add(data, kind, name, stored))
        elif action == "remove":
            edit(path, lambda data: _remove(data, kind, name))
        else:
            edit(path, lambda data: _set_secret(data, kind, name, stored))
    except AdminError as exc:
        print(f"fwrest: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nfwrest: interrupted; nothing changed", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"fwrest: error: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 1
    done = {"add": "added", "remove": "removed", "passwd": "changed the password of",
            "rotate-secret": "set a new secret for"}[action]  # fmt: skip
    print(f"fwrest {kind.array if kind is USERS else 'clients'}: {done} {kind.noun} {name!r} "
          f"in {path}", file=sys.stderr)  # fmt: skip
    if kind is CLIENTS and action in ("add", "rotate-secret"):
        print(secret)  # once: only its holder keeps it
    return 0
