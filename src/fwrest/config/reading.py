"""Reading a configuration: an INI file (with ``;`` inline comments), a JSON file or text, or a
mapping, into raw sections whose names and keys are folded to lower case once; duplicate
sections and keys refused with the line where the second one is."""

from __future__ import annotations

import configparser
import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fwrest.errors import ConfigError

__all__ = [
    "RawConfig",
    "RawSection",
    "duration_seconds",
    "json_kind",
    "loads_unique",
    "parse_json_text",
    "read_source",
    "spelled",
]


_UNITS = {"s": 1, "m": 60, "h": 3600}  # a duration's units (kind "seconds")
_DIGITS_MAX = 15  # more is a typing slip, refused as one (int() refuses thousands of digits)


def spelled(value: object) -> str:
    """A value of the file as the file spells it, for a message: text quoted, as written (an
    INI file's values are text); anything else as JSON writes it, for only JSON (a .json file,
    or a JSON value in an INI file) holds it.

    >>> [spelled(v) for v in ("30s", True, None, 5.5, ["a"], {"a": 1})]
    ["'30s'", 'true', 'null', '5.5', '["a"]', '{"a": 1}']
    """
    if isinstance(value, str):
        return repr(value)
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):  # a dict given to load_config, holding other objects
        return repr(value)


def json_kind(value: object) -> str:
    """What a JSON value is, in JSON's words (``"not null"``, ``"not an array"``).

    >>> [json_kind(v) for v in (None, False, "x", 5, 5.5, [1], {})]
    ['null', 'false', 'a string', 'a number', 'a number', 'an array', 'an object']
    """
    if value is None or isinstance(value, bool):
        return spelled(value)
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def duration_seconds(value: object) -> int | None:
    """A duration in whole seconds: a number, or one with a unit (``60s``, ``1m``, ``2h``).

    >>> [duration_seconds(v) for v in ("60s", " 1m", 90, "1.5s", "s")]
    [60, 60, 90, None, None]
    """
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    if isinstance(value, int):
        return value
    text = value.strip().lower()
    factor = _UNITS.get(text[-1:], 0)
    digits = text[:-1].strip() if factor else text
    factor = factor or 1
    # ASCII digits only ("²" is a digit to str.isdigit, not to int), and few enough for int
    if not (digits.isascii() and digits.isdigit()) or len(digits) > _DIGITS_MAX:
        return None
    return int(digits) * factor


@dataclass(slots=True)
class RawSection:
    name: str  # as written
    values: dict[str, tuple[str, Any]]  # folded key -> (key as written, value)


class RawConfig:
    """The file's sections, folded, with the file name for messages."""

    def __init__(self, sections: dict[str, RawSection], source: str | None, base_dir: Path):
        self.sections = sections
        self.source = source
        self.base_dir = base_dir
        # the files the values name that the load reads (FwData=oauth2.json, a loginPage, a
        # pass phrase's file:): the configuration's own, which --reload watches (SPEC 13.2)
        self.files: list[Path] = []

    def error(
        self, problem: str, section: str | None = None, key: str | None = None, fix: str = ""
    ) -> ConfigError:
        return ConfigError(problem, section=section, key=key, fix=fix or None, source=self.source)

    def section(self, name: str, referenced_by: tuple[str, str] | None = None) -> RawSection:
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


def loads_unique(text: str) -> Any:
    """``json.loads`` refusing a key given twice in one object (a ``ValueError`` naming it
    and where), which ``json`` would let the last win silently: the ``onAuthparams`` file,
    read by the token route and edited by ``fwrest users``/``clients``.

    >>> loads_unique('{"users": [], "users": []}')
    Traceback (most recent call last):
    ValueError: the key 'users' is given twice in one object, the second time at line 1, column 15 (JSON would keep only the last)
    """
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise ValueError(
            f"the key {exc.key!r} is given twice in one object{_second_at(text, exc.key)} "
            "(JSON would keep only the last)"
        ) from None


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


