"""INI/JSON -> validated, frozen :class:`ServiceConfig`.

``fwrest check`` and ``fwrest serve`` share this loader. Section names and keys are folded to
lower case once, here; messages quote them as written. Nothing here imports application code
or binds a socket: names of functions are resolved later, against the imported repository.
"""

from __future__ import annotations

import configparser
import contextlib
import difflib
import ipaddress
import json
import os
import re
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fwrest.config.hosts import canonical_host
from fwrest.config.model import (
    EncryptedKeyError,
    EnvironmentConfig,
    LocationConfig,
    MonitorConfig,
    ServerConfig,
    ServiceConfig,
    ThreadPoolConfig,
    Tunables,
    no_key_password,
)
from fwrest.config.schema import Key, keys_of
from fwrest.errors import ConfigError

__all__ = ["load_config", "parse_json_text", "probe_writable", "read_general"]

_FW_DATA_KEYS = {"authorization": "Authorization", "nativeroutes": "NativeRoutes"}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(slots=True)
class _Section:
    name: str  # as written
    values: dict[str, tuple[str, Any]]  # folded key -> (key as written, value)


class _Raw:
    """The file's sections, folded, with the file name for messages."""

    def __init__(self, sections: dict[str, _Section], source: str | None, base_dir: Path):
        self.sections = sections
        self.source = source
        self.base_dir = base_dir

    def error(
        self, problem: str, section: str | None = None, key: str | None = None, fix: str = ""
    ) -> ConfigError:
        return ConfigError(problem, section=section, key=key, fix=fix or None, source=self.source)

    def section(self, name: str, referenced_by: tuple[str, str] | None = None) -> _Section:
        found = self.sections.get(name.strip().lower())
        if found is not None:
            return found
        if referenced_by is None:
            raise self.error(f"the section [{name}] is missing.", fix=f"add a [{name}] section.")
        where_section, where_key = referenced_by
        close = difflib.get_close_matches(
            name, [s.name for s in self.sections.values()], n=1, cutoff=0.6
        )
        hint = f" Did you mean [{close[0]}]?" if close else ""
        raise self.error(
            f"names [{name}], which is not a section of this configuration.{hint}",
            where_section,
            where_key,
            f"add a [{name}] section or correct the name in {where_key}.",
        )


# ---------------------------------------------------------------------------------------------
# reading


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in pairs:
        if name in out:
            raise _DuplicateKey(name)
        out[name] = value
    return out


def _second_at(text: str, key: str) -> str:
    """Where ``key`` is written a second time in ``text`` (", the second time at line L,
    column C"), when a plain search finds it."""
    needle = json.dumps(key)
    first = text.find(needle)
    second = text.find(needle, first + 1) if first >= 0 else -1
    if second < 0:
        return ""
    line = text.count("\n", 0, second) + 1
    column = second - (text.rfind("\n", 0, second) + 1) + 1
    return f", the second time at line {line}, column {column}"


