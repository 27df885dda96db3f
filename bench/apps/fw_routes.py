"""Case 6: the source of an fwrest module with N routes of two path parameters each."""

from __future__ import annotations


def routes_source(count: int) -> str:
    """A module with ``count`` async endpoints ``/api{i}/users/:uid/orders/:oid``."""
    lines = ["from fwrest import get", ""]
    for i in range(count):
        lines += [
            "",
            f'@get("/api{i}/users/:uid/orders/:oid")',
            f"async def order_{i}(uid, oid):",
            f'    return {{"route": {i}, "uid": uid, "oid": oid}}',
            "",
        ]
    return "\n".join(lines)


def route_path(count: int) -> str:
    """The path the case requests: the last registered route (worst case for a linear scan)."""
    return f"/rest/api{count - 1}/users/42/orders/7"