# Keys whose value is an HTTP header value with ";" in its syntax (SPEC 10.2): the INI value is
# the whole text after "=", sent as written, as in JSON; no inline comment is cut from it.
_WHOLE_VALUE_KEYS = frozenset({"contentsecuritypolicy", "hsts"})
_SECTION_HEADER = re.compile(r"\[(?P<header>.+)\]")  # configparser's own SECTCRE
_SHOWN_LINES = 5  # bad lines a message names; the rest are counted


def _bad_lines(text: str, exc: configparser.ParsingError) -> str:
    """The lines configparser could not read, with their number, text and section:
    ``line 4 in [HTTP_REST] 'Port' is not a Key=value line``."""
    lines = text.split("\n")  # as configparser numbers them
    if isinstance(exc, configparser.MissingSectionHeaderError):
        found: list[tuple[int, Any]] = [(exc.lineno, None)]
    else:
        found = list(exc.errors)
    parts = []
    for lineno, _line in found[:_SHOWN_LINES]:
        line = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
        section = ""
        for before in reversed(lines[: lineno - 1]):
            match = _SECTION_HEADER.match(before)
            if match:
                section = f" in [{match.group('header')}]"
                break
        parts.append(f"line {lineno}{section} {line!r}")
    more = len(found) - _SHOWN_LINES
    listed = ", ".join(parts) + (f" and {more} more" if more > 0 else "")
    if isinstance(exc, configparser.MissingSectionHeaderError):
        return f"{listed} comes before any [SECTION] header."
    verb = "is not a Key=value line" if len(found) == 1 else "are not Key=value lines"
    return f"{listed} {verb}."


def _read_ini(path: Path) -> dict[str, RawSection]:
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
        text = path.read_text(encoding="utf-8-sig")  # a BOM, if any, is not part of the text
        parser.read_string(text, source=str(path))
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
    except configparser.ParsingError as exc:
        raise ConfigError(
            f"the file is not a valid INI file: {_bad_lines(text, exc)}",
            fix="write [SECTION] headers, Key=value lines and ; or # comments.",
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
    sections: dict[str, RawSection] = {}
    for name in parser.sections():
        values: dict[str, tuple[str, Any]] = {}
        for key, raw_value in parser.items(name):
            if key.strip().lower() in _WHOLE_VALUE_KEYS:
                value = raw_value.strip()
            else:
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
    sections: dict[str, RawSection],
    name: str,
    values: dict[str, tuple[str, Any]],
    source: str | None,
) -> None:
    folded = name.strip().lower()
    if folded in sections:
        raise ConfigError(
            f"the sections [{sections[folded].name}] and [{name}] are the same section "
            "(section names are case-insensitive).",
            fix="merge them into one.",
            source=source,
        )
    sections[folded] = RawSection(name.strip(), values)


def _from_mapping(data: Mapping[str, Any], source: str | None) -> dict[str, RawSection]:
    sections: dict[str, RawSection] = {}
    for name, body in data.items():
        if not isinstance(body, Mapping):
            raise ConfigError(
                f"the section [{name}] must be an object of keys, not {json_kind(body)}.",
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


def read_source(source: str | Path | Mapping[str, Any]) -> RawConfig:
    if isinstance(source, Mapping):
        return RawConfig(_from_mapping(source, None), None, Path.cwd())
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
            text = path.read_text(encoding="utf-8-sig")  # a BOM, if any, is not JSON
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
        return RawConfig(_from_mapping(data, str(path)), str(path), base_dir)
    if suffix in (".ini", ".cfg", ".conf"):
        return RawConfig(_read_ini(path), str(path), base_dir)
    raise ConfigError(
        f"the file {path.name} is neither .ini nor .json.",
        fix="name the file with the .ini or .json suffix that matches its format.",
    )


# ---------------------------------------------------------------------------------------------
# values