def parse_json_text(
    text: str, what: str, source: str | None, section: str | None = None, key: str | None = None
) -> Any:
    """Parse JSON, reporting a syntax error with its line and column, and a key given twice
    in one object (``json`` would keep the last silently: a second ``LoadURNs`` entry for one
    path, or a second ``Port``, would hide the first)."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise ConfigError(
            f"{what} gives the key {exc.key!r} twice in one object{_second_at(text, exc.key)} "
            "(JSON would keep only the last).",
            section=section,
            key=key,
            fix="keep one of the two, or merge them.",
            source=source,
        ) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{what} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}.",
            section=section,
            key=key,
            fix='write strict JSON: double-quoted "key":"value" pairs, no trailing commas.',
            source=source,
        ) from None
    except RecursionError:
        raise ConfigError(
            f"{what} is not usable JSON: it is nested too deeply.",
            section=section,
            key=key,
            fix="write the value with fewer nested arrays and objects.",
            source=source,
        ) from None


_INLINE_COMMENT = re.compile(r"(?:^|\s);.*$", re.MULTILINE)


def _strip_inline_comment(value: str) -> str:
    """``Key=value ; comment`` -> ``value``; a ``;`` inside a JSON value's strings is kept.

    configparser's own inline comments would cut ``UserData={"sql": "a ; b"}`` in two.
    """
    text = value.strip()
    quoted = text.startswith("'")
    body = text[1:] if quoted else text
    if body[:1] in ("{", "["):
        try:
            _obj, end = json.JSONDecoder().raw_decode(body)
        except (json.JSONDecodeError, RecursionError):
            pass  # reported, with line and column, when the value is parsed
        else:
            keep, rest = body[:end], body[end:]
            if quoted and rest.startswith("'"):
                keep, rest = f"'{keep}'", rest[1:]
            if not rest.strip() or (rest[0].isspace() and rest.lstrip().startswith(";")):
                return keep
    return _INLINE_COMMENT.sub("", value).strip()


def _read_ini(path: Path) -> dict[str, _Section]:
    parser = configparser.ConfigParser(
        interpolation=None,
        inline_comment_prefixes=None,  # see _strip_inline_comment
        default_section="\x00",  # [DEFAULT] is a section like any other, not merged into all
        comment_prefixes=("#", ";"),
        strict=True,
        empty_lines_in_values=False,
    )
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        parser.read_string(path.read_text(encoding="utf-8"), source=str(path))
    except configparser.DuplicateSectionError as exc:
        raise ConfigError(
            f"the section [{exc.section}] appears twice (line {exc.lineno}).",
            fix="merge the two sections into one.",
            source=str(path),
        ) from None
    except configparser.DuplicateOptionError as exc:
        raise ConfigError(
            f"the key appears twice in this section (line {exc.lineno}).",
            section=exc.section,
            key=exc.option,
            fix="keep one of the two lines.",
            source=str(path),
        ) from None
    except configparser.Error as exc:
        first = str(exc).splitlines()[0]
        raise ConfigError(
            f"the file is not a valid INI file: {first}",
            fix="write [SECTION] headers and Key=value lines.",
            source=str(path),
        ) from None
    except UnicodeDecodeError:
        raise ConfigError(
            "the file is not UTF-8 text.", fix="save it as UTF-8.", source=str(path)
        ) from None
    sections: dict[str, _Section] = {}
    for name in parser.sections():
        values: dict[str, tuple[str, Any]] = {}
        for key, raw_value in parser.items(name):
            value = _strip_inline_comment(raw_value)
            if key.lower() in values:
                raise ConfigError(
                    f"the key is given twice (as {values[key.lower()][0]} and {key}).",
                    section=name,
                    key=key,
                    fix="keep one of them; keys are case-insensitive.",
                    source=str(path),
                )
            values[key.lower()] = (key, value)
        _add_section(sections, name, values, str(path))
    return sections


def _add_section(
    sections: dict[str, _Section], name: str, values: dict[str, tuple[str, Any]], source: str | None
) -> None:
    folded = name.strip().lower()
    if folded in sections:
        raise ConfigError(
            f"the sections [{sections[folded].name}] and [{name}] are the same section "
            "(section names are case-insensitive).",
            fix="merge them into one.",
            source=source,
        )
    sections[folded] = _Section(name.strip(), values)


def _from_mapping(data: Mapping[str, Any], source: str | None) -> dict[str, _Section]:
    sections: dict[str, _Section] = {}
    for name, body in data.items():
        if not isinstance(body, Mapping):
            raise ConfigError(
                f"the section [{name}] must be an object of keys, not {type(body).__name__}.",
                fix=f'write "{name}": {{"Key": "value", ...}}.',
                source=source,
            )
        values: dict[str, tuple[str, Any]] = {}
        for key, value in body.items():
            if str(key).lower() in values:
                raise ConfigError(
                    f"the key is given twice (as {values[str(key).lower()][0]} and {key}).",
                    section=str(name),
                    key=str(key),
                    fix="keep one of them; keys are case-insensitive.",
                    source=source,
                )
            values[str(key).lower()] = (str(key), value)
        _add_section(sections, str(name), values, source)
    return sections


def _read(source: str | Path | Mapping[str, Any]) -> _Raw:
    if isinstance(source, Mapping):
        return _Raw(_from_mapping(source, None), None, Path.cwd())
    path = Path(source)
    try:
        is_file = path.is_file()
    except OSError as exc:  # a name too long, ...
        is_file, why = False, f" ({exc.strerror})"
    else:
        why = ""
    if not is_file and isinstance(source, str) and source.lstrip().startswith(("{", "[")):
        raise ConfigError(
            "the configuration is given as text (JSON or INI), where a file name is expected.",
            fix="pass a dict (json.loads(text) for JSON text) or the path of an .ini or .json "
            "file.",
        )
    if not is_file:
        raise ConfigError(
            f"the configuration file {path} does not exist or is not a file{why}.",
            fix="give the path of an .ini or .json file.",
        )
    suffix = path.suffix.lower()
    base_dir = path.resolve().parent
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise ConfigError(
            f"the configuration file {path} cannot be read ({exc.strerror}).",
            fix="check its permissions.",
        ) from None
    if suffix == ".json":
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ConfigError(
                "the file is not UTF-8 text.", fix="save it as UTF-8.", source=str(path)
            ) from None
        data = parse_json_text(text, "the file", str(path))
        if not isinstance(data, dict):
            raise ConfigError(
                "the JSON file must hold an object whose keys are the sections.",
                fix='write {"HTTPSERVER": {...}, "HTTP_REST": {...}, ...}.',
                source=str(path),
            )
        return _Raw(_from_mapping(data, str(path)), str(path), base_dir)
    if suffix in (".ini", ".cfg", ".conf"):
        return _Raw(_read_ini(path), str(path), base_dir)
    raise ConfigError(
        f"the file {path.name} is neither .ini nor .json.",
        fix="name the file with the .ini or .json suffix that matches its format.",
    )


# ---------------------------------------------------------------------------------------------
# values


def _convert(raw: _Raw, sec: _Section, key: Key, key_written: str, value: Any) -> Any:
    where = (sec.name, key_written)
    if key.kind in ("int", "ms", "port"):
        if isinstance(value, bool) or not isinstance(value, int | str):
            number = None
        elif isinstance(value, int):
            number = value
        else:
            text = value.strip()
            number = int(text) if text.lstrip("-").isdigit() else None
        low, high = key.low, key.high
        if key.kind == "port":
            low, high = 0, 65535
        elif key.kind == "ms" and low is None:
            low = 0
        if number is None:
            raise raw.error(
                f"must be a whole number{' of milliseconds' if key.kind == 'ms' else ''}, "
                f"got {value!r}.",
                *where,
                fix=f"write a number{f' in {low}-{high}' if high is not None else ''}.",
            )
        if (low is not None and number < low) or (high is not None and number > high):
            bounds = f"{low}-{high}" if high is not None else f"at least {low}"
            fix = f"write a value in {low}-{high}." if high is not None else f"write {bounds}."
            raise raw.error(f"{number} is out of range ({bounds}).", *where, fix=fix)
        return number
    if key.kind == "bool":
        text = str(value).strip().lower() if not isinstance(value, bool) else str(int(value))
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise raw.error(f"must be 0 or 1, got {value!r}.", *where, fix="write 0 or 1.")
    if key.kind == "list":
        items: list[Any]
        if isinstance(value, list):
            items = value
        elif isinstance(value, str):
            items = value.split(",")
        else:
            raise raw.error(
                f"must be a comma-separated list, got {value!r}.",
                *where,
                fix="write names separated by commas, e.g. A, B.",
            )
        out = [str(item).strip() for item in items if str(item).strip()]
        return tuple(out)
    if key.kind in ("str", "urlpath", "path"):
        if not isinstance(value, str | int) or isinstance(value, bool):
            raise raw.error(f"must be text, got {value!r}.", *where, fix="write a single value.")
        text = str(value).strip()
        if key.kind == "urlpath":
            if (
                not text.startswith("/")
                or any(c in text for c in "?#% \t")
                or "//" in text
                or any(ord(c) < 0x20 or c == "\x7f" for c in text)
            ):
                raise raw.error(
                    f"{text!r} is not a URL path prefix.",
                    *where,
                    fix="write a path that starts with / (for example /rest, or / alone).",
                )
            if any(seg in (".", "..") for seg in text.split("/")):
                # request paths are normalised before they are located (SPEC 7), so a prefix
                # with a dot segment would match no request
                raise raw.error(
                    f"{text!r} holds a . or .. segment, which no request path keeps.",
                    *where,
                    fix="write the prefix without dot segments (for example /rest).",
                )
            return text.rstrip("/") or "/"
        if key.kind == "path":
            if not text:
                return None
            path = Path(text)
            return path if path.is_absolute() else raw.base_dir / path
        return text
    if key.kind == "json":
        return _json_value(raw, sec, key_written, value)
    raise AssertionError(key.kind)  # pragma: no cover - the table holds known kinds


def _json_value(raw: _Raw, sec: _Section, key_written: str, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    text = value.strip()
    if len(text) >= 2 and text[0] == text[-1] == "'":
        text = text[1:-1].strip()  # FwData='{...}' as the original product writes it
    if not text:
        return None
    if text[0] in "{[":
        return parse_json_text(text, "the value", raw.source, sec.name, key_written)
    path = Path(text)
    if not path.is_absolute():
        path = raw.base_dir / path
    try:
        content = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise raw.error(
            f"names the file {path}, which cannot be read ({reason}).",
            sec.name,
            key_written,
            "give inline JSON starting with { or the path of a readable JSON file.",
        ) from None
    return parse_json_text(content, f"the file {path}", raw.source, sec.name, key_written)


def _values(raw: _Raw, sec: _Section, kind: str) -> dict[str, Any]:
    """Validate every key of a section against the table; return attr -> value."""
    table = keys_of(kind)
    out: dict[str, Any] = {}
    for folded, (written, value) in sec.values.items():
        key = table.get(folded)
        if key is None and folded in ("authorization", "nativeroutes") and "fwdata" in table:
            raise raw.error(
                f"{written} is not a key of its own: it belongs inside FwData.",
                sec.name,
                written,
                f'write FwData={{"{written}": {{...}}}} in [{sec.name}].',
            )
        if key is None:
            names = [k.name for k in table.values()]
            close = difflib.get_close_matches(written, names, n=1, cutoff=0.6)
            hint = f" Did you mean {close[0]}?" if close else ""
            raise raw.error(
                f"unknown key for a {kind} section.{hint}",
                sec.name,
                written,
                f"remove it, or use one of: {', '.join(names)}.",
            )
        out[key.attr] = _convert(raw, sec, key, written, value)
    for key in table.values():
        given = out.get(key.attr)
        blank = isinstance(given, str) and not given.strip()
        if given is not None and not (key.required and blank):
            continue
        if key.required:
            # an empty value is no value (an empty HostName would bind every interface)
            raise raw.error(
                f"the required key {key.name} is {'empty' if blank else 'missing'} ({key.doc}).",
                sec.name,
                key.name if blank else None,
                f"add {key.name}=... to [{sec.name}].",
            )
        if key.kind == "path" and isinstance(key.default, str):
            out[key.attr] = raw.base_dir / key.default
        else:
            out[key.attr] = key.default
    return out


# ---------------------------------------------------------------------------------------------
# sections


def _fw_data(raw: _Raw, sec: _Section, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    written = sec.values.get("fwdata", ("FwData", None))[0]
    if not isinstance(value, dict):
        raise raw.error(
            "must be a JSON object.", sec.name, written, 'write {"Authorization": {...}}.'
        )
    out: dict[str, Any] = {}
    for key, item in value.items():
        known = _FW_DATA_KEYS.get(str(key).lower())
        if known is None:
            raise raw.error(
                f"FwData holds the unknown key {key!r}; FwData is reserved for the framework.",
                sec.name,
                written,
                "use only Authorization and NativeRoutes; put application data in UserData.",
            )
        out[known.lower()] = item
    return out


def _refuse_authorization(raw: _Raw, sec: _Section, kind: str, belongs: str) -> None:
    for folded, (written, _value) in sec.values.items():
        if folded in ("fwdata", "authorization"):
            raise raw.error(
                f"authorization is configured per port, not per {kind}.",
                sec.name,
                written,
                f"move it to FwData of the server section ({belongs}).",
            )


def _tls(raw: _Raw, sec: _Section, values: dict[str, Any]) -> None:
    cert, key = values["ssl_certificate"], values["ssl_certificate_key"]
    if (cert is None) != (key is None):
        missing = "SslCertificateKey" if key is None else "SslCertificate"
        raise raw.error(
            f"{missing} is missing: TLS needs both a certificate and its key.",
            sec.name,
            missing,
            "give both SslCertificate and SslCertificateKey, or neither for plain HTTP.",
        )
    if cert is None:
        return
    for written, path in (("SslCertificate", cert), ("SslCertificateKey", key)):
        if not Path(path).is_file():
            raise raw.error(
                f"the file {path} does not exist.",
                sec.name,
                written,
                "give the path of a PEM file (relative to the config file).",
            )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(cert, key, password=no_key_password)
    except EncryptedKeyError:
        raise raw.error(
            f"the private key {key} is encrypted (it asks for a pass phrase).",
            sec.name,
            "SslCertificateKey",
            "give the key unencrypted (openssl pkey -in KEY -out KEY.plain), readable by the "
            "service only.",
        ) from None
    except (ssl.SSLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or str(exc)
        raise raw.error(
            f"the certificate {cert} and key {key} cannot be loaded ({reason}).",
            sec.name,
            "SslCertificate",
            "give a PEM certificate and the unencrypted PEM private key that belongs to it.",
        ) from None


def _environment(
    raw: _Raw, name: str, by: tuple[str, str], cache: dict[str, EnvironmentConfig]
) -> EnvironmentConfig:
    sec = raw.section(name, by)
    folded = sec.name.lower()
    if folded not in cache:
        _refuse_authorization(raw, sec, "environment", "the server that serves it")
        values = _values(raw, sec, "environment")
        cache[folded] = EnvironmentConfig(sec.name, values["repository"] or ())
    return cache[folded]


def _thread_pool(
    raw: _Raw,
    name: str,
    by: tuple[str, str],
    cache: dict[str, ThreadPoolConfig],
    envs: dict[str, EnvironmentConfig],
) -> ThreadPoolConfig:
    sec = raw.section(name, by)
    folded = sec.name.lower()
    if folded in cache:
        return cache[folded]
    _refuse_authorization(raw, sec, "thread pool", "the server whose locations use it")
    values = _values(raw, sec, "thread pool")
    env_name = values.pop("environment")
    if env_name:
        written = sec.values["environment"][0]
        env = _environment(raw, env_name, (sec.name, written), envs)
    else:
        env = envs.setdefault("", EnvironmentConfig("", ()))
    if values["min_threads"] > values["max_threads"]:
        raise raw.error(
            f"MinThreads={values['min_threads']} is above MaxThreads={values['max_threads']}.",
            sec.name,
            "MinThreads",
            "make MinThreads at most MaxThreads.",
        )
    pool = ThreadPoolConfig(name=sec.name, environment=env, **values)
    cache[folded] = pool
    return pool


def _location(
    raw: _Raw,
    name: str,
    by: tuple[str, str],
    cache: dict[str, LocationConfig],
    pools: dict[str, ThreadPoolConfig],
    envs: dict[str, EnvironmentConfig],
) -> LocationConfig:
    sec = raw.section(name, by)
    folded = sec.name.lower()
    if folded in cache:
        return cache[folded]
    _refuse_authorization(raw, sec, "location", "the server whose Locations list it")
    values = _values(raw, sec, "location")
    written = sec.values["threadpool"][0]
    pool = _thread_pool(raw, values["thread_pool"], (sec.name, written), pools, envs)
    loc = LocationConfig(sec.name, values["path"], pool)
    cache[folded] = loc
    return loc


def load_config(source: str | Path | Mapping[str, Any]) -> ServiceConfig:
    """Read and validate a whole service configuration.

    Args:
        source: an ``.ini`` or ``.json`` file, or the same structure as a dict.

    Raises:
        ConfigError: the first problem found, naming section, key, problem and fix.
    """
    raw = _read(source)
    http = raw.section("HTTPSERVER")
    _refuse_authorization(raw, http, "HTTPSERVER section", "each server section")
    top = _values(raw, http, "HTTPSERVER")
    general_sec = raw.sections.get("general")
    in_file: dict[str, int] = {}
    if general_sec is not None:
        in_file = {
            k: v
            for k, v in _values(raw, general_sec, "GENERAL").items()
            if k.lower() in general_sec.values
        }
    tunables = Tunables(**in_file)

    envs: dict[str, EnvironmentConfig] = {}
    pools: dict[str, ThreadPoolConfig] = {}
    locations: dict[str, LocationConfig] = {}
    servers: list[ServerConfig] = []
    servers_written = http.values["servers"][0]
    if not top["servers"]:
        raise raw.error(
            "lists no server.",
            http.name,
            servers_written,
            "name at least one server section, e.g. Servers=HTTP_REST.",
        )
    seen_servers: set[str] = set()
    for server_name in top["servers"]:
        sec = raw.section(server_name, (http.name, servers_written))
        if sec.name.lower() in seen_servers:
            raise raw.error(
                f"names [{sec.name}] twice.", http.name, servers_written, "list each server once."
            )
        seen_servers.add(sec.name.lower())
        values = _values(raw, sec, "server")
        _tls(raw, sec, values)
        values["trusted_proxies"] = _proxies(raw, sec, values.get("trusted_proxies"))
        values["allowed_hosts"] = _allowed_hosts(raw, sec, values.get("allowed_hosts"))
        fw_data = _fw_data(raw, sec, values.pop("fw_data"))
        load_urns = values.pop("load_urns")
        if load_urns is None:  # absent or empty: nothing mapped, as for FwData and UserData
            load_urns = {}
        elif not isinstance(load_urns, dict):
            # an empty list too: `[]` is no mapping, and silently mapping nothing would hide
            # the mistake (SPEC 2: LoadURNs is an object, or a string naming a JSON file)
            got = "a JSON array" if isinstance(load_urns, list) else repr(load_urns)
            raise raw.error(
                f"must be a JSON object of paths, got {got}.",
                sec.name,
                sec.values["loadurns"][0],
                'write {"/path/:p": {"GET": {"Function": "module.function"}}}, or leave it out.',
            )
        locs: list[LocationConfig] = []
        prefixes: dict[str, str] = {}
        loc_written = sec.values["locations"][0]
        for loc_name in values.pop("locations"):
            loc = _location(raw, loc_name, (sec.name, loc_written), locations, pools, envs)
            if loc.path in prefixes:
                raise raw.error(
                    f"the locations [{prefixes[loc.path]}] and [{loc.name}] have the same "
                    f"Path {loc.path}.",
                    sec.name,
                    loc_written,
                    "give each location of one server its own Path.",
                )
            prefixes[loc.path] = loc.name
            locs.append(loc)
        if not locs:
            raise raw.error(
                "lists no location.", sec.name, loc_written, "name at least one location section."
            )
        servers.append(
            ServerConfig(
                name=sec.name,
                locations=tuple(locs),
                fw_data=fw_data,
                load_urns=load_urns,
                **values,
            )
        )
    _check_ports(raw, servers)

    monitor = None
    mon_sec = raw.sections.get("app_monitor")
    if mon_sec is not None:
        mvalues = _values(raw, mon_sec, "APP_MONITOR")
        if mvalues["enable"]:
            if mvalues["port"] is None:
                raise raw.error(
                    "the monitor is enabled but has no Port.",
                    mon_sec.name,
                    "Port",
                    "add Port=... (a port no server uses).",
                )
            _tls(raw, mon_sec, mvalues)
            mvalues["fw_data"] = _fw_data(raw, mon_sec, mvalues["fw_data"])
            monitor = MonitorConfig(**mvalues)
            for server in servers:
                if server.port == monitor.port and monitor.port != 0:
                    raise raw.error(
                        f"Port {monitor.port} is also the port of [{server.name}].",
                        mon_sec.name,
                        "Port",
                        "give the monitor a port of its own.",
                    )
    if not top["enable"] and monitor is None:
        raise raw.error(
            "Enable=0 and no monitor: there is nothing to serve.",
            http.name,
            "Enable",
            "set Enable=1.",
        )
    store = top["state_store"].strip()
    if store.lower() in ("sqlite", "memory"):
        store = store.lower()
    elif not store.lower().startswith(("redis://", "rediss://")):
        raise raw.error(
            f"{store.rpartition('@')[2]!r} is not a state store.",  # never a password
            http.name,
            "StateStore",
            "write sqlite, memory or redis://host:port/db.",
        )
    else:
        _check_redis_url(raw, http.name, store)
    # what a start writes: found out here, so that `fwrest check` says so and no worker dies
    if top["log_file"] is not None:
        why = probe_writable(top["log_file"], directory=False)
        if why:
            raise raw.error(
                f"the log file {top['log_file']} cannot be written: {why}.",
                http.name,
                "LogFile",
                "give a file in a folder the service may write to (relative to the config file).",
            )
    if store == "sqlite":
        why = probe_writable(top["data_path"], directory=True)
        if why:
            raise raw.error(
                f"the folder {top['data_path']} (the sqlite state store) cannot be written: {why}.",
                http.name,
                "DataPath",
                "give a folder the service may create and write to, or another StateStore.",
            )
    return ServiceConfig(
        source=Path(raw.source).resolve() if raw.source else None,
        base_dir=raw.base_dir,
        servers=tuple(servers) if top["enable"] else (),
        environments=tuple(envs.values()),
        tunables=tunables,
        tunables_in_file=in_file,
        monitor=monitor,
        enable=top["enable"],
        state_store=store,
        data_path=top["data_path"],
        log_file=top["log_file"],
        signing_key_file=top["signing_key_file"],
        graceful_timeout_ms=top["graceful_timeout_ms"],
        worker_timeout_ms=top["worker_timeout_ms"],
        warnings=tuple(_warnings(servers, monitor, tunables)),
    )


def _proxies(raw: _Raw, sec: _Section, value: tuple[str, ...] | None) -> tuple[str, ...]:
    out = []
    for item in value or ():
        try:
            out.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            written = sec.values.get("trustedproxies", ("TrustedProxies", None))[0]
            raise raw.error(
                f"{item!r} is not an IP address or network.",
                sec.name,
                written,
                "list the load balancers' addresses, e.g. 10.0.0.5, 10.0.1.0/24.",
            ) from None
    return tuple(out)


def _allowed_hosts(raw: _Raw, sec: _Section, value: tuple[str, ...] | None) -> tuple[str, ...]:
    """``AllowedHosts``: host names or IP addresses, canonical; ``*.name`` for any name under
    ``name``. A scheme, port, path or user is a mistake (the Host header's port is ignored)."""
    out: list[str] = []
    for item in value or ():
        host = canonical_host(item, wildcard=True)
        if host is None:
            written = sec.values.get("allowedhosts", ("AllowedHosts", None))[0]
            raise raw.error(
                f"{item[:80]!r} is not a host name or IP address.",
                sec.name,
                written,
                "list the names clients reach this server by, without scheme, port or path, "
                "e.g. api.example.com, 10.0.0.5, *.example.com.",
            )
        if host not in out:
            out.append(host)
    return tuple(out)


def _check_redis_url(raw: _Raw, section: str, url: str) -> None:
    """A Redis URL that redis-py takes, with a host and a numeric database (a password in it
    is never shown)."""
    from urllib.parse import urlsplit

    from redis.connection import parse_url

    parts = urlsplit(url)
    shown = f"{parts.scheme}://{parts.hostname or ''}" + (
        f":{parts.netloc.rpartition(':')[2]}" if ":" in parts.netloc.rpartition("@")[2] else ""
    )
    db = parts.path.strip("/")
    try:
        parse_url(url)  # type: ignore[no-untyped-call]
        problem = ""
        if not parts.hostname:
            problem = "names no host"
        elif db and not db.isdigit():
            problem = f"names the database {db!r}, which is not a number"
    except ValueError as exc:
        problem = f"is not a Redis URL ({exc})"
    if problem:
        raise raw.error(
            f"the Redis state store {shown} {problem}.",
            section,
            "StateStore",
            "write redis://host:port/db (or rediss:// for TLS), e.g. redis://127.0.0.1:6379/0.",
        )


def _check_ports(raw: _Raw, servers: list[ServerConfig]) -> None:
    seen: dict[int, str] = {}
    for server in servers:
        if server.port == 0:
            continue
        if server.port in seen:
            raise raw.error(
                f"Port {server.port} is also the port of [{seen[server.port]}].",
                server.name,
                "Port",
                "give each server its own port.",
            )
        seen[server.port] = server.name


_LOOPBACK = ("127.", "localhost", "::1")


def _warnings(
    servers: list[ServerConfig], monitor: MonitorConfig | None, tunables: Tunables
) -> list[str]:
    out = []
    if tunables.rest_error_full == 1:
        out.append(
            "[GENERAL] rest_error_full=1: full tracebacks go to the log (local variables of "
            "handlers may appear there); use it while diagnosing, then set it back to 0."
        )
    for server in servers:
        auth = server.fw_data.get("authorization")
        scheme = str(auth.get("scheme", "")) if isinstance(auth, dict) else ""
        if scheme == "basic" and not server.is_tls and not server.host.startswith(_LOOPBACK):
            out.append(
                f"[{server.name}] Basic authorization without TLS on {server.host}: passwords "
                "cross the network in clear text; add SslCertificate/SslCertificateKey."
            )
        if server.max_body_size == 0:
            out.append(
                f"[{server.name}] MaxBodySize=0 refuses every request body with 413 (the token "
                "route's too); it does not mean unlimited, as nginx's client_max_body_size 0 "
                "does. Leave it out for the default 1 MiB, or give the largest body in bytes."
            )
    if monitor is not None and not monitor.host.startswith(_LOOPBACK):
        out.append(
            f"[APP_MONITOR] HostName={monitor.host}: the monitor is reachable from the "
            "network; bind it to 127.0.0.1 or protect it with FwData Basic authorization."
        )
    return out


def read_general(path: Path) -> dict[str, int]:
    """Re-read only ``[GENERAL]`` of a config file (``rest_reload_time``); raises ConfigError."""
    raw = _read(path)
    sec = raw.sections.get("general")
    if sec is None:
        return {}
    return {k: v for k, v in _values(raw, sec, "GENERAL").items() if k.lower() in sec.values}


def probe_writable(path: Path, *, directory: bool) -> str:
    """Why the service could not write ``path`` (a file, or a folder when ``directory``), or
    "" when it can. Missing folders are created to find out, then removed with anything else
    the probe made: `fwrest check` leaves nothing behind."""
    made: list[Path] = []
    try:
        if path.exists():
            if path.is_dir() != directory:
                return "it is a folder" if path.is_dir() else "it is not a folder"
        else:
            missing = []
            parent = path if directory else path.parent
            while not parent.exists():
                missing.append(parent)
                parent = parent.parent
            if not parent.is_dir():
                return f"{parent} is not a folder"
            for folder in reversed(missing):
                folder.mkdir()
                made.append(folder)
        if directory:
            fd, probe = tempfile.mkstemp(dir=path, prefix=".fwrest-probe-")
            os.close(fd)
            os.unlink(probe)
        elif path.exists():
            with path.open("ab"):
                pass
        else:
            path.open("xb").close()
            made.append(path)
        return ""
    except OSError as exc:
        return exc.strerror or str(exc)
    finally:
        for item in reversed(made):
            with contextlib.suppress(OSError):
                item.unlink() if item.is_file() else item.rmdir()
