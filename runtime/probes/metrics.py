"""Turn a model server's /metrics text (Prometheus exposition) into flat numbers.

SGLang 0.5.17 labels every scheduler series with ``model_name``, ``engine_type``,
``tp_rank``, ``pp_rank``, ``moe_ep_rank`` and, where present, ``dp_rank`` and
``priority`` (observability/metrics_collector.py). How series combine:

- Series that differ only in ``tp_rank``/``pp_rank``/``moe_ep_rank`` are
  replicas of one scheduler's view (``--enable-metrics-for-all-schedulers``
  makes every TP rank report the same batch): they are averaged, never added,
  or a TP-8 server would show 8x its requests.
- Distinct remaining label sets (``dp_rank``, ...) are separate schedulers:
  counts and rates (running, queued, gen_tps, decode tokens) are summed,
  ratios (accept_len, token_usage) averaged.
- With priority scheduling, SGLang writes the total under ``priority=""`` and
  a per-priority breakdown under ``priority="<n>"``; only the total counts.

Series are matched by sample name, not family name: prometheus_client strips
``_total`` from counter *family* names but keeps sample names whole, and it
leaves the colons in SGLang's names alone.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

# Labels whose values distinguish copies of the same scheduler's numbers.
_REPLICA_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank"})

Sample = tuple[Mapping[str, str], float]
Combine = Callable[[list[float]], float]


class MetricsError(ValueError):
    """The /metrics text could not be parsed as Prometheus exposition format."""


@dataclass(frozen=True)
class ServerMetrics:
    """The numbers specctl shows; ``None`` where the server did not report one."""

    running: float | None = None
    queued: float | None = None
    gen_tps: float | None = None
    accept_len: float | None = None
    token_usage: float | None = None
    decode_tokens_total: float | None = None
    spec_on: float | None = None
    spec_steps: float | None = None
    spec_switches: float | None = None


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


# field -> (sample name, required labels, how distinct schedulers combine)
_FIELDS: dict[str, tuple[str, Mapping[str, str], Combine]] = {
    "running": ("sglang:num_running_reqs", {}, sum),
    "queued": ("sglang:num_queue_reqs", {}, sum),
    "gen_tps": ("sglang:gen_throughput", {}, sum),
    "accept_len": ("sglang:spec_accept_length", {}, _mean),
    "token_usage": ("sglang:token_usage", {}, _mean),
    "decode_tokens_total": ("sglang:realtime_tokens_total", {"mode": "decode"}, sum),
    "spec_on": ("specctl:spec_on", {}, _mean),
    "spec_steps": ("specctl:spec_steps", {}, _mean),
    "spec_switches": ("specctl:spec_switches_total", {}, _mean),
}


def parse_metrics(text: str) -> ServerMetrics:
    """Parse /metrics text; raises MetricsError, never a parser exception."""
    by_name = _samples_by_name(text)
    values = {
        field: _combine(_select(by_name.get(name, []), labels), combine)
        for field, (name, labels, combine) in _FIELDS.items()
    }
    return ServerMetrics(**values)


def _samples_by_name(text: str) -> dict[str, list[Sample]]:
    """Every sample, grouped by its full name.

    The parser raises assorted exception types (ValueError, IndexError, ...)
    on bad input and only while it is being iterated, so the whole walk sits
    inside the try.
    """
    wanted = {name for name, _, _ in _FIELDS.values()}
    by_name: dict[str, list[Sample]] = defaultdict(list)
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in wanted:
                    by_name[sample.name].append((dict(sample.labels), float(sample.value)))
    except Exception as exc:  # untrusted input: any parser failure means "malformed"
        raise MetricsError(f"malformed /metrics text: {exc}") from exc
    return by_name


def _select(samples: Iterable[Sample], required: Mapping[str, str]) -> list[Sample]:
    """Keep the series that carry ``required`` labels and are totals, not breakdowns."""
    return [
        (labels, value)
        for labels, value in samples
        if all(labels.get(k) == v for k, v in required.items())
        and labels.get("priority", "") == ""
        and math.isfinite(value)
    ]


def _combine(samples: list[Sample], combine: Combine) -> float | None:
    """Average the replicas of each scheduler, then combine the schedulers."""
    if not samples:
        return None
    groups: dict[tuple[tuple[str, str], ...], list[float]] = defaultdict(list)
    for labels, value in samples:
        key = tuple(sorted((k, v) for k, v in labels.items() if k not in _REPLICA_LABELS))
        groups[key].append(value)
    return float(combine([_mean(values) for values in groups.values()]))
