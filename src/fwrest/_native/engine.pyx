# cython: language_level=3, boundscheck=False, wraparound=False
"""The native engine: llhttp's C API with the per-request work of the pure engine
(``server/http.py``) done in C (docs/engine.md, "The native engine").

:class:`RequestParser` takes the place of ``httptools.HttpRequestParser`` on a connection
(the same llhttp release, the same strictness, the same errors: httptools' exception
classes, so that ``HttpProtocol._feed`` treats both alike). Where httptools calls the
protocol once per piece of the request (its target, each header field, each piece of the
body, each chunk) and the pure engine checks the head in Python, this parser gathers the
pieces itself and applies the limits and checks the pure engine applies, with the same
answers:

* the target and the header fields, with ``MaxHeaderSize`` on their parsed size and
  ``MaxHeaders`` on their count (431), names with ``_`` dropped (counted, the first one noted);
* the head's checks as it completes (``on_headers_complete``'s, in its order): one ``Host``,
  valid, an absolute-form target's authority in its place, one ``Authorization``,
  ``Expect``, the version, ``Transfer-Encoding``, a ``Content-Encoding`` with a body;
* the body's pieces with the route's limit (413), the chunks counted, a chunked body's
  trailer fields counted against the limit and discarded.

The protocol is called once for a request without a body, ``_native_request`` (its begin,
head and end, the ``wire.Request`` handed on), twice for one with a body: ``_native_head``
(begin and head; it returns the body limit) and ``on_message_complete`` (with the body,
joined). A request whose head is incomplete when the bytes run out is begun
(``on_message_begin``) as ``feed_data`` returns: the protocol's states and deadlines are then
what httptools' calls would have made them. :func:`encode_reply` is ``wire.encode_reply``
in C, byte for byte. The rest of the engine (the states, deadlines, pipelining, write flow,
TLS) is ``HttpProtocol``'s, the same for both.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_AsUnsignedLongLongMask
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.unicode cimport (
    PyUnicode_1BYTE_KIND,
    PyUnicode_DATA,
    PyUnicode_DecodeLatin1,
    PyUnicode_GET_LENGTH,
    PyUnicode_KIND,
)
from libc.string cimport memchr, memcmp, memcpy, strlen
from libc.time cimport time, time_t

from httptools.parser.errors import (
    HttpParserCallbackError,
    HttpParserError,
    HttpParserInvalidMethodError,
    HttpParserInvalidStatusError,
    HttpParserInvalidURLError,
    HttpParserUpgrade,
)

from fwrest.errors import HTTPError
from fwrest.wire import (
    _STATUS_LINES,
    _DateLine,
    coded_body,
    expects_continue,
    protocol_refusal,
    transfer_coding_refusal,
)
from fwrest.wire import encode_reply as _encode_reply_pure

cimport cython

from fwrest._native cimport cparser

__all__ = (
    "FLAG_BEGIN",
    "FLAG_CHUNKED",
    "FLAG_EXPECT",
    "FLAG_HTTP10",
    "FLAG_KEEP",
    "FLAG_UPGRADE",
    "LLHTTP_VERSION",
    "RequestParser",
    "encode_reply",
)

LLHTTP_VERSION = "9.4.3"

# What the protocol's _native_request and _native_head are told of a head, as bits of one
# int (server/http.py has the same values; tests/server/test_engines.py compares them)
cdef enum:
    _BEGIN = 1  # the request's begin is told with it (on_message_begin not called yet)
    _HTTP10 = 2  # HTTP/1.0
    _KEEP = 4  # llhttp_should_keep_alive
    _UPGRADE = 8  # the request asks for an Upgrade
    _CHUNKED = 16  # a Transfer-Encoding field (chunked: the others are refused)
    _EXPECT = 32  # Expect: 100-continue

FLAG_BEGIN, FLAG_HTTP10, FLAG_KEEP = _BEGIN, _HTTP10, _KEEP
FLAG_UPGRADE, FLAG_CHUNKED, FLAG_EXPECT = _UPGRADE, _CHUNKED, _EXPECT

# the header fields the head's checks look at (classified as they are read)
cdef enum:
    _OTHER = 0
    _HOST = 1
    _AUTHORIZATION = 2
    _CONTENT_LENGTH = 3
    _TRANSFER_ENCODING = 4
    _EXPECT_FIELD = 5
    _CONTENT_ENCODING = 6

# a fault found among the fields, answered when the head is whole (in the fields' order, as
# the pure engine's loop over them answers the first)
cdef enum:
    _NO_FAULT = 0
    _REPEATED_AUTHORIZATION = 1
    _EXPECTATION = 2

# a header field with "_" in its name was dropped: noted once per worker (as server/http.py)
cdef bint _underscore_noted = False

# the methods' names as str, made once each
cdef list _METHODS = [None] * 64

# server/http.py's Host check and its cache of valid values (looked up at the first use: that
# module imports this one)
cdef object _hosts_ok = None
cdef object _host_ok = None
cdef object _absolute = None

_ABSOLUTE = (b"http://", b"https://")


cdef inline bint _keeps(cparser.llhttp_t* c):
    """llhttp_should_keep_alive, and a ``close`` option closes in HTTP/1.0 too: llhttp keeps
    an HTTP/1.0 connection that names ``keep-alive`` whatever else its Connection says (RFC
    9112 9.6: after a ``close`` the server answers and closes)."""
    return cparser.llhttp_should_keep_alive(c) and not (c.flags & cparser.F_CONNECTION_CLOSE)


cdef inline int _kind(const char* p, Py_ssize_t n):
    if n == 4:
        return _HOST if memcmp(p, b"host", 4) == 0 else _OTHER
    if n == 6:
        return _EXPECT_FIELD if memcmp(p, b"expect", 6) == 0 else _OTHER
    if n == 13:
        return _AUTHORIZATION if memcmp(p, b"authorization", 13) == 0 else _OTHER
    if n == 14:
        return _CONTENT_LENGTH if memcmp(p, b"content-length", 14) == 0 else _OTHER
    if n == 16:
        return _CONTENT_ENCODING if memcmp(p, b"content-encoding", 16) == 0 else _OTHER
    if n == 17:
        return _TRANSFER_ENCODING if memcmp(p, b"transfer-encoding", 17) == 0 else _OTHER
    return _OTHER


cdef bint _host_valid(str value) except -1:
    """server/http.py's ``_host_ok``: its cache first, in C; the function on a miss."""
    global _hosts_ok, _host_ok
    if _hosts_ok is None:
        from fwrest.server import http

        _hosts_ok = http._HOSTS_OK
        _host_ok = http._host_ok
    if value in _hosts_ok:
        return True
    return bool(_host_ok(value))


