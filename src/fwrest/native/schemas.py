"""The schemas of the OpenAPI document (SPEC 14.2), from the handlers' type hints.

:func:`add_schemas` completes the operations :func:`fwrest.native.listing.build_openapi` made
for typed handlers (:class:`fwrest.repository.hints.Hints`): a schema and ``required`` for
each parameter, the request body's schema, the answer's schema from the return annotation,
the 400 (and 415) answers with fwrest's error body. msgspec writes the JSON Schemas (2020-12,
as OpenAPI 3.1 takes them), all in one call, so that a type named by several routes is one
entry of ``components/schemas``.

Owns: turning hints into schemas. Must not know: the request path.
"""

from __future__ import annotations

import datetime
import typing
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

from fwrest.context.request import Response
from fwrest.repository.hints import Hints, Param

__all__ = ["ERROR_SCHEMA", "Typed", "add_schemas"]

_REF = "#/components/schemas/{name}"
ERROR_SCHEMA = "FwrestError"
_ERROR_REF = {"$ref": _REF.format(name=ERROR_SCHEMA)}
_ERROR = {
    "title": ERROR_SCHEMA,
    "description": "fwrest's error body (SPEC 3)",
    "type": "object",
    "properties": {
        "code": {"type": "integer"},
        "detailedMessage": {"type": "string"},
        "message": {"type": "string"},
    },
    "required": ["code", "detailedMessage", "message"],
}
_UNIONS = (typing.Union, type(int | None))
_ANYTHING = (Any, object)  # hints that say nothing of the answer
# answers sent as they are, not as JSON (SPEC 3): their media type and schema
_RAW: dict[Any, tuple[str, dict[str, Any]]] = {
    str: ("text/plain", {"type": "string"}),
    bytes: ("application/octet-stream", {}),
}


@dataclass(frozen=True, slots=True)
class Typed:
    """An operation of a typed handler: the operation object to complete, its handler's
    hints, and the names its path template gives the route's own path parameters."""

    operation: dict[str, Any]
    hints: Hints
    names: dict[str, str]


def _answer_type(returns: Any) -> Any:
    """The type of a JSON answer from a return annotation: ``Response`` and ``None`` are not
    (a handler answering otherwise); None when nothing is left."""
    if returns is None or returns is type(None) or returns is Response or returns in _ANYTHING:
        return None
    if typing.get_origin(returns) in _UNIONS:
        kept = [a for a in typing.get_args(returns) if a is not Response and a is not type(None)]
        if not kept:
            return None
        # a Union built at run time: the X | Y operator takes two types, not a tuple
        return kept[0] if len(kept) == 1 else typing.Union[tuple(kept)]  # noqa: UP007
    return returns


def _is_raw(answer: Any) -> bool:
    return answer is str or answer is bytes


# msgspec writes a datetime as a string without a format (it takes one without an offset, which
# RFC 3339's date-time has): a path or query parameter says date-time, as date and uuid say theirs
_DATE_TIME = Annotated[datetime.datetime, msgspec.Meta(extra_json_schema={"format": "date-time"})]
_REPEATED = (list, tuple, set, frozenset)


def _dated(hint: Any) -> Any:
    """``hint`` with each ``datetime.datetime`` saying ``format: date-time``."""
    if hint is datetime.datetime:
        return _DATE_TIME
    origin = typing.get_origin(hint)
    if origin is Annotated:
        base, *metas = typing.get_args(hint)
        return Annotated[(_dated(base), *metas)]
    if origin in _REPEATED:
        return origin[tuple(a if a is Ellipsis else _dated(a) for a in typing.get_args(hint))]
    return hint


def _value_hint(param: Param) -> Any:
    """The type of a parameter's value as a client writes it (a query list's items aside)."""
    if param.source == "body":
        return param.hint
    if param.many:
        return _dated(param.shape)  # without ``| None``: an absent parameter is its default
    return _dated(param.scalar)


def _schemas(hints: list[Any]) -> tuple[list[dict[str, Any] | None], dict[str, Any]]:
    """The schema of each hint (None where msgspec has none: ``bytes``, an iterator...) and
    the components they refer to."""
    try:
        found, components = msgspec.json.schema_components(hints, ref_template=_REF)
        return list(found), components
    except (TypeError, ValueError):
        pass
    usable = []
    for hint in hints:
        try:
            msgspec.json.schema(hint)
        except (TypeError, ValueError):
            continue
        usable.append(hint)
    found, components = msgspec.json.schema_components(usable, ref_template=_REF)
    by_hint = dict(zip(map(id, usable), found, strict=True))
    return [by_hint.get(id(h)) for h in hints], components


def _default(default: Any) -> dict[str, Any]:
    """A query parameter's default, as the schema's ``default`` (when JSON can say it)."""
    try:
        value = msgspec.to_builtins(default)
    except (TypeError, ValueError):
        return {}
    return {} if value is None else {"default": value}


def add_schemas(doc: dict[str, Any], typed: list[Typed]) -> None:
    """Complete ``typed``'s operations of ``doc`` with their schemas and answers."""
    if not typed:
        return
    wanted: list[Any] = []
    for op in typed:
        wanted += [_value_hint(p) for p in op.hints.params]
        answer = _answer_type(op.hints.returns)
        if answer is not None and not _is_raw(answer):
            wanted.append(answer)
    found, components = _schemas(wanted)
    schemas = iter(found)
    for op in typed:
        operation = op.operation
        params: list[dict[str, Any]] = [dict(p) for p in operation.get("parameters", ())]
        by_name = {p["name"]: p for p in params}
        for param in op.hints.params:
            schema = next(schemas)
            if param.source == "path":
                entry = by_name.get(op.names.get(param.name, param.name))
                if entry is not None and schema is not None:
                    entry["schema"] = schema
            elif param.source == "query":
                entry = {"name": param.name, "in": "query", "required": param.required}
                entry["schema"] = dict(schema or {})
                if not param.required:
                    entry["schema"].update(_default(param.default))
                params.append(entry)
            elif schema is not None:
                operation["requestBody"] = {
                    "required": param.required,
                    "content": {"application/json": {"schema": schema}},
                }
        if params:
            operation["parameters"] = params
        responses = operation["responses"]
        answer = _answer_type(op.hints.returns)
        if _is_raw(answer):
            media, raw = _RAW[answer]
            responses["200"] = {"description": "OK", "content": {media: {"schema": raw}}}
        elif answer is not None:
            schema = next(schemas)
            if schema is not None:
                responses["200"] = {
                    "description": "OK",
                    "content": {"application/json": {"schema": schema}},
                }
        if op.hints.params:
            responses["400"] = {
                "description": "a parameter or the body does not convert or validate, or a "
                "required one is missing (detailedMessage names it and what was expected)",
                "content": {"application/json": {"schema": _ERROR_REF}},
            }
        if op.hints.body is not None:
            responses["415"] = {
                "description": "the body is not JSON by its Content-Type",
                "content": {"application/json": {"schema": _ERROR_REF}},
            }
    components[ERROR_SCHEMA] = _ERROR
    section = doc.setdefault("components", {}).setdefault("schemas", {})
    section.update(dict(sorted(components.items())))
