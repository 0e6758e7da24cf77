"""The simulator's /metrics: SGLang's gauges and counters, and specctl's plugin's.

The scheduler's gauges are read from the engine at scrape time; the
tokenizer's per-request series (tokens, requests, latency histograms with
SGLang 0.5.23's buckets, observability/metrics_collector.py) are counted as
HTTP requests end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram
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
            ("sglang:num_used_tokens", "The number of used tokens.", e.ctx_tokens),
            ("sglang:cache_hit_rate", "The prefix cache hit rate.", 0.0),
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


# SGLang 0.5.23's default buckets (TokenizerMetricsCollector)
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100,
               0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000)
TOKENIZER_LABELS = ("model_name", "engine_type")


class RequestMetrics:
    """SGLang's tokenizer-side series, counted per HTTP request of one simulated server."""

    def __init__(self, registry: CollectorRegistry, model: str) -> None:
        names = TOKENIZER_LABELS
        streamed = (*names, "is_streaming")
        self.labels = {"model_name": model, "engine_type": "unified"}
        self.prompt = Counter("sglang:prompt_tokens", "Number of prefill tokens processed.", streamed,
                              registry=registry)
        self.generation = Counter("sglang:generation_tokens", "Number of generation tokens processed.", streamed,
                                  registry=registry)
        self.requests = Counter("sglang:num_requests", "Number of requests processed.", streamed, registry=registry)
        self.aborted = Counter("sglang:num_aborted_requests", "Number of requests aborted.", names,
                               registry=registry)
        self.ttft = Histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              streamed, buckets=TTFT_BUCKETS, registry=registry)
        self.itl = Histogram("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             names, buckets=ITL_BUCKETS, registry=registry)
        self.e2e = Histogram("sglang:e2e_request_latency_seconds",
                             "Histogram of End-to-end request latency in seconds", streamed, buckets=E2E_BUCKETS,
                             registry=registry)

    def start(self, prompt_tokens: int, stream: bool, now: float) -> _Request:
        return _Request(self, prompt_tokens, "true" if stream else "false", now)


class _Request:
    """One request's timing, observed into the series as its tokens come and when it ends."""

    def __init__(self, owner: RequestMetrics, prompt: int, streaming: str, now: float) -> None:
        self.owner, self.prompt, self.streaming = owner, prompt, streaming
        self.started = self.last = now
        self.tokens = 0
        self.done = False

    def token(self, total: int, now: float) -> None:
        """``total`` tokens produced by ``now`` (simulated seconds)."""
        new = total - self.tokens
        if new <= 0:
            return
        o = self.owner
        if self.tokens == 0:
            o.ttft.labels(**o.labels, is_streaming=self.streaming).observe(now - self.started)
        else:
            itl = o.itl.labels(**o.labels)
            for _ in range(min(new, 64)):  # per token, as SGLang's observe of many at once; capped per piece
                itl.observe((now - self.last) / new)
        self.tokens, self.last = total, now

    def finish(self, total: int, now: float, aborted: bool = False) -> None:
        if self.done:
            return
        self.done = True
        o = self.owner
        labels = {**o.labels, "is_streaming": self.streaming}
        o.prompt.labels(**labels).inc(self.prompt)
        o.generation.labels(**labels).inc(total)
        o.requests.labels(**labels).inc()
        o.e2e.labels(**labels).observe(now - self.started)
        if aborted:
            o.aborted.labels(**o.labels).inc()
