"""Converting a section's raw values to their types, from the one key table (``schema``):
numbers, booleans, lists, JSON values (``fwdata`` types ``FwData``'s); every failure a
``ConfigError`` naming the section, the key as written, what was expected and what was found."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from fwrest.config.fwdata import FW_DATA_KEYS
from fwrest.config.reading import (
    RawConfig,
    RawSection,
    duration_seconds,
    parse_json_text,
    spelled,
)
from fwrest.config.schema import Key, keys_of

__all__ = ["section_values"]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _convert(raw: RawConfig, sec: RawSection, key: Key, key_written: str, value: Any) -> Any:
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
                f"got {spelled(value)}.",
                *where,
                fix=f"write a number{f' in {low}-{high}' if high is not None else ''}.",
            )
        if (low is not None and number < low) or (high is not None and number > high):
            bounds = f"{low}-{high}" if high is not None else f"at least {low}"
            fix = f"write a value in {low}-{high}." if high is not None else f"write {bounds}."
            raise raw.error(f"{number} is out of range ({bounds}).", *where, fix=fix)
        return number
    if key.kind == "seconds":
        seconds = duration_seconds(value)
        low, high = key.low or 0, key.high
        if seconds is None:
            raise raw.error(
                f"must be a duration in whole seconds (60, 60s, 1m, 1h), got {spelled(value)}.",
                *where,
                fix=f"write a duration, e.g. 60s, of {low}-{high} seconds.",
            )
        if seconds < low or (high is not None and seconds > high):
            raise raw.error(
                f"{seconds} seconds is out of range ({low}-{high} seconds).",
                *where,
                fix=f"write a duration of {low}-{high} seconds, e.g. 60s.",
            )
        return seconds
    if key.kind == "bool":
        text = str(value).strip().lower() if not isinstance(value, bool) else str(int(value))
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise raw.error(f"must be 0 or 1, got {spelled(value)}.", *where, fix="write 0 or 1.")
    if key.kind == "list":
        items: list[Any]
        if isinstance(value, list):
            items = value
        elif isinstance(value, str):
            items = value.split(",")
        else:
            raise raw.error(
                f"must be a comma-separated list, got {spelled(value)}.",
                *where,
                fix="write names separated by commas, e.g. A, B.",
            )
        out = [str(item).strip() for item in items if str(item).strip()]
        return tuple(out)
    if key.kind == "secret":
        if not isinstance(value, str):
            # the value itself is never shown: it may be the secret
            raise raw.error("must be text.", *where, fix="write the value as text.")
        return value.strip()
    if key.kind in ("str", "urlpath", "path"):
        if not isinstance(value, str | int) or isinstance(value, bool):
            raise raw.error(
                f"must be text, got {spelled(value)}.", *where, fix="write a single value."
            )
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


def _json_value(raw: RawConfig, sec: RawSection, key_written: str, value: Any) -> Any:
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
    raw.files.append(path)
    try:
        content = path.read_text(encoding="utf-8-sig")  # a BOM, if any, is not JSON
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise raw.error(
            f"names the file {path}, which cannot be read ({reason}).",
            sec.name,
            key_written,
            "give inline JSON starting with { or the path of a readable JSON file.",
        ) from None
    return parse_json_text(content, f"the file {path}", raw.source, sec.name, key_written)


def section_values(raw: RawConfig, sec: RawSection, kind: str) -> dict[str, Any]:
    """Validate every key of a section against the table; return attr -> value."""
    table = keys_of(kind)
    out: dict[str, Any] = {}
    for folded, (written, value) in sec.values.items():
        key = table.get(folded)
        if key is None and folded in FW_DATA_KEYS and "fwdata" in table:
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
