"""A server's ``Charset`` (SPEC 10.6): how ``str`` answers are encoded, and text bodies that
declare no charset decoded. JSON stays UTF-8 whatever it says (RFC 8259).

A body's declared ``charset=`` is honoured only when it names one of the charsets a client
can mean (:data:`ACCEPTED`: Unicode, the ISO 8859 and windows-125x families, KOI8 and the
common East Asian ones, under any of their IANA names or Python's aliases). Python's codec
registry holds much more: transforms, and decoders that are slow (``punycode``), fail
(``idna``) or turn escapes into other characters (``utf-7``, ``unicode_escape``) after an
application's input filters saw the bytes. Any other label, known to Python or not, is
refused with 415 when the body is read as text (docs/decisions.md, "Requests").
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from encodings.aliases import aliases

from fwrest.errors import HTTPError

__all__ = [
    "ACCEPTED",
    "CHARSETS",
    "UTF8",
    "Charset",
    "answer_charset",
    "body_text",
    "unencodable",
]


@dataclass(frozen=True, slots=True)
class Charset:
    """One of the charsets a server may answer in."""

    name: str  # as the Charset key writes it
    codec: str  # Python's codec
    label: str  # the IANA name sent in Content-Type
    declared: bool = False  # an answer's own charset= (answer_charset), not a Charset key

    @property
    def described(self) -> str:
        """The charset as an error about it names it."""
        if self.declared:
            return f"the Content-Type's charset {self.name!r}"
        return f"Charset={self.name}"

    @property
    def text_type(self) -> str:
        return f"text/plain; charset={self.label}"


UTF8 = Charset("UTF-8", "utf-8", "utf-8")
CHARSETS: dict[str, Charset] = {
    "utf-8": UTF8,
    "cp1252": Charset("CP1252", "cp1252", "windows-1252"),
    "iso-8859-1": Charset("ISO-8859-1", "latin-1", "iso-8859-1"),
}

# The charsets a request body may declare, by their IANA names (what a 415 lists).
ACCEPTED: tuple[str, ...] = (
    "UTF-8",
    "UTF-16",
    "UTF-16LE",
    "UTF-16BE",
    "UTF-32",
    "UTF-32LE",
    "UTF-32BE",
    "US-ASCII",
    *(f"ISO-8859-{n}" for n in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16)),
    *(f"windows-{n}" for n in range(1250, 1259)),
    "KOI8-R",
    "KOI8-U",
    "Shift_JIS",
    "EUC-JP",
    "EUC-KR",
    "GB2312",
    "GBK",
    "GB18030",
    "Big5",
)
_ACCEPTED_TEXT = (
    "UTF-8, UTF-16, UTF-32, US-ASCII, ISO-8859-1 to -16, windows-1250 to -1258, KOI8-R, "
    "KOI8-U, Shift_JIS, EUC-JP, EUC-KR, GB2312, GBK, GB18030 or Big5"
)


def _squashed(label: str) -> str:
    """A charset label without case and separators: ``UTF_8``, ``utf-8`` and ``utf8`` alike."""
    return re.sub("[^a-z0-9]", "", label.lower())


def _accepted_labels() -> dict[str, str]:
    """squashed label -> Python codec, for every name of an accepted charset: its IANA names
    and Python's aliases of it (``latin1``, ``cp1252``, ``sjis``). Built once, at import: a
    request's label is looked up here, never in the codec registry (which imports a module
    for a name it does not know)."""
    codecs_of = {codecs.lookup(name).name for name in ACCEPTED}
    table: dict[str, str] = {}
    for label in (*aliases, *aliases.values(), *codecs_of, *ACCEPTED):
        try:
            codec = codecs.lookup(label).name
        except LookupError:
            continue
        if codec in codecs_of:
            table.setdefault(_squashed(label), codec)
    return table


_LABELS = _accepted_labels()
_SHOWN = 40  # characters of a refused label quoted back

_DECLARED_MAX = 64
# Content-Type value -> (codec, refused label): (None, "") when it declares no charset
_declared: dict[str, tuple[str | None, str]] = {}


def _declared_codec(content_type: str) -> tuple[str | None, str]:
    """``(codec, "")`` for the accepted charset a ``Content-Type`` value declares with
    ``charset=``, ``(None, "")`` when it declares none, ``(None, label)`` when it declares
    one that is not accepted."""
    found = _declared.get(content_type)
    if found is not None:
        return found
    found = (None, "")
    for param in content_type.split(";")[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            label = value.strip().strip('"')
            codec = _LABELS.get(_squashed(label))
            found = (codec, "") if codec is not None else (None, label or '""')
            break
    if len(_declared) >= _DECLARED_MAX:
        _declared.clear()
    _declared[content_type] = found
    return found


def body_text(body: bytes, content_type: str | None, charset: Charset) -> str:
    """A request body as text: by the charset it declares, else UTF-8 for JSON and the
    server's for the rest; bytes that do not decode are replaced.

    >>> body_text("é".encode("latin-1"), "text/plain; charset=ISO-8859-1", UTF8)
    'é'
    >>> body_text("é".encode(), None, UTF8)
    'é'
    >>> body_text("é".encode(), "application/json", CHARSETS["cp1252"])
    'é'
    >>> body_text(b"+ADw-", "text/plain; charset=utf-7", UTF8)
    Traceback (most recent call last):
    fwrest.errors.HTTPError: 415 Unsupported Media Type

    Raises:
        HTTPError: 415, the body declares a charset that is not accepted (:data:`ACCEPTED`);
            its ``detailedMessage`` names the accepted ones.
    """
    if not content_type:
        return body.decode(charset.codec, "replace")
    codec, refused = _declared_codec(content_type)
    if refused:
        shown = refused[:_SHOWN] + ("..." if len(refused) > _SHOWN else "")
        raise HTTPError(
            415,
            detailed=(
                f"the body's charset {shown!r} is not supported: declare {_ACCEPTED_TEXT}, "
                f"or no charset for the server's ({charset.name})"
            ),
        )
    if codec is None:
        media = content_type.partition(";")[0].strip().lower()
        if media == "application/json" or media.endswith("+json"):
            codec = "utf-8"  # JSON between systems is UTF-8, whatever Charset says (RFC 8259 8.1)
    return body.decode(codec or charset.codec, "replace")


_ANSWERS_MAX = 64
# (Content-Type value, server's codec) -> what answer_charset gives
_answers: dict[tuple[str, str], tuple[Charset, str]] = {}


def _is_json(media: str) -> bool:
    kind = media.split(";", 1)[0].strip().lower()
    return kind == "application/json" or kind.endswith("+json")


def answer_charset(media: str, charset: Charset) -> tuple[Charset, str]:
    """How a ``str`` answer labelled ``media`` is encoded (SPEC 10.6), and the label it is
    sent with: a JSON type (``application/json``, ``+json``) in UTF-8 (RFC 8259), else the
    charset its ``charset=`` declares (one of :data:`ACCEPTED`), else the server's ``charset``,
    added to a ``text/...`` label (UTF-8 included: SPEC 10.6). Remembered per label (a
    handler sends few), so an answer pays one dict look-up.

    >>> answer_charset("text/plain; charset=ISO-8859-1", UTF8)[0].codec
    'iso8859-1'
    >>> answer_charset("application/problem+json", CHARSETS["cp1252"])[0].codec
    'utf-8'
    >>> answer_charset("text/html", CHARSETS["cp1252"])[1]
    'text/html; charset=windows-1252'
    >>> answer_charset("text/html", UTF8)[1]
    'text/html; charset=utf-8'

    Raises:
        LookupError: the label declares a charset that is not one of :data:`ACCEPTED` (the
            message names it).
    """
    key = (media, charset.codec)
    found = _answers.get(key)
    if found is not None:
        return found
    if _is_json(media):
        found = (UTF8, media)
    else:
        codec, refused = _declared_codec(media)
        if refused:
            shown = refused[:_SHOWN] + ("..." if len(refused) > _SHOWN else "")
            raise LookupError(f"the Content-Type's charset {shown!r} is not one fwrest encodes")
        if codec is not None:
            label = next(
                p.partition("=")[2].strip().strip('"')
                for p in media.split(";")[1:]
                if p.partition("=")[0].strip().lower() == "charset"
            )
            found = (Charset(label, codec, label, declared=True), media)
        elif not media.lower().startswith("text/"):
            found = (charset, media)
        else:  # on every port, UTF-8 too: a browser reads an unlabelled text/html as windows-1252
            found = (charset, f"{media}; charset={charset.label}")
    if len(_answers) >= _ANSWERS_MAX:
        _answers.clear()
    _answers[key] = found
    return found


def unencodable(text: str, exc: UnicodeEncodeError, charset: str) -> str:
    """Why ``text`` is no answer in ``charset`` (as an error names it), from the error its
    encoding raised: the first character it has no byte for, and where."""
    char = text[exc.start : exc.start + 1]
    return f"text that {charset} cannot encode ({char!r} at {exc.start})"
