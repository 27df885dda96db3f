"""The monitor's metrics in Prometheus' text format, written by ``prometheus_client`` (imported
only when a client asks for that format)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

__all__ = ["exposition"]

_SUFFIXES = {"kb": "_kilobytes", "s": "_seconds", "%": "_percent"}


class _Export(Collector):
    def __init__(self, entries: list[dict[str, Any]]) -> None:
        self.entries = entries

    def collect(self) -> Iterator[Metric]:
        for entry in self.entries:
            if "error" in entry:
                continue
            name = f"fwrest_{entry['name']}"
            if isinstance(entry["value"], str):
                yield InfoMetricFamily(name, entry["description"], value={"value": entry["value"]})
                continue
            suffix = _SUFFIXES.get(entry["unit"], "")
            yield GaugeMetricFamily(name + suffix, entry["description"], value=entry["value"])


def exposition(entries: list[dict[str, Any]]) -> bytes:
    """The entries (without their errors) as Prometheus' text exposition."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Export(entries))
    return generate_latest(registry)
