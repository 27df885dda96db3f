"""A server's ``Charset`` (SPEC 10.6): how ``str`` answers are encoded, and text bodies that
declare no charset decoded. JSON stays UTF-8 whatever it says (RFC 8259)."""

from __future__ import annotations

import codecs
from dataclasses import dataclass

__all__ = ["CHARSETS", "UTF8", "Charset", "body_text"]


@dataclass(frozen=True, slots=True)
class Charset:
    """One of the charsets a server may answer in."""

    name: str  # as the Charset key writes it
    codec: str  # Python's codec
    label: str  # the IANA name sent in Content-Type

    @property
    def text_type(self) -> str:
        return f"text/plain; charset={self.label}"


UTF8 = Charset("UTF-8", "utf-8", "utf-8")
CHARSETS: dict[str, Charset] = {
    "utf-8": UTF8,
    "cp1252": Charset("CP1252", "cp1252", "windows-1252"),
    "iso-8859-1": Charset("ISO-8859-1", "latin-1", "iso-8859-1"),
}

_DECLARED_MAX = 64
_declared: dict[str, str | None] = {}


def _declared_codec(content_type: str) -> str | None:
    """The text codec a ``Content-Type`` value declares with ``charset=``, or None (none, or
    one Python has no text codec for)."""
    found = _declared.get(content_type)
    if found is not None or content_type in _declared:
        return found
    codec = None
    for param in content_type.split(";")[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            label = value.strip().strip('"').lower()
            try:
                info = codecs.lookup(label)
            except LookupError:
                break
            # only text encodings: codecs also holds transforms (rot13, base64)
            if getattr(info, "_is_text_encoding", True):
                codec = info.name
            break
    if len(_declared) >= _DECLARED_MAX:
        _declared.clear()
    _declared[content_type] = codec
    return codec


def body_text(body: bytes, content_type: str | None, charset: Charset) -> str:
    """A request body as text: by the charset it declares, else the server's; bytes that do
    not decode are replaced.

    >>> body_text("é".encode("latin-1"), "text/plain; charset=ISO-8859-1", UTF8)
    'é'
    >>> body_text("é".encode(), None, UTF8)
    'é'
    """
    codec = _declared_codec(content_type) if content_type else None
    return body.decode(codec or charset.codec, "replace")
