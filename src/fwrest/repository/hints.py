"""What an endpoint function's type hints ask of a request (SPEC 14.1), read once at start.

:func:`read_hints` sorts the parameters a function declares by where their values come
from: a route's path parameter annotated with a scalar type is converted to it; another
parameter of a scalar type (``list[...]`` of one, ``X | None``) comes from the query
string; a parameter annotated with a ``msgspec.Struct``, a dataclass or a ``TypedDict`` is
the JSON body (``list[...]`` of one too). A return annotation naming such types asks for the result to be encoded by
msgspec. Parameters without hints, or with hints of another kind, keep SPEC 3's behaviour.

>>> def item(id: int, verbose: bool = False): ...
>>> [(p.name, p.source, p.required) for p in read_hints(item, {"id"}).params]
[('id', 'path', True), ('verbose', 'query', False)]

Owns: the reading of hints. Must not know: HTTP, converting a request (``server/typed.py``)
or the OpenAPI document (``native/schemas.py``).
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import inspect
import types
import typing
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

__all__ = ["NO_HINTS", "HintError", "Hints", "Param", "body_type", "read_hints", "scalar_of"]

# the scalar types a path or query value (text) converts to (SPEC 14.1); Enums and Literals of
# text or integers besides
SCALARS: frozenset[Any] = frozenset(
    (int, float, bool, str, decimal.Decimal, uuid.UUID, datetime.date, datetime.datetime)
)
_SCALARS_SAID = (
    "int, float, bool, str, decimal.Decimal, uuid.UUID, datetime.date, datetime.datetime, an "
    "Enum or a Literal"
)
# the containers of a query parameter given several times (?id=1&id=2)
_REPEATED = (list, tuple, set, frozenset)
_UNIONS = (typing.Union, types.UnionType)


class HintError(ValueError):
    """A hint fwrest cannot fill (the start refuses the route, naming it)."""


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter filled from the request.

    ``source`` is ``"path"``, ``"query"`` or ``"body"``; ``hint`` the annotation as written
    (resolved), ``scalar`` the type one text value converts to (path, query; a fixed tuple's
    first item); ``many`` a query parameter given several times, ``shape`` its container
    without ``| None`` (``list[int]``, ``tuple[int, int]``, ``set[str]``) and ``items`` a fixed
    tuple's type per position; ``required`` whether a request must give it, else ``default``
    is the function's default.
    """

    name: str
    source: str
    hint: Any
    scalar: Any = None
    many: bool = False
    required: bool = True
    default: Any = None
    shape: Any = None
    items: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class Hints:
    """The parameters a function's hints fill, and whether its result is encoded by msgspec.

    ``returns`` is the return annotation (``None``: none, or one that cannot be resolved).
    """

    params: tuple[Param, ...] = ()
    returns: Any = None
    encodes: bool = False

    @property
    def typed(self) -> bool:
        """Whether a call needs more than SPEC 3's (a ``str`` path parameter needs nothing)."""
        return self.encodes or any(p.source != "path" or p.scalar is not str for p in self.params)

    @property
    def body(self) -> Param | None:
        return next((p for p in self.params if p.source == "body"), None)


NO_HINTS = Hints()


def _unwrap(hint: Any) -> Any:
    """``Annotated[X, ...]`` -> ``X`` (msgspec's ``Meta`` constraints stay on the hint)."""
    while typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    return hint


def _optional(hint: Any) -> Any:
    """``X | None`` -> ``X``; any other hint -> None."""
    if typing.get_origin(hint) in _UNIONS:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(hint)) == 2:
            return args[0]
    return None


def scalar_of(hint: Any) -> Any:
    """The scalar type ``hint`` names (``Annotated`` kept, so constraints are checked), or None.

    >>> scalar_of(int), scalar_of(list[int])
    (<class 'int'>, None)
    """
    base = _unwrap(hint)
    if base in SCALARS or (isinstance(base, type) and issubclass(base, enum.Enum)):
        return hint
    if typing.get_origin(base) is typing.Literal and all(
        type(v) in (str, int) for v in typing.get_args(base)
    ):
        return hint
    return None


def body_type(hint: Any) -> bool:
    """Whether ``hint`` is a JSON body: a ``msgspec.Struct``, a dataclass or a ``TypedDict``."""
    base = _unwrap(hint)
    if not isinstance(base, type):
        return False
    return (
        issubclass(base, msgspec.Struct)
        or dataclasses.is_dataclass(base)
        or typing.is_typeddict(base)
    )


# the containers a result encoded as one JSON document may nest body types in (an iterator
# of them is a stream, SPEC 10.5: sent as it comes, never encoded whole)
_CONTAINERS = frozenset((list, tuple, set, frozenset, dict, *_UNIONS))


def _object(hint: Any) -> bool:
    """A body type, or a JSON object as a ``dict`` (``dict``, ``dict[str, int]``)."""
    base = _unwrap(hint)
    return body_type(base) or base is dict or typing.get_origin(base) is dict


def _is_body(hint: Any) -> bool:
    """A body type or a ``dict``, or a list of one (``list[Item]``: a JSON array of objects)."""
    base = _unwrap(hint)
    if typing.get_origin(base) is list:
        return _object(typing.get_args(base)[0])
    return _object(base)