cdef str _method_name(unsigned int method):
    cdef str name
    if method < 64:
        name = _METHODS[method]
        if name is not None:
            return name
    name = (<bytes>cparser.llhttp_method_name(<cparser.llhttp_method_t>method)).decode(
        "ascii", "replace"
    )
    if method < 64:
        _METHODS[method] = name
    return name


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
        Py_ssize_t _raw  # the protocol's count of the raw bytes of an incomplete head
        Py_ssize_t _dropped
        bint _in_body
        bint _protocol_seen
        bint _foreign  # the request line names RTSP/ or ICE/ (llhttp parses them), not HTTP/
        bint _begun  # a request began, not told yet: on_message_begin is owed
        bint _whole  # the request had no body: the protocol was told all of it at its head
        # what the head's checks gather from its fields
        Py_ssize_t _hosts
        object _host
        object _authorization
        object _length
        bint _te
        object _coding
        bint _expect
        object _content_coding
        int _fault
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
        self._settings.on_protocol = cb_on_protocol
        self._settings.on_url = cb_on_url
        self._settings.on_header_field = cb_on_header_field
        self._settings.on_header_value = cb_on_header_value
        self._settings.on_headers_complete = cb_on_headers_complete
        self._settings.on_body = cb_on_body
        self._settings.on_message_complete = cb_on_message_complete
        self._settings.on_chunk_header = cb_on_chunk_header
        self._settings.on_chunk_complete = cb_on_chunk_complete
        cparser.llhttp_init(self._c, cparser.HTTP_REQUEST, self._settings)
        # any HTTP/d.d version is parsed; the head's checks answer the ones not served (505)
        # and serve a later HTTP/1.x as 1.1 (RFC 9110 2.5)
        cparser.llhttp_set_lenient_version(self._c, 1)
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
        self._raw = 0
        self._dropped = 0
        self._in_body = False
        self._protocol_seen = self._foreign = False
        self._whole = False
        self._hosts = 0
        self._host = None
        self._authorization = None
        self._length = -1
        self._te = False
        self._coding = ""
        self._expect = False
        self._content_coding = ""
        self._fault = _NO_FAULT
        self._pieces = []
        self._size = 0
        self._chunks = 0

    # -- what the protocol reads ------------------------------------------------------------
    @property
    def parsed(self):
        """The parsed size of the head being read, so far."""
        return self._parsed

    @property
    def raw(self):
        """The raw bytes of the head being read, as the protocol counts them (``_feed``):
        the head is refused (431) when it completes at or past ``MaxHeaderSize`` of them."""
        return self._raw

    @raw.setter
    def raw(self, Py_ssize_t value):
        self._raw = value

    @property
    def headers(self):
        """The header fields of the head being read, so far (an engine's refusal looks for
        the client's request id among them)."""
        return self._headers

    @property
    def url(self):
        """The target of the head being read, so far (b"": none yet; an engine's refusal
        looks its location up by it, and knows the method once it has begun)."""
        if len(self._url_pieces) == 1:
            return self._url_pieces[0]
        return b"".join(self._url_pieces)

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
        return _keeps(self._c)

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
                # as httptools: the callback's exception is the context; and the cause, which
                # a raise never overwrites (a stale current exception of the thread would
                # replace the context: tests/tools/mypyc_lint.py, except-awaits)
                ex.__context__ = ex.__cause__ = self._last_error
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

    cdef int _on_protocol(self, const char* at, size_t length) except -1:
        # the name's first piece begins with its first letter: HTTP, RTSP or ICE
        if length and not self._protocol_seen:
            self._protocol_seen = True
            self._foreign = at[0] != c'H'
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
                self._proto._note_underscore(name)
            return 0
        # the name lower-cased in a buffer of its own, never in a bytes object: CPython
        # shares the bytes objects of one byte (PyBytes_FromStringAndSize(s, 1) returns a
        # cached one), so writing into one would change b"E" for the whole process
        cdef char small[64]
        cdef char* p = small
        cdef Py_ssize_t i
        cdef char c
        cdef int kind
        if nlen > 64:
            p = <char*>PyMem_Malloc(<size_t>nlen)
            if p is NULL:
                raise MemoryError()
        try:
            for i in range(nlen):
                c = raw[i]
                if 65 <= c <= 90:
                    c = c + 32
                p[i] = c
            lowered = PyUnicode_DecodeLatin1(p, nlen, NULL)
            kind = _kind(p, nlen)
        finally:
            if p is not small:
                PyMem_Free(p)
        # RFC 9110 5.5: the value excludes the whitespace after it (llhttp drops the
        # whitespace before it, not after: the parsed size above counts it)
        cdef const char* v = PyBytes_AS_STRING(value)
        while vlen > 0 and (v[vlen - 1] == 32 or v[vlen - 1] == 9):
            vlen -= 1
        text = PyUnicode_DecodeLatin1(v, vlen, NULL)
        self._headers.append((lowered, text))
        if kind != _OTHER:
            self._note(kind, text)
        return 0

    cdef int _note(self, int kind, str value) except -1:
        """What the head's checks need of a field (server/http.py's on_headers_complete
        loop, field by field): the first fault is kept and answered when the head is whole,
        so that a limit a later field reaches (431) is answered first, as there."""
        if kind == _HOST:
            self._hosts += 1
            self._host = value
        elif kind == _AUTHORIZATION:
            if self._authorization is not None:
                if self._fault == _NO_FAULT:
                    self._fault = _REPEATED_AUTHORIZATION
            else:
                self._authorization = value
        elif kind == _CONTENT_LENGTH:
            self._length = int(value)  # llhttp validated the digits
        elif kind == _TRANSFER_ENCODING:
            self._te = True
            self._coding = f"{self._coding},{value}" if self._coding else value
        elif kind == _EXPECT_FIELD:
            if self._c.http_major == 1 and self._c.http_minor == 0:
                # RFC 9110 10.1.1 and 15.2: an HTTP/1.0 request's Expect is ignored (no 100
                # to a 1.0 client, no 417)
                pass
            else:
                asks = expects_continue(value)  # a list: empty elements ask nothing
                if asks is None:
                    if self._fault == _NO_FAULT:
                        self._fault = _EXPECTATION
                elif asks:
                    self._expect = True
        elif kind == _CONTENT_ENCODING:
            self._content_coding = (
                f"{self._content_coding},{value}" if self._content_coding else value
            )
        return 0

    cdef int _on_headers_complete(self) except -1:
        """The head's checks (docs/engine.md, "The reading states"; server/http.py's
        on_headers_complete, the pure engine's, in the same order), then the protocol is
        told: the whole request, or its head."""
        self._field_done()
        self._parsed += 2  # the blank line
        cdef Py_ssize_t limit = self._max_header_size
        if self._parsed > limit or self._raw >= limit:
            # the second: the raw head was still incomplete at the limit (see _feed)
            raise HTTPError(431, close=True)
        if self._fault == _REPEATED_AUTHORIZATION:
            raise HTTPError(400, detailed="repeated Authorization header", close=True)
        if self._fault == _EXPECTATION:
            raise HTTPError(417, close=True)
        if self._foreign:
            raise protocol_refusal()
        cdef cparser.llhttp_t* c = self._c
        if c.http_major != 1:
            # HTTP/0.9, 2.0, 3.0...: a major version not served (RFC 9110 15.6.6); a later
            # HTTP/1.x is served as 1.1, the highest minor version it conforms to (RFC 9110 2.5)
            version = f"{c.http_major}.{c.http_minor}"
            raise HTTPError(
                505, detailed=f"HTTP/{version} is not supported: send HTTP/1.1", close=True
            )
        cdef bint http10 = c.http_minor == 0
        if self._te:
            if http10:
                raise HTTPError(
                    400, detailed="HTTP/1.0 requests cannot use Transfer-Encoding", close=True
                )
            refused = transfer_coding_refusal(self._coding)
            if refused is not None:
                raise refused
        if self._hosts > 1 or (self._hosts == 0 and not http10):
            raise HTTPError(400, detailed="the request needs exactly one Host header", close=True)
        if self._hosts and not _host_valid(self._host):
            raise HTTPError(
                400, detailed="the Host header must be host[:port] and nothing else", close=True
            )
        if len(self._url_pieces) == 1:
            url = self._url_pieces[0]
        else:
            url = b"".join(self._url_pieces)
        if not url.startswith(b"/") and url[:8].lower().startswith(_ABSOLUTE):
            self._absolute_form(url)
        cdef object length = self._length
        if self._content_coding and (length > 0 or self._te):
            # a compressed body would reach the handler still compressed: 415, unread
            refused = coded_body(self._content_coding)
            if refused is not None:
                raise refused
        cdef int flags = 0
        if self._begun:
            flags = _BEGIN
            self._begun = False
        if http10:
            flags |= _HTTP10
        if _keeps(c):
            flags |= _KEEP
        method = _method_name(c.method)
        if not c.upgrade and not (c.flags & (cparser.F_CHUNKED | cparser.F_TRANSFER_ENCODING)) and (
            not (c.flags & cparser.F_CONTENT_LENGTH) or c.content_length == 0
        ):
            # no body follows (llhttp completes the message next): the whole request in one
            # call, its begin, head and end
            self._whole = True
            self._proto._native_request(method, url, self._headers, self._authorization, flags)
            return 0
        if c.upgrade:
            flags |= _UPGRADE
        if self._te:
            flags |= _CHUNKED
        if self._expect:
            flags |= _EXPECT
        self._limit = self._proto._native_head(
            method, url, self._headers, self._authorization, length, flags
        )
        self._in_body = True
        return 0

    cdef int _absolute_form(self, bytes url) except -1:
        """An absolute-form target (``GET http://h/p``): server/http.py's
        ``absolute_form`` (the form is rare: no C of its own)."""
        global _absolute
        if _absolute is None:
            from fwrest.server import http

            _absolute = http.absolute_form
        _absolute(url, self._headers)
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


