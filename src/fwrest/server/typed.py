"""A typed endpoint's call (SPEC 14.1): its parameters converted and checked, its result
encoded, by converters and one msgspec decoder and encoder built at start.

:func:`typed_function` wraps a function whose hints ask for more than SPEC 3 gives
(:mod:`fwrest.repository.hints`) in one called as the function is (the ``Handler`` keeps the
function's kind: a ``def`` one's wrapper runs in the pool, an ``async def`` one's returns what
is awaited), so that :func:`fwrest.server.handler.bind` and the hooks call it as any other:
it takes the path
parameters as text, converts them, reads the query and the body from the request's context
when the function asks for them, and raises a 400 (``HTTPError``) whose ``detailedMessage``
names the parameter, or the body's field path, and what was expected. A ``def`` function's
body is decoded in its pool job, off the event loop. Untyped functions are never wrapped.

Owns: converting text and JSON to hinted values, encoding hinted results. Must not know:
routing, the pipeline's stages.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import math
import re
import typing
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

import msgspec

from fwrest.context.request import RequestContext, Response, current
from fwrest.errors import HTTPError
from fwrest.repository.hints import Hints, Param

__all__ = ["JSON_MEDIA", "typed_function"]

JSON_MEDIA = "application/json"
_SHOWN = 40  # characters of a refused value quoted back in the error body

_EXPECTED: dict[Any, str] = {
    int: "an integer",
    float: "a finite number",
    bool: "true or false (or 1 or 0)",
    str: "text",
    decimal.Decimal: "a decimal number",
    uuid.UUID: "a UUID",
    datetime.date: "a date (YYYY-MM-DD)",
    datetime.datetime: "a date and time (RFC 3339)",
}


def _expected(scalar: Any) -> str:
    """What a scalar hint expects, in words (``Annotated`` constraints: msgspec says them)."""
    base = scalar
    while typing.get_origin(base) is typing.Annotated:
        base = typing.get_args(base)[0]
    if isinstance(base, type) and issubclass(base, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in base)
    if typing.get_origin(base) is typing.Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(base))
    return _EXPECTED.get(base, getattr(base, "__name__", repr(base)))


_INTEGER = re.compile(r"-?[0-9]+")
_DECIMAL = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?")


def _text_converter(scalar: Any) -> Callable[[str], Any]:
    """The conversion of one text value to ``scalar``.

    An ``int`` is ASCII digits with an optional ``-`` (msgspec's lax conversion would take
    ``1e3`` and ``1.0``, Python's ``int()`` `` 12``, ``1_000`` and other scripts' digits); a
    ``float`` is finite (no ``nan``, ``inf``, nor ``1e999``, as in a JSON body); a ``Decimal``
    a number as JSON writes one (no ``NaN``, spaces or ``_``); a ``Literal`` one of its values
    as text; everything else is msgspec's lax conversion from text (``"true"``,
    ``"2024-05-01"``, an Enum's value). ``Annotated`` constraints are checked by msgspec after.

    Raises (the returned function):
        msgspec.ValidationError, ValueError: the text does not convert.
    """
    if scalar is str:
        return str
    convert = msgspec.convert
    base = scalar
    while typing.get_origin(base) is typing.Annotated:
        base = typing.get_args(base)[0]
    if base is int:
        match = _INTEGER.fullmatch

        def to_int(text: str) -> Any:
            if match(text) is None:
                raise ValueError("not an integer")
            return int(text)

        if scalar is int:
            return to_int
        return lambda text: convert(to_int(text), scalar)
    if base is float:
        # msgspec takes "nan", "inf" and "1e999" (infinity) from text; a JSON body has
        # no such numbers, nor does a typed parameter
        def to_float(text: str) -> Any:
            value = convert(text, float, strict=False)
            if not math.isfinite(value):
                raise ValueError("not a finite number")
            return value

        if scalar is float:
            return to_float
        return lambda text: convert(to_float(text), scalar)
    if base is decimal.Decimal:
        number = _DECIMAL.fullmatch

        def to_decimal(text: str) -> Any:
            if number(text) is None:
                raise ValueError("not a decimal number")
            try:
                return decimal.Decimal(text)
            except decimal.InvalidOperation:  # an exponent past the module's limit
                raise ValueError("not a decimal number") from None

        if scalar is decimal.Decimal:
            return to_decimal
        return lambda text: convert(to_decimal(text), scalar)
    if typing.get_origin(base) is typing.Literal:
        values = {str(v): v for v in typing.get_args(base)}

        def to_literal(text: str) -> Any:
            if text not in values:
                raise ValueError("not one of the values")
            return values[text]

        if scalar is base:
            return to_literal
        return lambda text: convert(to_literal(text), scalar)
    return lambda text: convert(text, scalar, strict=False)


# the container of a repeated query parameter's values, by the hint's origin
_BUILDS: dict[Any, Callable[[Any], Any]] = {
    list: list,
    tuple: tuple,
    set: set,
    frozenset: frozenset,
}
_INT_DIGITS = 4000  # Python's int() refuses text of more than 4300 digits (a ValueError)


class _Field:
    """A path or query parameter's conversion and the words of its refusals; ``check`` is
    the conversion of one value that raises the 400, ``values`` that of a repeated query
    parameter's values (``?id=1&id=2``) into its container."""

    __slots__ = ("check", "constrained", "expected", "name", "param", "values", "where")

    def __init__(self, param: Param) -> None:
        self.param = param
        self.name = param.name
        self.where = f"the {param.source} parameter '{param.name}'"
        self.expected = _expected(param.scalar)
        self.constrained = typing.get_origin(param.scalar) is typing.Annotated
        self.check = self._checked(_text_converter(param.scalar))
        self.values = self._repeated() if param.many else None

    def _repeated(self) -> Callable[[list[str]], Any]:
        """The conversion of a repeated parameter's values: each item's, then its container's
        (a fixed tuple's count, an ``Annotated`` container's constraints, by msgspec)."""
        check, shape, where = self.check, self.param.shape, self.where
        base = shape
        while typing.get_origin(base) is typing.Annotated:
            base = typing.get_args(base)[0]
        origin = typing.get_origin(base)
        if origin is list and shape is base:
            return lambda got: [check(v) for v in got]
        build: Callable[[Any], Any] = _BUILDS[origin]
        if self.param.items:  # tuple[int, str]: one conversion per position
            checks = tuple(
                _Field(dataclasses.replace(self.param, scalar=s, many=False)).check
                for s in self.param.items
            )
            count = len(checks)

            def built(got: list[str]) -> Any:
                if len(got) != count:
                    why = f"{where}: expected {count} values (the name repeated), got {len(got)}"
                    raise HTTPError(400, detailed=why)
                return tuple(c(v) for c, v in zip(checks, got, strict=True))

        else:

            def built(got: list[str]) -> Any:
                return build(check(v) for v in got)

        if shape is base:
            return built

        def constrained(got: list[str]) -> Any:
            try:
                return msgspec.convert(built(got), shape)
            except msgspec.ValidationError as exc:
                raise HTTPError(400, detailed=f"{where}: {exc}") from None

        return constrained

    def _checked(self, convert: Callable[[str], Any]) -> Callable[[str], Any]:
        refuse = self.refuse
        if self.param.scalar is int:

            def to_int(text: str) -> Any:
                # the common path parameter, an id: plain digits go straight to int()
                if text.isdigit() and text.isascii() and len(text) < _INT_DIGITS:
                    return int(text)
                try:
                    return convert(text)
                except ValueError as exc:
                    raise refuse(text, exc) from None

            return to_int

        def checked(text: str) -> Any:
            try:
                return convert(text)
            except ValueError as exc:  # msgspec.ValidationError too
                raise refuse(text, exc) from None

        return checked

    def refuse(self, text: str, exc: ValueError) -> HTTPError:
        got = repr(text[:_SHOWN]) + ("..." if len(text) > _SHOWN else "")
        if self.constrained and isinstance(exc, msgspec.ValidationError):
            # the value converted and broke a constraint: msgspec names it
            why = f"{self.where}: {exc} (got {got})"
        else:
            why = f"{self.where}: expected {self.expected}, got {got}"
        return HTTPError(400, detailed=why)

    def missing(self) -> HTTPError:
        what = self.expected
        if self.param.items:
            what = f"{len(self.param.items)} values: " + ", ".join(map(_expected, self.param.items))
        elif self.param.many:
            what = f"a list of {self.expected}"
        return HTTPError(400, detailed=f"{self.where} is required ({what})")


