"""The simulator's /metrics: SGLang's gauge and counter families, and specctl's plugin's, read at scrape time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from specctl.runtime.sim.nospec import ACCEPT_GAUGE

if TYPE_CHECKING:
    from specctl.runtime.sim.server import SimServer


class Collector:
    """Builds the /metrics families from the engine at scrape time."""

    LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")

    def __init__(self, server: SimServer) -> None:
        self.server = server

    def collect(self) -> Any:
        s = self.server
        e, state = s.engine, s.policy.state()
        values = (s.cfg.preset.model_path, "unified", "0", "0", "0")
        for name, doc, value in (
            ("sglang:num_running_reqs", "The number of running requests.", len(e.running)),
            ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", len(e.queue)),
            ("sglang:gen_throughput", "The generation throughput (token/s).", e.gen_throughput()),
            ("sglang:spec_accept_length", "The average speculative accept length.",
             e.accept_len() if s.cfg.speculation else ACCEPT_GAUGE),
            ("sglang:token_usage", "The token usage.", e.token_usage()),
        ):
            g = GaugeMetricFamily(name, doc, labels=self.LABELS)
            g.add_metric(values, float(value))
            yield g
        c = CounterMetricFamily("sglang:realtime_tokens", "Tokens processed, by mode.",
                                labels=self.LABELS + ("mode",))
        c.add_metric(values + ("decode",), float(e.decode_tokens_total))
        c.add_metric(values + ("prefill",), float(e.prefill_tokens_total))
        yield c
        if not s.cfg.plugin:
            return
        yield GaugeMetricFamily("specctl:spec_on", "1 while speculation is on.", value=float(state["on"]))
        yield GaugeMetricFamily("specctl:spec_steps", "Draft steps run now (0 = off).", value=float(state["steps"]))
        yield CounterMetricFamily("specctl:spec_switches", "Speculation on/off switches.",
                                  value=float(state["switches"]))
