"""Typed endpoints (docs/endpoints.md): a JSON body decoded and checked into a struct, a path
parameter converted to an int, a query parameter, a struct returned as JSON. fwrest answers
400 naming the field for a body that does not fit, and documents all of it in
/rest/fw/rest/openapi.json."""

from __future__ import annotations

from typing import Annotated

import msgspec

from fwrest import get, post

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=80)]


class Line(msgspec.Struct, forbid_unknown_fields=True):
    sku: Name
    qty: Annotated[int, msgspec.Meta(ge=1, le=1000)]
    unit_cents: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)]


class QuoteRequest(msgspec.Struct, forbid_unknown_fields=True):
    customer: Name
    lines: Annotated[list[Line], msgspec.Meta(max_length=100)]
    discount_percent: Annotated[int, msgspec.Meta(ge=0, le=100)] = 0


class Quote(msgspec.Struct):
    customer: str
    items: int
    subtotal_cents: int
    total_cents: int


def _priced(order: QuoteRequest) -> Quote:
    subtotal = sum(line.qty * line.unit_cents for line in order.lines)
    total = subtotal * (100 - order.discount_percent) // 100
    items = sum(line.qty for line in order.lines)
    return Quote(order.customer, items, subtotal, total)


@post("/quotes", description="Price an order: a typed JSON body in, a typed answer out")
def quote(order: QuoteRequest) -> Quote:
    return _priced(order)


@get("/quotes/demo/:lines", description="A sample quote (a typed path and query parameter)")
def demo_quote(lines: Annotated[int, msgspec.Meta(ge=1, le=10)], customer: Name = "demo") -> Quote:
    order = QuoteRequest(customer, [Line(f"sku-{n}", n, 250) for n in range(1, lines + 1)])
    return _priced(order)
