"""How long a reload takes to serve new code (issue 21, SPEC 13.1): ``fwrest serve --workers
2`` answers ``{"version": N}`` from a module of its repository; the module is rewritten with
N+1, the supervisor gets ``SIGHUP``, and a client on one keep-alive connection and on fresh
ones asks until the new answer comes. Printed: the seconds from the signal to the first
answer of the new code, per reload, with their minimum, median and maximum, and the requests
that failed across all reloads (the SPEC's figure: none).

    python -m bench.reload_time --reloads 5
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from bench import servers

APP = """from fwrest import get


@get("/version")
def version():
    return {{"version": {n}}}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reloads", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fwrest-reload-bench-") as tmp:
        folder = Path(tmp)
        module = folder / "reload_app.py"
        module.write_text(APP.format(n=0))
        config = servers.fwrest_config(folder, repository="reload_app")
        running = servers.start_fwrest(config, workers=args.workers, cpus=None)
        took: list[float] = []
        failed = 0
        try:
            url = f"{running.base_url}/rest/version"
            with httpx.Client(timeout=10) as kept:
                for n in range(1, args.reloads + 1):
                    module.write_text(APP.format(n=n))
                    signalled = time.monotonic()
                    os.kill(running.proc.pid, signal.SIGHUP)
                    while True:
                        try:
                            fresh = httpx.get(url, timeout=10).json()["version"]
                            again = kept.get(url).json()["version"]
                        except (httpx.HTTPError, KeyError, ValueError):
                            failed += 1
                            continue
                        if n in (fresh, again):
                            took.append(time.monotonic() - signalled)
                            break
                        if time.monotonic() - signalled > 60:
                            raise SystemExit(f"reload {n}: no new answer within 60 s")
                    time.sleep(1.0)  # the old generation drains before the next reload
        finally:
            running.stop()
    shown = ", ".join(f"{t:.3f}" for t in took)
    print(
        f"SIGHUP to the first answer of new code, {args.workers} workers: {shown} s "
        f"(min {min(took):.3f}, median {statistics.median(took):.3f}, max {max(took):.3f}); "
        f"failed requests: {failed}"
    )


if __name__ == "__main__":
    main()
