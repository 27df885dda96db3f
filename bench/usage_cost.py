"""What collecting usage/time figures costs per request (issue 6, SPEC 5 usage/time).

Collection cannot be switched off (the figures are always there for the native route), so the
end-to-end cases cannot show its cost by difference; this times the one call the request path
makes, ``UsageTable.record``, and sets it against the time of a whole request measured by
case 1 of ``bench/run.py`` (pass its p50 or 1/req-per-second with ``--request-us``).

    python -m bench.usage_cost --request-us 80
"""

from __future__ import annotations

import argparse
import timeit

from fwrest.server.usage import UsageTable


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--request-us",
        type=float,
        default=80.0,
        help="microseconds of one whole request on one core (default 80)",
    )
    args = parser.parse_args()
    table = UsageTable()
    key = ("/rest", "GET", "/hello", "POOL")
    table.record(key, 1)
    loops = 1_000_000
    best = min(timeit.repeat(lambda: table.record(key, 57), number=loops, repeat=5))
    per_call_us = best / loops * 1e6
    share = 100 * per_call_us / args.request_us
    print(
        f"UsageTable.record: {per_call_us:.3f} us per request "
        f"= {share:.2f} % of a {args.request_us:.0f} us request"
    )


if __name__ == "__main__":
    main()