# -- llhttp's callbacks: an exception is kept and reported by feed_data, as httptools does --
cdef int cb_on_message_begin(cparser.llhttp_t* c) except -1:
    cdef RequestParser p = <RequestParser>c.data
    try:
        p._on_message_begin()
    except BaseException as ex:
        p._last_error = ex
        return -1
    return 0


cdef int cb_on_protocol(cparser.llhttp_t* c, const char* at, size_t length) except -1:
    cdef RequestParser p = <RequestParser>c.data
    p._on_protocol(at, length)  # raises nothing
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


# -- the reply encoder: wire.encode_reply's bytes, made in C ------------------------------------
cdef time_t _date_second = 0
cdef bytes _date_line = b""  # wire's date and nosniff lines, taken from wire once a second
cdef object _ID_END = 1 << 128
cdef const char* _HEX = b"0123456789abcdef"


cdef inline bint _latin1(object text):
    """Whether ``text`` is a str whose characters are its latin-1 bytes as they are stored."""
    return type(text) is str and PyUnicode_KIND(text) == PyUnicode_1BYTE_KIND


cdef inline char* _put(char* at, const void* data, Py_ssize_t size):
    memcpy(at, data, <size_t>size)
    return at + size


cdef inline char* _put_decimal(char* at, unsigned long long n):
    cdef char digits[24]
    cdef int i = 24
    while True:
        i -= 1
        digits[i] = <char>(48 + n % 10)
        n //= 10
        if n == 0:
            break
    return _put(at, &digits[i], 24 - i)


