"""The monitor's routes: ``{ApiPath}/server/metrics`` in the original product's shape."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

import orjson

from fwrest.monitor.metrics import Collector

__all__ = ["MonitorApp"]

Answer = tuple[int, list[tuple[str, str]], bytes]
# Copied into every answer: the port appends to an answer's headers (HEAD's content-length),
# and a shared list would carry that into every later answer.
_JSON = (("content-type", "application/json"),)
PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"
ALLOW = "GET, HEAD, OPTIONS"  # the methods of every path of the monitor (OPTIONS * too)
FORMATS = ("json", "prometheus")  # of ``?format=``, in any case; another is 400


class MonitorApp:
    """Answers the monitor port's requests (the server parses HTTP and runs the guard)."""

    def __init__(self, api_path: str, collector: Collector) -> None:
        self.api = "" if api_path == "/" else api_path
        self.collector = collector
        self.base = f"{self.api}/server/metrics"

    def index(self) -> dict[str, Any]:
        base = self.base
        return {
            "option1": f"{base}/{{metric}}",
            "option2": f"{base}?{{metric}}",
            "option3": f"{base}?{{metric1}}&{{metric2}}",
            "option4": f"{base}?{{metric1}}&{{metric2}}...&{{metricN}}",
            "metrics": ["all", {"names": self.collector.all_names()}],
        }

    def respond(self, method: str, path: str, query: str, accept: str) -> Answer:
        if method not in ("GET", "HEAD"):
            if path == self.base or path.startswith(self.base + "/"):
                if method == "OPTIONS":  # RFC 9110 9.3.7
                    return 200, [("allow", ALLOW)], b""
                return _error(405, "Method Not Allowed", [("allow", ALLOW)])
            return _error(404, "Not Found")
        names: list[str] = []
        prometheus = "text/plain" in accept and "application/json" not in accept
        formats: list[str] = []
        for key, value in parse_qsl(query, keep_blank_values=True):
            if key == "format":
                formats.append(value)
                continue
            names.append(key)
        if path == self.base:
            pass
        elif path.startswith(self.base + "/") and path.count("/") == self.base.count("/") + 1:
            names.append(path[len(self.base) + 1 :])
        else:
            return _error(404, "Not Found")
        if formats:
            # as the audit trail's query (native/audit.py): a value it does not take is 400
            # naming those it takes, not another answer than the one asked for
            if len(formats) > 1:
                return _error(400, "Bad Request", detailed="format is given twice")
            if formats[0].lower() not in FORMATS:
                return _error(
                    400,
                    "Bad Request",
                    detailed=f"format must be {' or '.join(FORMATS)}, got {formats[0][:40]!r}",
                )
            prometheus = formats[0].lower() == "prometheus"
        if not names:
            if prometheus:
                names = ["all"]
            else:
                return 200, [*_JSON], orjson.dumps(self.index())
        # The cap bounds what a client asks for; "all" is the server's own list (one entry
        # per worker as well), never cut. "all" stands in place for every metric; the other
        # names keep their places, an unknown one gets its error entry there too.
        asked = list(dict.fromkeys(names))[:64]
        every = self.collector.all_names() if "all" in asked else []
        seen: list[str] = []
        for name in asked:
            for one in every if name == "all" else [name]:
                if one not in seen:
                    seen.append(one)
        entries = self.collector.collect(seen)
        if prometheus:
            # imported when first asked: every start of fwrest would pay for it otherwise
            from fwrest.monitor.exposition import exposition

            return 200, [("content-type", PROMETHEUS)], exposition(entries) + _unknown(entries)
        return 200, [*_JSON], orjson.dumps([{"version": 0, "metrics": entries}])


def _unknown(entries: list[dict[str, Any]]) -> bytes:
    """The unknown names as comment lines, which Prometheus ignores (JSON has the error entry)."""
    lines = [
        "# unknown metric: "
        + entry["name"].replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
        + "\n"
        for entry in entries
        if "error" in entry
    ]
    return "".join(lines).encode("utf-8", "backslashreplace")


def _error(
    status: int, message: str, extra: list[tuple[str, str]] | None = None, detailed: str = ""
) -> Answer:
    body = orjson.dumps({"code": status, "detailedMessage": detailed, "message": message})
    return status, [*_JSON, *(extra or [])], body
