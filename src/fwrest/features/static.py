"""Static files (SPEC 10.3): a location's ``RootPath``, served at its paths that no route takes.

The request path is the one the normaliser made (``..`` resolved, encoded separators refused
before this), relative to the location. A file is served only when each segment is a plain
name (none starts with ``.``, none holds a backslash), and the file, its symbolic links
resolved, lies inside ``RootPath`` and is a regular file; a folder is answered by its
``DefaultPage`` or not at all (never a listing). Anything else is 404, whatever the reason, so
that nothing tells what exists outside.

Every file answer has ``ETag`` and ``Last-Modified`` and ``Accept-Ranges``. The conditions are
evaluated in RFC 9110 13.2.2's order: a false ``If-Match`` (the strong comparison) or, without
it, ``If-Unmodified-Since`` gives 412; then ``If-None-Match`` (the weak comparison) or, without
it, ``If-Modified-Since`` gives 304, with the ``ETag`` and ``Vary`` its 200 would carry (through
a compressing port the compression stage says which: a compressed answer's tag is weak); then
``If-Range`` (the strong comparison) decides whether the ``Range`` applies. One
``Range: bytes=`` range gives 206 of the identity bytes with its strong tag and the 200's
``Vary`` (416 when it starts past the end; several ranges, on one ``Range`` line or on
more, empty list elements not counted: the whole file; an empty file
ignores it: 200; a ``HEAD`` ignores ``Range`` and ``If-Range``, RFC 9110 14.2). The file is read in bounded pieces off the loop and streamed
(``Reply.stream`` with its length): never read whole into memory.
"""

from __future__ import annotations

import asyncio
import mimetypes
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC
from email.utils import formatdate, parsedate_to_datetime
from pathlib import Path
from typing import BinaryIO

from fwrest.errors import HTTPError
from fwrest.features.compression import VARY, Compression
from fwrest.wire import Reply, Request

__all__ = ["StaticFiles"]

PIECE = 262144  # bytes read at a time (the engine writes each before the next is read)
_TEXT_CHARSET = "; charset=utf-8"


@dataclass(frozen=True, slots=True)
class _File:
    handle: BinaryIO  # open, unbuffered; closed by whoever ends the answer (or its collection)
    size: int
    mtime: float
    etag: str
    media: str


def _lines(req: Request, name: str) -> list[str]:
    """Every field line of ``name``: a list field's lines are one list (RFC 9110 5.3), and a
    field of one value given on two lines is no valid value."""
    return [value for key, value in req.headers if key == name]


def _listed(req: Request, name: str) -> str | None:
    """A list field (``If-Match``, ``If-None-Match``), its lines joined (RFC 9110 5.3)."""
    lines = _lines(req, name)
    return ", ".join(lines) if lines else None


def _one(req: Request, name: str) -> str | None:
    """A field of one value (a date, ``If-Range``): None when absent; ``""`` (no valid value)
    when given on more than one line."""
    lines = _lines(req, name)
    if not lines:
        return None
    return lines[0] if len(lines) == 1 else ""