cdef inline int _decimal_size(unsigned long long n):
    cdef int size = 1
    while n >= 10:
        n //= 10
        size += 1
    return size


def encode_reply(reply, keep, bint chunked=True):
    """``wire.encode_reply`` in C, byte for byte: the status line, the date and ``nosniff``
    lines, the reply's header fields (``x-content-type-options`` and ``date`` dropped), the
    new request id, ``content-length``, ``connection``, the body. What the C path does not
    take (a stream's head, an answer to HEAD, a header that is no pair of latin-1 str, a body
    that is no bytes) is wire's."""
    global _date_second, _date_line
    if reply.stream is not None or reply.head_only:
        return _encode_reply_pure(reply, keep, chunked)
    body = reply.body
    status = reply.status
    headers = reply.headers
    rid = reply.request_id
    if type(body) is not bytes or type(status) is not int or type(headers) is not list:
        return _encode_reply_pure(reply, keep, chunked)
    cdef long k = keep
    if k < 0 or k > 2:
        return _encode_reply_pure(reply, keep, chunked)
    cdef unsigned long long id_lo = 0
    cdef unsigned long long id_hi = 0
    cdef bint has_id = False
    if rid:
        if type(rid) is not int or rid < 0 or rid >= _ID_END:
            return _encode_reply_pure(reply, keep, chunked)
        has_id = True
        id_lo = PyLong_AsUnsignedLongLongMask(rid)
        id_hi = PyLong_AsUnsignedLongLongMask(rid >> 64)
    status_line = _STATUS_LINES.get(status) or f"HTTP/1.1 {status} \r\n".encode()
    cdef time_t now = time(NULL)
    if now != _date_second:
        _date_line = _DateLine.get()
        _date_second = now
    date = _date_line
    # the size first: every field must be a pair of latin-1 str (else wire's encoder)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(status_line) + PyBytes_GET_SIZE(date) + 2
    cdef bint has_length = False
    cdef Py_ssize_t nlen
    cdef const char* name
    for pair in headers:
        if type(pair) is not tuple or len(<tuple>pair) != 2:
            return _encode_reply_pure(reply, keep, chunked)
        key = (<tuple>pair)[0]
        value = (<tuple>pair)[1]
        if not _latin1(key) or not _latin1(value):
            return _encode_reply_pure(reply, keep, chunked)
        nlen = PyUnicode_GET_LENGTH(key)
        name = <const char*>PyUnicode_DATA(key)
        if nlen == 22 and memcmp(name, b"x-content-type-options", 22) == 0:
            continue  # sent with the date line
        if nlen == 4 and memcmp(name, b"date", 4) == 0:
            continue  # the server's own
        if nlen == 14 and memcmp(name, b"content-length", 14) == 0:
            has_length = True
        size += nlen + PyUnicode_GET_LENGTH(value) + 4
    if has_id:
        size += 48  # "x-request-id: " 32 digits CRLF
    cdef bint no_content = status == 204 or status == 304 or status < 200
    cdef Py_ssize_t body_size = PyBytes_GET_SIZE(body)
    if not no_content:
        if not has_length:
            size += 18 + _decimal_size(<unsigned long long>body_size)
        size += body_size
    if k == 0:
        size += 19  # connection: close
    elif k == 2:
        size += 24  # connection: keep-alive
    # then the bytes (a new object of its size, never one CPython shares: size > 1)
    out = PyBytes_FromStringAndSize(NULL, size)
    cdef char* start = PyBytes_AS_STRING(out)
    cdef char* at = start
    cdef int i
    at = _put(at, PyBytes_AS_STRING(status_line), PyBytes_GET_SIZE(status_line))
    at = _put(at, PyBytes_AS_STRING(date), PyBytes_GET_SIZE(date))
    for pair in headers:
        key = (<tuple>pair)[0]
        value = (<tuple>pair)[1]
        nlen = PyUnicode_GET_LENGTH(key)
        name = <const char*>PyUnicode_DATA(key)
        if nlen == 22 and memcmp(name, b"x-content-type-options", 22) == 0:
            continue
        if nlen == 4 and memcmp(name, b"date", 4) == 0:
            continue
        at = _put(at, name, nlen)
        at = _put(at, b": ", 2)
        at = _put(at, PyUnicode_DATA(value), PyUnicode_GET_LENGTH(value))
        at = _put(at, b"\r\n", 2)
    if has_id:
        at = _put(at, b"x-request-id: ", 14)
        for i in range(15, -1, -1):
            at[0] = _HEX[(id_hi >> (4 * i)) & 15]
            at += 1
        for i in range(15, -1, -1):
            at[0] = _HEX[(id_lo >> (4 * i)) & 15]
            at += 1
        at = _put(at, b"\r\n", 2)
    if not no_content and not has_length:
        at = _put(at, b"content-length: ", 16)
        at = _put_decimal(at, <unsigned long long>body_size)
        at = _put(at, b"\r\n", 2)
    if k == 0:
        at = _put(at, b"connection: close\r\n", 19)
    elif k == 2:
        at = _put(at, b"connection: keep-alive\r\n", 24)
    at = _put(at, b"\r\n", 2)
    if not no_content:
        at = _put(at, PyBytes_AS_STRING(body), body_size)
    assert at - start == size
    return out