def _repeated(hint: Any) -> tuple[tuple[Any, ...], bool] | None:
    """The scalar types of a repeated query parameter's items, and whether it is a fixed
    tuple: ``list[int]``, ``tuple[int, ...]``, ``set[int]``, ``frozenset[int]`` -> ``((int,),
    False)``; ``tuple[int, str]`` -> ``((int, str), True)``, one per position; any other hint
    (items that are not scalars) -> None."""
    base = _unwrap(hint)
    origin = typing.get_origin(base)
    if origin not in _REPEATED:
        return None
    args = typing.get_args(base)
    fixed = origin is tuple and not (len(args) == 2 and args[1] is Ellipsis)
    if origin is tuple and not fixed:
        args = args[:1]  # tuple[int, ...]
    elif origin is not tuple and len(args) != 1:
        return None
    items = tuple(scalar_of(a) for a in args)
    return (items, fixed) if items and None not in items else None


def _names_body_type(hint: Any) -> bool:
    """Whether a return annotation holds a body type as a JSON document does (``Item``,
    ``list[Item]``, ``Item | None``, ``dict[str, Item]``), not an iterator of them."""
    base = _unwrap(hint)
    if body_type(base):
        return True
    if typing.get_origin(base) not in _CONTAINERS:
        return False
    return any(_names_body_type(arg) for arg in typing.get_args(base))


def _resolved(func: Callable[..., Any]) -> dict[str, Any]:
    """The function's hints, each resolved (``from __future__ import annotations`` too); a
    return annotation that cannot be resolved is left out.

    Raises:
        HintError: a parameter's annotation cannot be resolved.
    """
    try:
        return typing.get_type_hints(func, include_extras=True)
    except Exception:  # noqa: S110 - resolved one by one below, to name the culprit
        pass
    raw: dict[str, Any] = dict(getattr(func, "__annotations__", {}) or {})
    namespace = dict(getattr(func, "__globals__", {}))
    hints: dict[str, Any] = {}
    for name, value in raw.items():
        try:
            hints[name] = typing.get_type_hints(
                types.SimpleNamespace(__annotations__={name: value}), namespace, include_extras=True
            )[name]
        except Exception as exc:
            if name == "return":
                continue
            raise HintError(
                f"the annotation of its parameter '{name}' ({value!r}) cannot be resolved "
                f"({type(exc).__name__}: {exc})"
            ) from None
    return hints


def read_hints(func: Callable[..., Any], route_names: set[str]) -> Hints:
    """The parameters of ``func`` that its hints fill from a request of a route whose path
    parameters are ``route_names``.

    Raises:
        HintError: a hint fwrest cannot fill: a path parameter annotated with a type that is
            not a scalar, another parameter's that is neither a query parameter's nor a
            body's (``Any``, ``bytes``, ``dict`` of a list...), with a default or not, two body
            parameters, an annotation that cannot be resolved.
    """
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return NO_HINTS
    if not getattr(func, "__annotations__", None):
        return NO_HINTS
    hints = _resolved(func)
    params: list[Param] = []
    for param in sig.parameters.values():
        if param.kind not in (inspect.Parameter.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            continue
        hint = hints.get(param.name)
        if hint is None:
            continue
        required = param.default is param.empty
        default = None if required else param.default
        if param.name in route_names:
            scalar = scalar_of(hint)
            if scalar is None:
                raise HintError(
                    f"its path parameter '{param.name}' is annotated {_shown(hint)}: a path "
                    f"parameter converts to {_SCALARS_SAID}"
                )
            params.append(Param(param.name, "path", hint, scalar))
        elif _is_body(hint) or _is_body(_optional(hint)):
            params.append(Param(param.name, "body", hint, required=required, default=default))
        elif (scalar := scalar_of(hint) or scalar_of(_optional(hint))) is not None:
            params.append(Param(param.name, "query", hint, scalar, False, required, default))
        elif (repeated := _repeated(shape := _optional(hint) or hint)) is not None:
            items, fixed = repeated
            params.append(
                Param(
                    param.name,
                    "query",
                    hint,
                    items[0],
                    True,
                    required,
                    default,
                    shape,
                    items if fixed else (),
                )
            )
        else:
            raise HintError(
                f"its parameter '{param.name}' is annotated {_shown(hint)}, which fwrest cannot "
                f"fill: a parameter that is not in the path is a query parameter ({_SCALARS_SAID}"
                "; a list, tuple or set of one for a repeated name; X | None) or the JSON body "
                "(a msgspec.Struct, a dataclass, a TypedDict or a dict; a list of one)"
            )
    bodies = [p.name for p in params if p.source == "body"]
    if len(bodies) > 1:
        raise HintError(
            f"its parameters {', '.join(repr(n) for n in bodies)} are each annotated as the "
            "JSON body; a request has one body"
        )
    returns = hints.get("return")
    return Hints(tuple(params), returns, returns is not None and _names_body_type(returns))


def _shown(hint: Any) -> str:
    """``int``, ``list[int]``, ``typing.Any``: a hint as its author wrote it."""
    return hint.__name__ if isinstance(hint, type) else repr(hint)
