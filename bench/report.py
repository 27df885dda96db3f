"""Writing the results: ``results.md`` (a table per case and the ratios the targets name),
``results.json`` (everything, each run included) and ``results.png`` (req/s per case and
server), and the ratios that carry a target into ``bench/README.md``."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

__all__ = [
    "case_markdown",
    "ceiling_check",
    "chart",
    "markdown",
    "median_row",
    "per_cpu_second",
    "ratio",
    "summary_markdown",
    "update_readme",
    "write",
]

README_START = "<!-- results:start -->"
README_END = "<!-- results:end -->"


def per_cpu_second(requests: float, cpu_s: float) -> float | None:
    """Requests per server CPU second (user + system time of the server's processes): the
    req/s of one busy core, the inverse of the cost per request; None without CPU time."""
    return requests / cpu_s if cpu_s > 0 else None


def _median(values: list[float | None]) -> float | None:
    """The median of the figures every run has, or None if one lacks it."""
    if not values or any(v is None for v in values):
        return None
    return statistics.median(v for v in values if v is not None)


def busiest_share(connections: list[int]) -> float | None:
    """The share of the connections that the busiest worker holds (1.0: all of them)."""
    return max(connections) / sum(connections) if sum(connections) else None


def median_row(runs: list[dict[str, Any]], cpu: list[float]) -> dict[str, Any]:
    """The medians of a row's runs: req/s, p50, p99, CPU% and requests per server CPU second;
    errors summed; where the runs counted each worker's connections, the busiest worker's
    share of them."""
    if not runs:
        return {"rps": None, "p50_ms": None, "p99_ms": None, "cpu_pct": None, "errors": 0}
    out = {
        "rps": statistics.median(r["rps"] for r in runs),
        "p50_ms": statistics.median(r["p50_ms"] for r in runs),
        "p99_ms": statistics.median(r["p99_ms"] for r in runs),
        "cpu_pct": statistics.median(cpu) if cpu else None,
        "per_cpu_s": _median([r.get("per_cpu_s") for r in runs]),
        "errors": sum(int(r.get("errors", 0)) for r in runs),
    }
    if all(r.get("connections") for r in runs):
        out["busiest_share"] = _median([busiest_share(r["connections"]) for r in runs])
    return out


def ratio(
    rows: list[dict[str, Any]],
    name: str,
    numerator: str,
    denominator: str,
    target: float | None,
    field: str = "rps",
) -> dict[str, Any]:
    """``numerator / denominator`` of two rows (by server label) of one case, with its target
    (a minimum) and whether it is met; None where a row is missing, failed or had errors."""
    by_label = {row["server"]: row for row in rows}
    num, den = by_label.get(numerator), by_label.get(denominator)
    value = None
    valid = all(
        r is not None and not r.get("error") and not r.get("errors") and r.get(field)
        for r in (num, den)
    )
    if valid:
        assert num is not None and den is not None
        value = num[field] / den[field]
        paired = [
            (a.get(field), b.get(field))
            for a, b in zip(num.get("runs") or [], den.get("runs") or [], strict=False)
        ]
        # With 3 or more runs each, taken in turns, run i of one row and run i of the other
        # are minutes apart at most: the median of their ratios leaves the host's drift out
        # (the ratio of the two medians would mix runs of different minutes).
        in_turns = len(paired) >= 3 and len(paired) == len(num.get("runs") or [])
        if in_turns and all(a and b for a, b in paired):
            value = statistics.median(a / b for a, b in paired)
    return _ratio_dict(name, numerator, denominator, value, target)


def _ratio_dict(
    name: str, numerator: str, denominator: str, value: float | None, target: float | None
) -> dict[str, Any]:
    return {
        "name": name,
        "numerator": numerator,
        "denominator": denominator,
        "value": value,
        "target": target,
        "met": None if value is None or target is None else value >= target,
    }


def at_once_ratio(
    name: str,
    numerator: str,
    denominator: str,
    target: float | None,
    rounds: list[dict[str, Any]],
    error: str = "",
) -> dict[str, Any]:
    """A ratio of two servers measured at once (``bench.run.measure_at_once``): requests per
    server CPU second of ``numerator`` over those of ``denominator`` (the inverse of their
    cost per request), the median over the rounds; None when a round is missing a figure."""
    values = []
    for figures in rounds:
        num, den = figures.get(numerator), figures.get(denominator)
        if not num or not den:
            continue
        a = per_cpu_second(num["requests"], num["cpu_s"])
        b = per_cpu_second(den["requests"], den["cpu_s"])
        if a is not None and b:
            values.append(a / b)
    value = statistics.median(values) if values and len(values) == len(rounds) else None
    out = _ratio_dict(name, numerator, denominator, value, target)
    out |= {"method": "at once", "rounds": rounds}
    if error:
        out["error"] = error
    return out


def ceiling_check(row: dict[str, Any], name: str, field: str, limit: float) -> dict[str, Any]:
    """A figure of one row that must stay at or under ``limit`` MiB (the memory case)."""
    value = None if row.get("error") else row.get(field)
    return {
        "name": name,
        "numerator": row["server"],
        "denominator": "",
        "value": value,
        "unit": "MiB",
        "limit": limit,
        "target": None,
        "met": None if value is None else value <= limit,
    }


# -- markdown ---------------------------------------------------------------------------------
def _num(value: float | None, digits: int = 0, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if digits == 0:
        return f"{value:,.0f}{unit}"
    return f"{value:,.{digits}f}{unit}"


def _cell(text: str) -> str:
    """Text fit for one markdown table cell."""
    return " ".join(text.replace("|", "/").split())


def _throughput_table(case: dict[str, Any]) -> list[str]:
    lines = [
        "| server | req/s | p50 ms | p99 ms | server CPU % | requests per server CPU s | notes |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in case["rows"]:
        notes = []
        if row.get("detail"):
            notes.append(row["detail"])
        if row.get("error"):
            notes.append(f"FAILED: {row['error']}")
        elif row.get("errors"):
            notes.append(f"{row['errors']} errors/non-2xx (figures not comparable)")
        lines.append(
            f"| {row['server']} | {_num(row.get('rps'))} | {_num(row.get('p50_ms'), 2)} "
            f"| {_num(row.get('p99_ms'), 2)} | {_num(row.get('cpu_pct'))} "
            f"| {_num(row.get('per_cpu_s'))} | {_cell('; '.join(notes))} |"
        )
    return lines


def _shares(values: list[float]) -> str:
    """``52/48 %``: each value's share of their sum."""
    total = sum(values)
    if not total:
        return "-"
    return "/".join(f"{100 * v / total:.0f}" for v in values) + " %"


def _workers_table(case: dict[str, Any]) -> list[str]:
    """Per worker, for the rows whose runs counted each worker's connections (case 8): the
    connections each worker held in the middle of each run, busiest first, the busiest
    worker's share of them (the median over the runs) and each worker's share of the
    workers' CPU time over each run."""
    rows = [r for r in case["rows"] if not r.get("error") and r.get("busiest_share") is not None]
    if not rows:
        return []
    lines = [
        "",
        "| server | workers | connections per worker, each run | busiest worker's share "
        "| CPU per worker, each run |",
        "|---|---:|---|---:|---|",
    ]
    for row in rows:
        runs = row.get("runs") or []
        held = ", ".join("/".join(str(n) for n in r["connections"]) for r in runs)
        cpu = ", ".join(_shares(r.get("worker_cpu_s") or []) for r in runs)
        lines.append(
            f"| {row['server']} | {len(runs[0]['connections'])} | {held} "
            f"| {_num(100 * row['busiest_share'], 0, ' %')} | {cpu} |"
        )
    return lines


def _memory_table(case: dict[str, Any]) -> list[str]:
    lines = [
        "| server | RSS idle MiB | after 1st batch MiB | after 2nd MiB | after 3rd MiB "
        "| requests (1st + 2nd and 3rd) | growth idle to 1st MiB "
        "| growth 1st to 2nd (64 new connections) MiB | growth 2nd to 3rd MiB | notes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in case["rows"]:
        notes = [row["detail"]] if row.get("detail") else []
        if row.get("error"):
            notes.append(f"FAILED: {row['error']}")
        elif row.get("errors"):
            notes.append(f"{row['errors']} errors/non-2xx")
        sent = row.get("requests") or []
        lines.append(
            f"| {row['server']} | {_num(row.get('rss_idle_mib'), 1)} "
            f"| {_num(row.get('rss_after_1_mib'), 1)} | {_num(row.get('rss_after_2_mib'), 1)} "
            f"| {_num(row.get('rss_after_3_mib'), 1)} "
            f"| {' + '.join(_num(n) for n in sent) or '-'} "
            f"| {_num(row.get('growth_from_idle_mib'), 1)} "
            f"| {_num(row.get('growth_new_connections_mib'), 2)} "
            f"| {_num(row.get('growth_mib'), 2)} "
            f"| {_cell('; '.join(notes))} |"
        )
    return lines


def _ratio_cells(r: dict[str, Any]) -> str:
    """``name | value | target | met`` of one ratio (or memory check)."""
    unit = r.get("unit", "x")
    sep = " " if unit != "x" else ""
    value = "-" if r["value"] is None else f"{r['value']:.2f}{sep}{unit}"
    if r.get("limit") is not None:
        target = f"<= {r['limit']:g}{sep}{unit}"
    else:
        target = "-" if r["target"] is None else f">= {r['target']:g}x"
    met = {True: "yes", False: "**no**", None: "-"}[r["met"]]
    return f"{r['name']} | {value} | {target} | {met}"


def _ratio_lines(ratios: list[dict[str, Any]]) -> list[str]:
    if not ratios:
        return []
    lines = ["", "| ratio | value | target | met |", "|---|---:|---:|---|"]
    lines += [f"| {_ratio_cells(r)} |" for r in ratios]
    return lines


def case_markdown(case: dict[str, Any]) -> str:
    """One case: a heading, what it measures, its table and its ratios."""
    lines = [f"### Case {case['id']}: {case['title']}", ""]
    if case.get("measures"):
        lines += [case["measures"], ""]
    if case.get("kind") == "memory":
        lines += _memory_table(case)
    else:
        lines += _throughput_table(case) + _workers_table(case)
    lines += _ratio_lines(case.get("ratios", []))
    return "\n".join(lines) + "\n"


def _taken(meta: dict[str, Any]) -> list[str]:
    versions = ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
    machine = meta["machine"]
    return [
        f"Taken {meta['date']} on {machine['cpu_model']}, {machine['cores']} cores, "
        f"{machine['memory_gib']:.0f} GiB, {machine['platform']}.",
        "",
        f"Versions: {versions}.",
    ]


def _caveats(meta: dict[str, Any]) -> list[str]:
    lines = []
    if meta.get("quick"):
        lines += ["", "**Quick run** (`--quick`): 1 short run per server, not a measurement."]
    if meta.get("note"):
        lines += ["", meta["note"]]
    return lines


def meta_markdown(meta: dict[str, Any]) -> str:
    s = meta["settings"]
    lines = [
        *_taken(meta),
        "",
        f"Method: server pinned to core {s['server_cpus']} and wrk to core {s['wrk_cpus']} "
        f"(`taskset -c`), loopback, keep-alive, {s['connections']} connections, "
        f"{s['threads']} wrk thread(s); {s['warmup_s']:g} s warm-up, then {s['runs']} run(s) "
        f"of {s['duration_s']:g} s per server, taken in turns across the servers of a case "
        "(A B C, C B A, ...: a drift of the host falls on all of them; a ratio is the median "
        "of the run-by-run ratios); the median of the runs is shown (req/s, p50, "
        "p99 from `wrk --latency`; server CPU % from psutil over each run, summed over the "
        "server's processes, 100 % = one core; requests per server CPU second: the run's requests "
        "over those CPU seconds, the req/s of one busy core). fwrest runs with `rest_log_level=1` (errors "
        "only; no access log) and the peers with `--no-access-log`, except where a case says.",
        "",
        f"Load average when the run started / ended: {meta['load_start']} / "
        f"{meta.get('load_end', '-')}.",
        *_caveats(meta),
    ]
    return "\n".join(lines) + "\n"


def markdown(results: dict[str, Any]) -> str:
    """The whole ``results.md``."""
    parts = ["# fwrest benchmark results", "", meta_markdown(results["meta"])]
    for case in results["cases"]:
        parts.append(case_markdown(case))
    return "\n".join(parts)


# -- chart ------------------------------------------------------------------------------------
_COLOURS = {"fwrest": "#1f77b4", "ceiling": "#7f7f7f", "peer": "#ff7f0e"}


def chart(results: dict[str, Any], path: Path) -> None:
    """req/s per case and server (and RSS for the memory case) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = results["cases"]
    if not cases:
        return
    cols = 2 if len(cases) > 1 else 1
    rows = math.ceil(len(cases) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(7 * cols, 2.6 * rows + 0.6), squeeze=False)
    for ax, case in zip(axes.flat, cases, strict=False):
        labels = [r["server"] for r in case["rows"]]
        if case.get("kind") == "memory":
            values = [
                r.get("rss_after_3_mib") or r.get("rss_after_2_mib") or 0 for r in case["rows"]
            ]
            xlabel = "RSS MiB after the 3rd batch (idle as a line)"
        else:
            values = [r.get("rps") or 0 for r in case["rows"]]
            xlabel = "requests/s (median)"
        colours = [_COLOURS.get(r.get("role", "peer"), "#ff7f0e") for r in case["rows"]]
        y = range(len(labels))
        ax.barh(list(y), values, color=colours)
        if case.get("kind") == "memory":
            for i, r in enumerate(case["rows"]):
                if r.get("rss_idle_mib"):
                    ax.plot([r["rss_idle_mib"]] * 2, [i - 0.4, i + 0.4], color="black")
        ax.set_yticks(list(y), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_title(f"{case['id']}: {case['title']}", fontsize=9)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.tick_params(axis="x", labelsize=8)
        top = max(values) if values and max(values) > 0 else 1
        for i, (v, r) in enumerate(zip(values, case["rows"], strict=True)):
            if r.get("error"):
                ax.text(top * 0.01, i, "failed", va="center", fontsize=7, color="red")
            elif v:
                ax.text(v + top * 0.01, i, f"{v:,.0f}", va="center", fontsize=7)
        ax.set_xlim(0, top * 1.18)
    for ax in list(axes.flat)[len(cases) :]:
        ax.axis("off")
    meta = results["meta"]
    fig.suptitle(
        f"fwrest bench {meta['date'][:10]}: server on 1 core, wrk on the other "
        "(blue fwrest, grey ceiling, orange peers)",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(path, dpi=90)
    plt.close(fig)


# -- files ------------------------------------------------------------------------------------
def write(results: dict[str, Any], out: Path, *, with_chart: bool = True) -> dict[str, Path]:
    """Write results.md, results.json and (with matplotlib) results.png into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"md": out / "results.md", "json": out / "results.json", "png": out / "results.png"}
    paths["md"].write_text(markdown(results))
    paths["json"].write_text(json.dumps(results, indent=2, sort_keys=False) + "\n")
    if with_chart:
        chart(results, paths["png"])
    else:
        del paths["png"]
    return paths


def summary_markdown(results: dict[str, Any]) -> str:
    """The README's part: when, where and with what, and every ratio that carries a target
    (the tables of every server are in ``results.md``)."""
    lines = [*_taken(results["meta"]), *_caveats(results["meta"])]
    lines += ["", "| case | ratio | value | target | met |", "|---|---|---:|---:|---|"]
    for case in results["cases"]:
        for r in case.get("ratios", []):
            if r["target"] is not None or r.get("limit") is not None:
                lines.append(f"| {case['id']} | {_ratio_cells(r)} |")
    lines += [
        "",
        "Every server's req/s, latency and CPU, and every ratio: [results.md](results.md).",
    ]
    return "\n".join(lines) + "\n"


def update_readme(readme: Path, results: dict[str, Any]) -> bool:
    """Replace the text between the results markers of ``readme`` with the latest summary."""
    if not readme.is_file():
        return False
    text = readme.read_text()
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        return False
    body = summary_markdown(results)
    new = text[: start + len(README_START)] + "\n\n" + body.strip() + "\n\n" + text[end:]
    readme.write_text(new)
    return True