class StaticFiles:
    """The files of one location.

    Args:
        root: the location's ``RootPath`` (an existing folder).
        default_page: the file that answers a folder's path (None: a folder is 404).
        types: extension (``.xlsx``) -> media type, over :mod:`mimetypes`.
        compression: the port's compression stage (None: off), asked what a 304's 200 would
            have been (its ``Vary``, its weak ``ETag`` when compressed).
    """

    def __init__(
        self,
        root: Path,
        default_page: str | None,
        types: Iterable[tuple[str, str]],
        compression: Compression | None = None,
    ) -> None:
        self._compression = compression
        self.root = os.path.realpath(root)
        self._inside = self.root.rstrip(os.sep) + os.sep
        self.default_page = default_page
        self._types = {ext.lower(): media for ext, media in types}
        mimetypes.init()  # once, here: media_type runs on the executor's threads

    # -- finding the file (off the loop: file system calls) -----------------------------------
    def _open(self, rel: str) -> _File | None:
        """The file that answers ``rel``, open, or None (404)."""
        segments = [s for s in rel.split("/") if s]
        for seg in segments:
            if seg.startswith(".") or "\\" in seg or "\0" in seg:
                return None
        candidate = os.path.join(self.root, *segments)
        found = self._regular(candidate)
        page = self.default_page
        if found is None and page is not None and os.path.isdir(os.path.realpath(candidate)):
            found = self._regular(os.path.join(candidate, page))
        return found

    def _regular(self, candidate: str) -> _File | None:
        real = os.path.realpath(candidate)
        if real != self.root and not real.startswith(self._inside):
            return None  # a symbolic link (or a name) that leads outside RootPath
        if any(part.startswith(".") for part in real[len(self._inside) :].split(os.sep)):
            return None  # a link to a hidden file inside the root
        try:
            # the resolved name, no link followed now (one swapped in meanwhile is refused);
            # non-blocking: a FIFO swapped in cannot hold the thread (fstat refuses it next)
            fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            info = os.fstat(fd)
        except OSError:
            info = None
        if info is None or not stat.S_ISREG(info.st_mode):
            os.close(fd)
            return None
        handle = open(fd, "rb", buffering=0)  # noqa: SIM115 (closed with the answer)
        etag = f'"{info.st_mtime_ns:x}-{info.st_size:x}"'
        return _File(handle, info.st_size, info.st_mtime, etag, self.media_type(real))

    def media_type(self, path: str) -> str:
        ext = os.path.splitext(path)[1].lower()
        media = self._types.get(ext) or mimetypes.guess_type(path)[0]
        if media is None:
            return "application/octet-stream"
        if media[:5].lower() == "text/" and "charset=" not in media.lower():  # RFC 9110 8.3.1
            media += _TEXT_CHARSET
        return media

    async def exists(self, rel: str) -> bool:
        """Whether ``rel`` names a file served here (an ``OPTIONS`` request's question)."""
        found = await asyncio.get_running_loop().run_in_executor(None, self._open, rel)
        if found is None:
            return False
        found.handle.close()
        return True

    # -- the answer ---------------------------------------------------------------------------
    async def serve(self, req: Request, rel: str) -> Reply:
        """The answer for a GET or HEAD of ``rel`` (the path relative to the location).

        Raises:
            HTTPError: 404 (no such file here), 412 (a false ``If-Match`` or
                ``If-Unmodified-Since``), 416 (a range past the end).
        """
        found = await asyncio.get_running_loop().run_in_executor(None, self._open, rel)
        if found is None:
            raise HTTPError(404)
        try:
            return self._answer(req, found)
        except BaseException:
            found.handle.close()
            raise

    def _answer(self, req: Request, found: _File) -> Reply:
        failed = _precondition_failed(req, found)
        if failed:
            raise HTTPError(412, detailed=failed)  # the file is closed by serve
        headers = [
            ("content-type", found.media),
            ("etag", found.etag),
            ("last-modified", formatdate(found.mtime, usegmt=True)),
            ("accept-ranges", "bytes"),
        ]
        if _not_modified(req, found):
            found.handle.close()
            return Reply(304, self._not_modified_headers(req, found, headers[2]), b"")
        start, end = 0, found.size - 1
        status = 200
        # range handling is defined for GET only (RFC 9110 14.2): a HEAD's Range and
        # If-Range are ignored; an empty file has no byte to send in a 206 nor to miss
        wanted = _listed(req, "range") if req.method == "GET" else None
        if wanted is not None and found.size and _if_range_holds(req, found):
            span = _range(wanted, found.size)
            if span == "unsatisfiable":
                raise HTTPError(
                    416,
                    detailed=f"the file has {found.size} bytes",
                    headers=(("content-range", f"bytes */{found.size}"),),
                )
            if isinstance(span, tuple):
                start, end = span
                status = 206
                headers.append(("content-range", f"bytes {start}-{end}/{found.size}"))
                # the identity bytes (the stage leaves a 206 alone), with the 200's Vary
                # (RFC 9110 15.3.7)
                compression = self._compression
                if compression is not None and compression.variant(req, found.media, found.size)[0]:
                    headers.append(VARY)
        length = max(end - start + 1, 0)
        if length == 0:
            found.handle.close()
            return Reply(status, headers, b"")
        stream = _Pieces(found.handle, start, length)
        return Reply(status, headers, b"", stream=stream, length=length)

    def _not_modified_headers(
        self, req: Request, found: _File, modified: tuple[str, str]
    ) -> list[tuple[str, str]]:
        """A 304's ``ETag``, ``Last-Modified`` and the ``Vary`` the 200 would carry (RFC 9110
        15.4.5): through a compressing port, the compression stage's (which leaves a 304
        alone), with the weak tag of a compressed answer."""
        etag = found.etag
        compression = self._compression
        if compression is None:
            return [("etag", etag), modified]
        vary, coding = compression.variant(req, found.media, found.size)
        kept = [("etag", etag if coding is None else "W/" + etag), modified]
        if vary:
            kept.append(VARY)
        return kept


