"""An opt-in Prometheus endpoint of the headless supervisor (``specctl run --headless --metrics-port N``).

SGLang's own ``/metrics`` already carries the plugin's ``specctl:*`` gauges; this endpoint adds what
only the host's supervisor knows: its GPU samples (NVML, or the simulator's, labelled ``sim``), the
policy settings it holds, and its own health (up, the server's state, restarts, the age of the
last sample). One scrape config over every host's supervisor then covers a fleet.

Served by aiohttp in the supervisor's own event loop (no thread), on loopback unless told
otherwise; every scrape reads the latest sample through a custom collector, so the numbers are
the journal's, never re-measured.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CollectorRegistry, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

STATES = ("starting", "ready", "unreachable", "restarting", "stopped")
GPU_SERIES = (  # sample field, series name, help, scale
    ("util", "specctl_gpu_utilization_ratio", "GPU utilization, 0..1", 0.01),
    ("mem_used", "specctl_gpu_memory_used_bytes", "GPU memory used", 1.0),
    ("mem_total", "specctl_gpu_memory_total_bytes", "GPU memory in all", 1.0),
    ("power_w", "specctl_gpu_power_watts", "GPU power draw", 1.0),
    ("temp_c", "specctl_gpu_temperature_celsius", "GPU temperature", 1.0),
    ("sm_clock_mhz", "specctl_gpu_sm_clock_hertz", "GPU SM clock", 1e6),
)


class SupervisorCollector(Collector):
    """Every scrape: the supervisor's latest sample and status as gauges (a value it does not have is left out)."""

    def __init__(self, supervisor: Any) -> None:
        self.sup = supervisor

    def collect(self) -> Iterator[Metric]:
        sup = self.sup
        sample = sup.latest_sample or {}
        sim = "1" if sample.get("sim") else "0"
        up = GaugeMetricFamily("specctl_supervisor_up", "1 while the supervisor runs", labels=["sim"])
        up.add_metric([sim], 1.0)
        yield up
        state = GaugeMetricFamily("specctl_server_state", "1 for the model server's state now", labels=["state"])
        for name in STATES:
            state.add_metric([name], 1.0 if sup.state == name else 0.0)
        yield state
        yield GaugeMetricFamily("specctl_server_restarts", "server restarts by this supervisor", value=sup.restarts)
        if isinstance(sample.get("t"), (int, float)):
            yield GaugeMetricFamily("specctl_sample_age_seconds", "seconds since the last sample",
                                    value=max(0.0, time.time() - float(sample["t"])))
        yield from _gpus(sample.get("gpus") or [], sim)
        yield from _spec(sample.get("spec"))


def _gpus(gpus: list[dict[str, Any]], sim: str) -> Iterator[Metric]:
    for field, name, text, scale in GPU_SERIES:
        family = GaugeMetricFamily(name, text, labels=["gpu", "name", "sim"])
        for gpu in gpus:
            value = gpu.get(field)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                family.add_metric([str(gpu.get("index")), str(gpu.get("name") or ""), sim], float(value) * scale)
        yield family
    ok = GaugeMetricFamily("specctl_gpu_ok", "1 for a GPU that answers, 0 for a lost one", labels=["gpu"])
    for gpu in gpus:
        ok.add_metric([str(gpu.get("index"))], 1.0 if gpu.get("state") in (None, "ok") else 0.0)
    yield ok


def _spec(spec: dict[str, Any] | None) -> Iterator[Metric]:
    if not isinstance(spec, dict):
        return
    mode = GaugeMetricFamily("specctl_policy_mode", "1 for the policy's mode now", labels=["mode"])
    for name in ("auto", "on", "off"):
        mode.add_metric([name], 1.0 if spec.get("mode") == name else 0.0)
    yield mode
    for key, name, text in (("on", "specctl_policy_spec_on", "1 while speculation is on"),
                            ("depth", "specctl_policy_depth", "draft steps now, 0 off"),
                            ("switches", "specctl_policy_switches", "switches since the server started")):
        value = spec.get(key)
        if isinstance(value, (int, float)):
            yield GaugeMetricFamily(name, text, value=float(value))
    setting = GaugeMetricFamily("specctl_policy_setting", "a policy setting's value", labels=["setting"])
    for key, value in (spec.get("settings") or {}).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            setting.add_metric([key], float(value))
    yield setting


class Exporter:
    """``GET /metrics`` on ``host:port`` (port 0: a free one, read back from ``port`` after start)."""

    def __init__(self, supervisor: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SupervisorCollector(supervisor))
        self.host, self.port = host, port
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, shutdown_timeout=0.2)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def _metrics(self, _: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