def _is_json(media: str) -> bool:
    kind = media.partition(";")[0].strip().lower()
    return kind == JSON_MEDIA or (kind.startswith("application/") and kind.endswith("+json"))


class _Body:
    """The JSON body's decoder (one per handler, built at start) and its refusals."""

    __slots__ = ("decode", "name", "param", "where")

    def __init__(self, param: Param) -> None:
        self.param = param
        self.name = param.name
        self.where = f"the body ('{param.name}')"
        self.decode = msgspec.json.Decoder(param.hint).decode

    def __call__(self, ctx: RequestContext) -> Any:
        media = next((v for n, v in ctx.raw_headers if n == "content-type"), "")
        if not _is_json(media):
            # a form or text/plain body is what a page of another site can send without a
            # CORS preflight: a typed body is JSON only (docs/decisions.md)
            shown = repr(media[:_SHOWN]) if media else "none"
            raise HTTPError(
                415,
                detailed=f"{self.where} must be JSON (Content-Type: application/json), not {shown}",
            )
        try:
            return self.decode(ctx.body)
        except msgspec.ValidationError as exc:
            raise HTTPError(400, detailed=f"{self.where}: {exc}") from None
        except msgspec.DecodeError as exc:
            raise HTTPError(400, detailed=f"{self.where} is not valid JSON: {exc}") from None
        except UnicodeDecodeError as exc:  # JSON is UTF-8 (RFC 8259)
            why = f"{self.where} is not valid JSON: not UTF-8 at byte {exc.start}"
            raise HTTPError(400, detailed=why) from None
        except RecursionError:
            raise HTTPError(
                400, detailed=f"{self.where}: the JSON nests too deeply to be decoded"
            ) from None

    def missing(self) -> HTTPError:
        return HTTPError(400, detailed=f"{self.where} is required: the request has no body")


