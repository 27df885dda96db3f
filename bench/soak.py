"""The long soak of issue 9 (``make soak``): the mixed traffic of ``tests/faults/test_soak.py``
against ``fwrest serve --workers 2`` for 30 minutes, by the same code with a longer duration.

    python -m bench.soak                  # 30 minutes after the warm-up
    python -m bench.soak --minutes 5      # a shorter run

Passes (exit 0) with no unexpected answer, no error line in the service's log, and resident
memory growth of the whole service (supervisor and workers) under 0.5 MiB per minute per
worker from the end of the warm-up to the end of the run. Requests per second and the RSS
series (one sample a minute) are printed. The load generator shares the machine's cores with
the service.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from pathlib import Path

from tests.faults.test_soak import MIB, run_soak

LIMIT_MIB_PER_MIN_PER_WORKER = 0.5


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the run (30)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (2)")
    parser.add_argument(
        "--warmup", type=float, default=60.0, help="seconds of warm-up, at least (60)"
    )
    parser.add_argument(
        "--limit",
        type=float,
        default=LIMIT_MIB_PER_MIN_PER_WORKER,
        help="allowed RSS growth in MiB per minute per worker (0.5)",
    )
    args = parser.parse_args(argv)
    print(
        f"soak: {args.minutes:g} min with --workers {args.workers} on {platform.node()} "
        f"({os.cpu_count()} cores, Python {platform.python_version()})",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="fwrest-soak-") as tmp:
        result = run_soak(
            Path(tmp),
            args.minutes * 60,
            warmup=args.warmup,
            warmup_max=max(args.warmup, 180.0),
            workers=args.workers,
            sample_every=60.0,
            progress=True,
            report=lambda line: print(line, flush=True),
        )
    print(result.summary())
    for line in result.error_lines[:10]:
        print("  log:", line)
    rate = result.growth / MIB / (result.seconds / 60) / args.workers
    unexpected = sum(result.unexpected.values())
    ok = unexpected == 0 and not result.error_lines and rate < args.limit
    print(
        f"soak: growth {rate:+.3f} MiB per minute per worker (limit {args.limit}); "
        f"{unexpected} unexpected answers; {len(result.error_lines)} error lines: "
        f"{'PASS' if ok else 'FAIL'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