class _Pieces:
    """``length`` bytes of the file from ``start``, a piece at a time, read off the loop
    (``pread``: no seek; the default executor, as the file system calls before). The file is
    closed at the end, and by ``aclose`` also when no piece was asked for (a HEAD request's
    stream is closed unread: an async generator's ``finally`` would not run then)."""

    def __init__(self, handle: BinaryIO, start: int, length: int) -> None:
        self._handle = handle
        self._offset = start
        self._end = start + length

    def __aiter__(self) -> _Pieces:
        return self

    async def __anext__(self) -> bytes:
        if self._offset < self._end and not self._handle.closed:
            try:
                piece = await asyncio.get_running_loop().run_in_executor(
                    None,
                    os.pread,
                    self._handle.fileno(),
                    min(PIECE, self._end - self._offset),
                    self._offset,
                )
            except BaseException:
                self._handle.close()
                raise
            if piece:  # else the file shrank meanwhile: the client sees a short answer
                self._offset += len(piece)
                return piece
        self._handle.close()
        raise StopAsyncIteration

    async def aclose(self) -> None:
        self._handle.close()


def _date(value: str) -> float | None:
    """An HTTP-date as a timestamp; None when it is not one (the header is then ignored, RFC
    9110 13.1.3, 13.1.4): a list of dates, or a zone other than GMT (5.6.7: the two forms with
    a comma end with ``GMT``; asctime's has no zone and is GMT)."""
    parts = value.split()
    if value.count(",") > 1 or not parts or ("," in value and parts[-1] != "GMT"):
        return None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _precondition_failed(req: Request, found: _File) -> str:
    """RFC 9110 13.1.1, 13.1.4, 13.2.2: why ``If-Match`` (the strong comparison: ``*`` or
    the file's own tag; a weak tag never matches) or, without it, ``If-Unmodified-Since``
    (the file changed after that date) fails; empty when neither does (412 otherwise)."""
    match = _listed(req, "if-match")
    if match is not None:
        tags = {t.strip() for t in match.split(",")}
        if "*" in tags or found.etag in tags:
            return ""
        return "If-Match names no current version of the file"
    since = _one(req, "if-unmodified-since")
    if since is None:
        return ""
    when = _date(since)
    if when is None or int(found.mtime) <= when:
        return ""
    return "the file was modified after If-Unmodified-Since"


def _not_modified(req: Request, found: _File) -> bool:
    """RFC 9110 13.1.2, 13.1.3: If-None-Match first (the weak comparison: a ``W/`` tag
    matches the file's, as the weak tag of its compressed answer does); If-Modified-Since
    only without it."""
    match = _listed(req, "if-none-match")
    if match is not None:
        tags = {t.strip().removeprefix("W/") for t in match.split(",")}
        return "*" in tags or found.etag in tags
    since = _one(req, "if-modified-since")
    if since is None:
        return False
    when = _date(since)
    return when is not None and int(found.mtime) <= when


def _if_range_holds(req: Request, found: _File) -> bool:
    """A ``Range`` applies unless ``If-Range`` names another version of the file (RFC 9110
    13.1.5: the strong comparison; a weak tag, as a compressed answer's, never matches)."""
    condition = _one(req, "if-range")
    if condition is None:
        return True
    if not condition:  # on two lines: no valid validator, so the whole file (13.1.5)
        return False
    condition = condition.strip()
    if condition.startswith('"'):
        return condition == found.etag
    when = _date(condition)
    return when is not None and int(found.mtime) <= when


def _range(value: str, size: int) -> tuple[int, int] | str | None:
    """One ``bytes=`` range of a file of ``size`` bytes (``size`` > 0: an empty file's Range
    is ignored before) as (first, last); ``"unsatisfiable"``; None to send the whole file (not
    bytes, several ranges, unreadable). The range set is a list: its empty elements count for
    nothing (RFC 9110 5.6.1.2), and ``value`` holds every ``Range`` line, joined (5.3).

    >>> _range("bytes=0-99", 1000), _range("bytes=-100", 1000), _range("bytes=900-", 1000)
    ((0, 99), (900, 999), (900, 999))
    >>> _range("bytes=1000-", 1000), _range("bytes=0-1,5-9", 1000), _range("items=1-2", 1000)
    ('unsatisfiable', None, None)
    >>> _range("bytes=,0-4, ,", 1000), _range("bytes=0-1, bytes=3-4", 1000), _range("bytes=,", 9)
    ((0, 4), None, None)
    """
    unit, _, spec = value.partition("=")
    if unit.strip().lower() != "bytes":
        return None
    ranges = [part for part in spec.split(",") if part.strip(" \t")]
    if len(ranges) != 1:
        return None
    first, dash, last = ranges[0].strip().partition("-")
    if not dash:
        return None
    first, last = first.strip(), last.strip()
    if not (first.isdigit() or not first) or not (last.isdigit() or not last) or not first + last:
        return None
    try:
        if not first:  # the last N bytes
            suffix = int(last)
            if suffix <= 0:
                return "unsatisfiable"
            return max(size - suffix, 0), size - 1
        begin = int(first)
        finish = int(last) if last else size - 1
    except ValueError:
        return None
    if begin >= size:
        return "unsatisfiable"
    if finish < begin:
        return None
    return begin, min(finish, size - 1)
