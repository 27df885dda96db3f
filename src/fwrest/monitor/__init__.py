"""The memory monitor (SPEC 5): metrics read from the operating system when asked, and the
app of the monitor's own port. Knows no authorization and no repository: the server hands
it a guard.
"""

from fwrest.monitor.app import MonitorApp
from fwrest.monitor.metrics import METRICS, Collector

__all__ = ["METRICS", "Collector", "MonitorApp"]
