"""specctl's gauges on SGLang's /metrics.

SGLang runs prometheus_client in multiprocess mode when --enable-metrics is
on: it points ``PROMETHEUS_MULTIPROC_DIR`` at a temporary folder before it
starts the scheduler processes, each process writes its samples to files
there, and the HTTP process serves them all through a MultiProcessCollector.
A gauge created in a scheduler process with ``multiprocess_mode="mostrecent"``
(the mode SGLang's own gauges use) therefore appears on /metrics; every TP
rank writes the same values, and "mostrecent" merges them into one series.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from specctl.runtime.sglang_plugin.compat import PROMETHEUS_DIR_ENV
from specctl.runtime.sglang_plugin.params import Observer


def metrics_observer() -> Observer | None:
    """An observer that updates the gauges, or None when SGLang's metrics are off."""
    if not os.environ.get(PROMETHEUS_DIR_ENV):
        return None
    from prometheus_client import Gauge  # after SGLang set the multiprocess folder

    def gauge(name: str, doc: str) -> Gauge:
        # registry=None: in multiprocess mode a value reaches /metrics through its file alone,
        # and staying out of the process's default registry keeps a second observer harmless.
        return Gauge(name, doc, multiprocess_mode="mostrecent", registry=None)

    spec_on = gauge("specctl:spec_on", "1 while specctl lets the server draft, 0 while speculation is off.")
    spec_steps = gauge("specctl:spec_steps", "Draft steps specctl chose for the current batches (0 = off).")
    switches = gauge("specctl:spec_switches_total", "On/off switches since the server started.")

    def observe(state: Mapping[str, Any]) -> None:
        spec_on.set(1 if state["on"] else 0)
        spec_steps.set(state["steps"])
        switches.set(state["switches"])

    return observe
