# cython: language_level=3, boundscheck=False, wraparound=False
"""The native engine's parser: llhttp's C API with the per-request work of the pure engine
(``server/http.py``) done in C (docs/engine.md, "The native engine").

:class:`RequestParser` takes the place of ``httptools.HttpRequestParser`` on a connection
(the same llhttp release, the same strictness, the same errors: httptools' exception
classes, so that ``HttpProtocol._feed`` treats both alike). Where httptools calls the
protocol once per piece of the request (its target, each header field, each piece of the
body, each chunk), this parser gathers them itself and applies the limits the pure engine
applies in those callbacks, with the same answers:

* the target and the header fields, with ``MaxHeaderSize`` on their parsed size and
  ``MaxHeaders`` on their count (431), names with ``_`` dropped (counted, the first one noted);
* the body's pieces with the route's limit (413), the chunks counted, a chunked body's
  trailer fields counted against the limit and discarded.

The protocol is called once for a request without a body, ``_native_request`` (its begin,
head and end: ``on_message_begin``, then the head's checks, in Python: they are the pure
engine's own code, then ``on_message_complete``), twice for one with a body:
``_native_head`` (begin and head; it returns the body limit) and ``on_message_complete``
(with the body, joined). A request whose head is incomplete when the bytes run out is begun
(``on_message_begin``) as ``feed_data`` returns: the protocol's states and deadlines are then
what httptools' calls would have made them. The rest of
the engine (the states, deadlines, pipelining, write flow, TLS) is ``HttpProtocol``'s, the
same for both parsers.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.unicode cimport PyUnicode_DecodeLatin1
from libc.string cimport memchr, strlen

from httptools.parser.errors import (
    HttpParserCallbackError,
    HttpParserError,
    HttpParserInvalidMethodError,
    HttpParserInvalidStatusError,
    HttpParserInvalidURLError,
    HttpParserUpgrade,
)

from fwrest.errors import HTTPError

cimport cython

from fwrest._native cimport cparser

__all__ = ("RequestParser", "LLHTTP_VERSION")

LLHTTP_VERSION = "9.4.3"

# a header field with "_" in its name was dropped: noted once per worker (as server/http.py)
cdef bint _underscore_noted = False


cdef class RequestParser:
    """One connection's parser (see the module's text)."""

    cdef:
        cparser.llhttp_t* _c
        cparser.llhttp_settings_t* _settings
        object _proto
        object _last_error
        # the head being read
        list _url_pieces
        Py_ssize_t _url_len
        bytes _name
        bytes _value
        list _headers
        Py_ssize_t _parsed
        Py_ssize_t _dropped
        bint _in_body
        bint _begun  # a request began, not told yet: on_message_begin is owed
        bint _whole  # the request had no body: the protocol was told all of it at its head
        # the body being read
        list _pieces
        Py_ssize_t _size
        Py_ssize_t _limit
        Py_ssize_t _chunks
        # limits
        Py_ssize_t _max_header_size
        Py_ssize_t _max_headers

    def __cinit__(self):
        self._c = <cparser.llhttp_t*>PyMem_Malloc(sizeof(cparser.llhttp_t))
        if self._c is NULL:
            raise MemoryError()
        self._settings = <cparser.llhttp_settings_t*>PyMem_Malloc(
            sizeof(cparser.llhttp_settings_t)
        )
        if self._settings is NULL:
            raise MemoryError()

    def __dealloc__(self):
        PyMem_Free(self._c)
        PyMem_Free(self._settings)

    def __init__(self, protocol, Py_ssize_t max_header_size, Py_ssize_t max_headers,
                 Py_ssize_t body_limit):
        cparser.llhttp_settings_init(self._settings)
        self._settings.on_message_begin = cb_on_message_begin
        self._settings.on_url = cb_on_url
        self._settings.on_header_field = cb_on_header_field
        self._settings.on_header_value = cb_on_header_value
        self._settings.on_headers_complete = cb_on_headers_complete
        self._settings.on_body = cb_on_body
        self._settings.on_message_complete = cb_on_message_complete
        self._settings.on_chunk_header = cb_on_chunk_header
        self._settings.on_chunk_complete = cb_on_chunk_complete
        cparser.llhttp_init(self._c, cparser.HTTP_REQUEST, self._settings)
        self._c.data = <void*>self
        self._proto = protocol
        self._last_error = None
        self._max_header_size = max_header_size
        self._max_headers = max_headers
        self._limit = body_limit
        self._begun = False
        self._reset()

    cdef inline void _reset(self):
        self._url_pieces = []
        self._url_len = 0
        self._name = None
        self._value = None
        self._headers = []
        self._parsed = 0
        self._dropped = 0
        self._in_body = False
        self._whole = False
        self._pieces = []
        self._size = 0
        self._chunks = 0

    # -- what the protocol reads ------------------------------------------------------------
    @property
    def parsed(self):
        """The parsed size of the head being read, so far."""
        return self._parsed

    @property
    def headers(self):
        """The header fields of the head being read, so far (an engine's refusal looks for
        the client's request id among them)."""
        return self._headers

    @property
    def body_size(self):
        """The body bytes (and trailer fields) of the request being read, so far."""
        return self._size

    @property
    def chunks(self):
        """The chunks of the request being read, so far."""
        return self._chunks

    def get_http_version(self):
        return f"{self._c.http_major}.{self._c.http_minor}"

    def should_keep_alive(self):
        return bool(cparser.llhttp_should_keep_alive(self._c))

    def should_upgrade(self):
        return bool(self._c.upgrade)

    def get_method(self):
        return <bytes>cparser.llhttp_method_name(<cparser.llhttp_method_t>self._c.method)

    def feed_data(self, bytes data not None):
        cdef const char* buf = PyBytes_AS_STRING(data)
        cdef size_t size = <size_t>PyBytes_GET_SIZE(data)
        cdef cparser.llhttp_errno_t err = cparser.llhttp_execute(self._c, buf, size)
        cdef const char* pos
        if self._begun:
            # a request began in these bytes and its head is not complete (or is refused):
            # the protocol learns it now, before it looks at its states (see _on_message_begin)
            self._begun = False
            self._proto.on_message_begin()
        if self._c.upgrade == 1 and err == cparser.HPE_PAUSED_UPGRADE:
            pos = cparser.llhttp_get_error_pos(self._c)
            cparser.llhttp_resume_after_upgrade(self._c)
            raise HttpParserUpgrade(pos - buf)
        if err != cparser.HPE_OK:
            ex = _parser_error(self._c, <cparser.llhttp_errno_t>self._c.error)
            if isinstance(ex, HttpParserCallbackError) and self._last_error is not None:
                ex.__context__ = self._last_error
                self._last_error = None
            raise ex

    # -- the request's pieces ----------------------------------------------------------------
    cdef int _on_message_begin(self) except -1:
        # the protocol's on_message_begin is owed, not called: it goes with the head (one
        # call), or when these bytes are parsed. Nothing of the protocol runs in between, so
        # it sees what it would have seen called here.
        self._reset()
        self._begun = True
        return 0

    cdef int _on_url(self, const char* at, size_t length) except -1:
        if self._url_len == 0:
            # the request line around the target: method, two spaces, HTTP/1.1, CRLF
            self._parsed += <Py_ssize_t>strlen(
                cparser.llhttp_method_name(<cparser.llhttp_method_t>self._c.method)
            ) + 12
        self._url_pieces.append(PyBytes_FromStringAndSize(at, <Py_ssize_t>length))
        self._url_len += <Py_ssize_t>length
        self._parsed += <Py_ssize_t>length
        if self._parsed > self._max_header_size:
            raise HTTPError(431, close=True)
        return 0

    cdef int _on_header_field(self, const char* at, size_t length) except -1:
        self._field_done()
        piece = PyBytes_FromStringAndSize(at, <Py_ssize_t>length)
        if self._name is None:
            self._name = piece
        else:
            self._name = self._name + piece
        return 0

    cdef int _on_header_value(self, const char* at, size_t length) except -1:
        piece = PyBytes_FromStringAndSize(at, <Py_ssize_t>length)
        if self._value is None:
            self._value = piece
        else:
            self._value = self._value + piece
        return 0

    cdef int _field_done(self) except -1:
        """A header (or trailer) field is whole: where httptools calls ``on_header``."""
        if self._value is None:
            return 0
        name = self._name
        value = self._value
        self._name = self._value = None
        cdef Py_ssize_t nlen = PyBytes_GET_SIZE(name)
        cdef Py_ssize_t vlen = PyBytes_GET_SIZE(value)
        if self._in_body:
            # a trailer field: part of the body, counted against its limit, discarded
            self._size += nlen + vlen + 4
            if self._size > self._limit:
                raise HTTPError(
                    413, detailed=f"the body may be at most {self._limit} bytes", close=True
                )
            return 0
        self._parsed += nlen + vlen + 4
        if self._parsed > self._max_header_size:
            raise HTTPError(431, close=True)
        if len(self._headers) + self._dropped >= self._max_headers:
            raise HTTPError(
                431, detailed=f"at most {self._max_headers} header fields", close=True
            )
        cdef const char* raw = PyBytes_AS_STRING(name)
        if memchr(raw, ord("_"), <size_t>nlen) is not NULL:
            global _underscore_noted
            self._dropped += 1
            if not _underscore_noted:
                _underscore_noted = True
                self._proto._native_note_underscore(name)
            return 0
        self._headers.append((_lower_latin1(raw, nlen), PyUnicode_DecodeLatin1(
            PyBytes_AS_STRING(value), vlen, NULL)))
        return 0

    cdef int _on_headers_complete(self) except -1:
        self._field_done()
        if len(self._url_pieces) == 1:
            url = self._url_pieces[0]
        else:
            url = b"".join(self._url_pieces)
        cdef bint begun = self._begun
        self._begun = False
        cdef cparser.llhttp_t* c = self._c
        if not c.upgrade and not (c.flags & (cparser.F_CHUNKED | cparser.F_TRANSFER_ENCODING)) and (
            not (c.flags & cparser.F_CONTENT_LENGTH) or c.content_length == 0
        ):
            # no body follows (llhttp completes the message next): the whole request in one
            # call, its begin, head and end
            self._whole = True
            self._proto._native_request(url, self._headers, self._parsed, self._dropped, begun)
            return 0
        self._limit = self._proto._native_head(
            url, self._headers, self._parsed, self._dropped, begun
        )
        self._in_body = True
        return 0

    cdef int _on_body(self, const char* at, size_t length) except -1:
        self._size += <Py_ssize_t>length
        if self._size > self._limit:
            raise HTTPError(
                413, detailed=f"the body may be at most {self._limit} bytes", close=True
            )
        self._pieces.append(PyBytes_FromStringAndSize(at, <Py_ssize_t>length))
        return 0

    cdef int _on_chunk_header(self) except -1:
        if self._name is not None or self._value is not None:
            raise HttpParserError("invalid headers state")
        self._chunks += 1
        return 0

    cdef int _on_message_complete(self) except -1:
        if self._whole:
            self._whole = False
            return 0  # the protocol has it (_on_headers_complete)
        pieces = self._pieces
        if not pieces:
            body = b""
        elif len(pieces) == 1:
            body = pieces[0]
        else:
            body = b"".join(pieces)
        self._pieces = []
        self._proto.on_message_complete(body)
        return 0


cdef str _lower_latin1(const char* raw, Py_ssize_t size):
    """A header name, lower-cased (llhttp lets only ASCII token characters through).

    Lowered in a buffer of its own, never in a bytes object: CPython shares the bytes
    objects of one byte (``PyBytes_FromStringAndSize(s, 1)`` returns a cached one), so
    writing into one would change ``b"E"`` for the whole process."""
    cdef char small[128]
    cdef char* p = small
    cdef Py_ssize_t i
    cdef char c
    if size > 128:
        p = <char*>PyMem_Malloc(<size_t>size)
        if p is NULL:
            raise MemoryError()
    try:
        for i in range(size):
            c = raw[i]
            if 65 <= c <= 90:
                c = c + 32
            p[i] = c
        return PyUnicode_DecodeLatin1(p, size, NULL)
    finally:
        if p is not small:
            PyMem_Free(p)


# -- llhttp's callbacks: an exception is kept and reported by feed_data, as httptools does --
cdef int cb_on_message_begin(cparser.llhttp_t* c) except -1:
    cdef RequestParser p = <RequestParser>c.data
    try:
        p._on_message_begin()
    except BaseException as ex:
        p._last_error = ex
        return -1
    return 0


cdef int cb_on_url(cparser.llhttp_t* c, const char* at, size_t length) except -1:
    cdef RequestParser p = <RequestParser>c.data
    try:
        p._on_url(at, length)
    except BaseException as ex:
        cparser.llhttp_set_error_reason(c, "`on_url` callback error")
        p._last_error = ex
        return cparser.HPE_USER
    return 0


cdef int cb_on_header_field(cparser.llhttp_t* c, const char* at, size_t length) except -1:
    cdef RequestParser p = <RequestParser>c.data
    try:
        p._on_header_field(at, length)
    except BaseException as ex:
        cparser.llhttp_set_error_reason(c, "`on_header_field` callback error")
        p._last_error = ex
        return cparser.HPE_USER
    return 0


cdef int cb_on_header_value(cparser.llhttp_t* c, const char* at, size_t length) except -1:
    cdef RequestParser p = <RequestParser>c.data
    try:
        p._on_header_value(at, length)
    except BaseException as ex:
        cparser.llhttp_set_error_reason(c, "`on_header_value` callback error")
        p._last_error = ex
        return cparser.HPE_USER
    return 0


cdef int cb_on_headers_complete(cparser.llhttp_t* c) except -1:
    cdef RequestParser p = <RequestParser>c.data
    try:
        p._on_headers_complete()
    except BaseException as ex:
        p._last_error = ex
        return -1
    return 1 if c.upgrade else 0


cdef int cb_on_body(cparser.llhttp_t* c, const char* at, size_t length) except -1:
    cdef RequestParser p = <RequestParser>c.data
    try:
        p._on_body(at, length)
    except BaseException as ex:
        cparser.llhttp_set_error_reason(c, "`on_body` callback error")
        p._last_error = ex
        return cparser.HPE_USER
    return 0


cdef int cb_on_message_complete(cparser.llhttp_t* c) except -1:
    cdef RequestParser p = <RequestParser>c.data
    try:
        p._on_message_complete()
    except BaseException as ex:
        p._last_error = ex
        return -1
    return 0


cdef int cb_on_chunk_header(cparser.llhttp_t* c) except -1:
    cdef RequestParser p = <RequestParser>c.data
    try:
        p._on_chunk_header()
    except BaseException as ex:
        p._last_error = ex
        return -1
    return 0


cdef int cb_on_chunk_complete(cparser.llhttp_t* c) except -1:
    cdef RequestParser p = <RequestParser>c.data
    try:
        p._field_done()
    except BaseException as ex:
        p._last_error = ex
        return -1
    return 0


cdef object _parser_error(cparser.llhttp_t* c, cparser.llhttp_errno_t errno):
    cdef const char* reason = cparser.llhttp_get_error_reason(c)
    text = (<bytes>reason).decode("latin-1") if reason is not NULL else ""
    if errno in (
        cparser.HPE_CB_MESSAGE_BEGIN,
        cparser.HPE_CB_HEADERS_COMPLETE,
        cparser.HPE_CB_MESSAGE_COMPLETE,
        cparser.HPE_CB_CHUNK_HEADER,
        cparser.HPE_CB_CHUNK_COMPLETE,
        cparser.HPE_USER,
    ):
        cls = HttpParserCallbackError
    elif errno == cparser.HPE_INVALID_STATUS:
        cls = HttpParserInvalidStatusError
    elif errno == cparser.HPE_INVALID_METHOD:
        cls = HttpParserInvalidMethodError
    elif errno == cparser.HPE_INVALID_URL:
        cls = HttpParserInvalidURLError
    else:
        cls = HttpParserError
    return cls(text)
