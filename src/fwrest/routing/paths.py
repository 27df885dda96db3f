"""The one path normaliser (SPEC 7).

The router, ``onAuthNoCheckUri``, ``NativeRoutes``, usage figures and logs all see the path
this module returns, so no check can disagree with the router about which route a path is:

* percent escapes are decoded once (UTF-8); an encoded ``/`` or ``\\``, ``%00``, a bad escape
  or invalid UTF-8 is refused (400), so ``/a%2Fb`` can never mean ``/a/b`` to one check and a
  single segment to another;
* empty segments collapse (``//`` -> ``/``), ``.`` and ``..`` are resolved (``..`` above the
  root is refused), one trailing slash is dropped;
* ``;`` is an ordinary character: ``/public;x`` is not ``/public``.
"""

from __future__ import annotations

import re

__all__ = ["BadPath", "BadSeparator", "normalise_path", "split_target"]

_HEX = "0123456789abcdefABCDEF"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class BadPath(ValueError):
    """A request target that fwrest refuses with 400."""


class BadSeparator(BadPath):
    """An encoded separator or a ``..`` above ``/``: 400, but 404 where the path would name a
    static file (SPEC 10.3: nothing outside ``RootPath`` is served, such paths are 404)."""


def split_target(target: bytes) -> tuple[str, str]:
    """``b"/a/b?x=1"`` -> ``("/a/b", "x=1")``; absolute-form targets keep only their path.

    Raises:
        BadPath: not an origin-form or absolute-form target.
    """
    try:
        text = target.decode("ascii")
    except UnicodeDecodeError:
        raise BadPath("the request target is not ASCII") from None
    if not text.startswith("/"):
        lowered = text[:8].lower()
        if lowered.startswith(("http://", "https://")):
            rest = text.split("://", 1)[1]
            # the authority ends at the first "/", "?" or "#" (RFC 3986 3.2)
            end = next((i for i, ch in enumerate(rest) if ch in "/?#"), len(rest))
            text = rest[end:]
            if not text.startswith("/"):
                text = "/" + text  # an empty path is "/"
        else:
            raise BadPath("the request target must start with /")
    path, _, query = text.partition("?")
    if "#" in path:
        raise BadPath("the request target holds a fragment")
    return path, query


def normalise_path(path: str) -> str:
    """Normalise a request path (see the module docstring).

    >>> normalise_path("/rest//users/./1/")
    '/rest/users/1'
    >>> normalise_path("/rest/%75sers/a/../1")
    '/rest/users/1'

    Raises:
        BadPath: an encoded slash, a NUL, a bad escape, invalid UTF-8, or ``..`` above ``/``.
    """
    if "%" not in path and "//" not in path and "/." not in path:
        if _CONTROL.search(path):
            raise BadPath("the path holds a control character")
        if len(path) > 1 and path.endswith("/"):
            return path[:-1]
        return path
    if "%" in path:
        path = _unquote(path)
    if _CONTROL.search(path):
        raise BadPath("the path holds a control character")
    segments: list[str] = []
    for seg in path.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if not segments:
                raise BadSeparator("the path climbs above /")
            segments.pop()
            continue
        segments.append(seg)
    return "/" + "/".join(segments)


def _unquote(path: str) -> str:
    out = bytearray()
    i, n = 0, len(path)
    while i < n:
        ch = path[i]
        if ch != "%":
            out += ch.encode("utf-8")
            i += 1
            continue
        pair = path[i + 1 : i + 3]
        if len(pair) != 2 or pair[0] not in _HEX or pair[1] not in _HEX:
            raise BadPath("the path holds a bad percent escape")
        byte = int(pair, 16)
        if byte in (0x2F, 0x5C):
            raise BadSeparator("the path holds an encoded slash")
        if byte == 0:
            raise BadPath("the path holds an encoded NUL")
        out.append(byte)
        i += 3
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise BadPath("the path is not valid UTF-8") from None