def _encoder(returns: Any) -> Callable[[Any], Any]:
    """A result as JSON bytes, by msgspec's encoder (a ``Response`` or None go on as they are:
    a typed handler may still answer otherwise)."""
    encode = msgspec.json.Encoder().encode

    def encoded(result: Any) -> Any:
        if result is None or isinstance(result, Response):
            return result
        try:
            body = encode(result)
        except (TypeError, ValueError, OverflowError) as exc:
            raise TypeError(
                f"a handler's result could not be encoded as {returns!r}: {exc}"
            ) from exc
        return Response(body, current.get().resp_status, media_type=JSON_MEDIA)

    return encoded


def _query_values(query_string: str, wanted: frozenset[str]) -> dict[str, list[str]]:
    """The values of the query's parameters named in ``wanted``, in order."""
    found: dict[str, list[str]] = {}
    if query_string:
        for name, value in parse_qsl(query_string, keep_blank_values=True):
            if name in wanted:
                found.setdefault(name, []).append(value)
    return found


def typed_function(func: Callable[..., Any], hints: Hints, is_async: bool) -> Callable[..., Any]:
    """``func`` behind the conversions its hints ask for: called with its path parameters
    (text) by name, as SPEC 3 calls it, it calls ``func`` with them converted, its query
    parameters and its body.

    Raises (the returned function):
        HTTPError: 400 for a value that does not convert or validate, or a required one
            missing; 415 for a body that is not JSON by its ``Content-Type``.
    """
    path = tuple(
        (f.name, f.check)
        for f in (_Field(p) for p in hints.params if p.source == "path" and p.scalar is not str)
    )
    query = tuple(_Field(p) for p in hints.params if p.source == "query")
    wanted = frozenset(f.name for f in query)
    body_param = hints.body
    body = _Body(body_param) if body_param is not None else None
    encode = _encoder(hints.returns) if hints.encodes else None
    if not query and body is None and encode is None:
        # path parameters only (an id): the conversions and the call, nothing more; an
        # ``async def`` function's coroutine is returned as it is, to be awaited by the caller
        return _path_only(func, path)

    reads = bool(query) or body is not None  # else only the result is encoded

    def fill(kw: dict[str, Any]) -> dict[str, Any]:
        for name, check in path:
            kw[name] = check(kw[name])
        if not reads:
            return kw
        ctx = current.get()
        if query:
            values = _query_values(ctx.query_string, wanted)
            for field in query:
                got = values.get(field.name)
                if got is None:
                    if field.param.required:
                        raise field.missing()
                elif field.values is not None:
                    kw[field.name] = field.values(got)
                else:
                    kw[field.name] = field.check(got[-1])  # the last, as getQueryRequest()
        if body is not None:
            if ctx.body:
                kw[body.name] = body(ctx)
            elif body.param.required:
                raise body.missing()
        return kw

    if encode is None:

        def call(**kw: Any) -> Any:
            return func(**fill(kw))  # an async def's coroutine, awaited by the caller

        return call
    encoded = encode
    if is_async:

        async def call_async(**kw: Any) -> Any:
            return encoded(await func(**fill(kw)))

        return call_async

    def call_sync(**kw: Any) -> Any:
        return encoded(func(**fill(kw)))

    return call_sync


def _path_only(
    func: Callable[..., Any], path: tuple[tuple[str, Callable[[str], Any]], ...]
) -> Callable[..., Any]:
    """``func`` behind its path parameters' conversions alone."""
    if len(path) == 1:
        ((name, check),) = path

        def one(**kw: Any) -> Any:
            kw[name] = check(kw[name])
            return func(**kw)

        return one

    def each(**kw: Any) -> Any:
        for name, check in path:
            kw[name] = check(kw[name])
        return func(**kw)

    return each
