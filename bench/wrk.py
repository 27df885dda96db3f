"""Running Debian's ``wrk`` and reading its ``--latency`` report."""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["WrkError", "WrkResult", "parse", "parse_duration", "run", "run_at_once", "wrk_command"]

_UNITS_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^\s*([0-9.]+)\s*(us|ms|s|m|h)\s*$")


class WrkError(RuntimeError):
    """wrk failed, or printed something this parser does not understand."""


@dataclass
class WrkResult:
    """One wrk run. Latencies in milliseconds."""

    requests: int
    duration_s: float
    rps: float
    p50_ms: float
    p75_ms: float
    p90_ms: float
    p99_ms: float
    non_2xx: int = 0
    socket_errors: dict[str, int] = field(default_factory=dict)

    @property
    def errors(self) -> int:
        """Non-2xx/3xx answers plus socket errors (connect, read, write, timeout)."""
        return self.non_2xx + sum(self.socket_errors.values())

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["errors"] = self.errors
        return out


def parse_duration(text: str) -> float:
    """wrk's time figures (``812.00us``, ``1.20ms``, ``2.00s``, ``1.00m``) in seconds."""
    m = _DURATION.match(text)
    if not m:
        raise WrkError(f"not a wrk duration: {text!r}")
    return float(m.group(1)) * _UNITS_S[m.group(2)]


def parse(output: str) -> WrkResult:
    """Read the report of ``wrk --latency``.

    Raises:
        WrkError: the report lacks the totals or the latency distribution.
    """
    percentiles: dict[int, float] = {}
    for m in re.finditer(r"^\s+(50|75|90|99)%\s+(\S+)\s*$", output, re.MULTILINE):
        percentiles[int(m.group(1))] = parse_duration(m.group(2)) * 1000
    totals = re.search(r"^\s*(\d+) requests in ([0-9.]+\w+),", output, re.MULTILINE)
    rate = re.search(r"^Requests/sec:\s+([0-9.]+)", output, re.MULTILINE)
    if totals is None or rate is None:
        raise WrkError(f"no totals in the wrk output:\n{output}")
    if set(percentiles) != {50, 75, 90, 99}:
        raise WrkError(f"no latency distribution in the wrk output (--latency):\n{output}")
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    sockets: dict[str, int] = {}
    errs = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    if errs:
        sockets = dict(
            zip(("connect", "read", "write", "timeout"), map(int, errs.groups()), strict=True)
        )
    return WrkResult(
        requests=int(totals.group(1)),
        duration_s=parse_duration(totals.group(2)),
        rps=float(rate.group(1)),
        p50_ms=percentiles[50],
        p75_ms=percentiles[75],
        p90_ms=percentiles[90],
        p99_ms=percentiles[99],
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        socket_errors=sockets,
    )


def wrk_command(
    url: str,
    *,
    duration_s: float,
    connections: int,
    threads: int,
    headers: tuple[str, ...] = (),
    script: Path | None = None,
    cpus: str | None = "1",
    timeout_s: int = 5,
) -> list[str]:
    """The argv of one wrk run (pinned with ``taskset -c`` when ``cpus`` is given); the
    duration is rounded to whole seconds (at least 1), the only unit wrk accepts."""
    cmd = [
        "wrk",
        "--latency",
        "-t",
        str(threads),
        "-c",
        str(connections),
        "-d",
        f"{max(1, round(duration_s))}s",  # wrk takes whole seconds only
        "--timeout",
        f"{timeout_s}s",
    ]
    for header in headers:
        cmd += ["-H", header]
    if script is not None:
        cmd += ["-s", str(script)]
    cmd.append(url)
    if cpus is not None:
        cmd = ["taskset", "-c", cpus, *cmd]
    return cmd


def run(cmd: list[str], duration_s: float, *, require_answers: bool = True) -> WrkResult:
    """Run wrk once and parse its report (bounded: killed 30 s after its own duration).

    Raises:
        WrkError: wrk failed, or (with ``require_answers``) no request was answered.
    """
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=duration_s + 30, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise WrkError(f"wrk did not finish: {' '.join(cmd)}") from exc
    if done.returncode != 0:
        raise WrkError(f"wrk exited {done.returncode}: {done.stderr.strip() or done.stdout}")
    result = parse(done.stdout)
    if require_answers and result.requests == 0:
        raise WrkError(f"no request was answered: {' '.join(cmd)}")
    return result


def run_at_once(cmds: list[list[str]], duration_s: float) -> list[WrkResult]:
    """Start several wrk runs together and wait for all (bounded as :func:`run`); every run
    must get answers.

    Raises:
        WrkError: a run failed, got no answer or did not finish.
    """
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for cmd in cmds
    ]
    outputs: list[tuple[int, str, str]] = []
    deadline = time.monotonic() + duration_s + 30
    try:
        for cmd, proc in zip(cmds, procs, strict=True):
            try:
                out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired as exc:
                raise WrkError(f"wrk did not finish: {' '.join(cmd)}") from exc
            outputs.append((proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    results = []
    for cmd, (code, out, err) in zip(cmds, outputs, strict=True):
        if code != 0:
            raise WrkError(f"wrk exited {code}: {err.strip() or out}")
        result = parse(out)
        if result.requests == 0:
            raise WrkError(f"no request was answered: {' '.join(cmd)}")
        results.append(result)
    return results
