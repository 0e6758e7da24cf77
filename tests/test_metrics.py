"""parse_metrics against /metrics text shaped like SGLang 0.5.17's.

Names and labels come from sglang/srt/observability/metrics_collector.py in
the 0.5.17 wheel: every scheduler series carries model_name, engine_type,
tp_rank, pp_rank, moe_ep_rank (+ dp_rank with DP, + priority with priority
scheduling); realtime_tokens_total adds ``mode``.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specctl.runtime.probes.metrics import MetricsError, ServerMetrics, parse_metrics

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _labels(tp: int = 0, dp: int | None = None, **extra: str) -> str:
    labels = {"engine_type": "unified", "model_name": MODEL, "moe_ep_rank": "0", "pp_rank": "0", "tp_rank": str(tp)}
    if dp is not None:
        labels["dp_rank"] = str(dp)
    labels.update(extra)
    return ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))


def _gauge(name: str, rows: list[tuple[str, float]]) -> str:
    lines = [f"# HELP {name} Multiprocess metric", f"# TYPE {name} gauge"]
    lines += [f"{name}{{{labels}}} {value}" for labels, value in rows]
    return "\n".join(lines) + "\n"


def _sglang_text(ranks: list[tuple[int, int | None]], running: float = 12.0) -> str:
    """A /metrics page as one SGLang scheduler per (tp, dp) rank writes it."""
    decode = [(_labels(tp, dp, mode="decode"), 5000.0) for tp, dp in ranks]
    prefill = [(_labels(tp, dp, mode="prefill_compute"), 777.0) for tp, dp in ranks]
    return "".join(
        [
            _gauge("sglang:num_running_reqs", [(_labels(tp, dp), running) for tp, dp in ranks]),
            _gauge("sglang:num_queue_reqs", [(_labels(tp, dp), 3.0) for tp, dp in ranks]),
            _gauge("sglang:gen_throughput", [(_labels(tp, dp), 1834.2) for tp, dp in ranks]),
            _gauge("sglang:token_usage", [(_labels(tp, dp), 0.1 + 0.1 * (dp or 0)) for tp, dp in ranks]),
            _gauge("sglang:spec_accept_length", [(_labels(tp, dp), 2.5 + (dp or 0)) for tp, dp in ranks]),
            _gauge("sglang:spec_accept_rate", [(_labels(tp, dp), 0.6) for tp, dp in ranks]),
            "# HELP sglang:realtime_tokens_total Total number of tokens processed.\n"
            "# TYPE sglang:realtime_tokens_total counter\n",
            "".join(f"sglang:realtime_tokens_total{{{labels}}} {v}\n" for labels, v in decode + prefill),
            "# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.\n"
            "# TYPE sglang:time_to_first_token_seconds histogram\n"
            f'sglang:time_to_first_token_seconds_bucket{{le="0.1",model_name="{MODEL}"}} 0.0\n'
            f'sglang:time_to_first_token_seconds_bucket{{le="+Inf",model_name="{MODEL}"}} 4.0\n'
            f'sglang:time_to_first_token_seconds_count{{model_name="{MODEL}"}} 4.0\n'
            f'sglang:time_to_first_token_seconds_sum{{model_name="{MODEL}"}} 1.2\n',
        ]
    )


SPECCTL_TEXT = (
    "# TYPE specctl:spec_on gauge\nspecctl:spec_on 1.0\n"
    "# TYPE specctl:spec_steps gauge\nspecctl:spec_steps 3.0\n"
    "# TYPE specctl:spec_switches_total counter\nspecctl:spec_switches_total 4.0\n"
)


def test_single_scheduler_page_gives_every_field() -> None:
    metrics = parse_metrics(_sglang_text([(0, None)]) + SPECCTL_TEXT)
    assert metrics == ServerMetrics(
        running=12.0,
        queued=3.0,
        gen_tps=1834.2,
        accept_len=2.5,
        token_usage=0.1,
        decode_tokens_total=5000.0,
        spec_on=1.0,
        spec_steps=3.0,
        spec_switches=4.0,
    )


def test_counter_total_suffix_survives_the_parser() -> None:
    """prometheus_client renames the counter family; the sample keeps ``_total``."""
    assert parse_metrics(SPECCTL_TEXT).spec_switches == 4.0
    assert parse_metrics(_sglang_text([(0, None)])).decode_tokens_total == 5000.0


def test_tp_replicas_are_not_added() -> None:
    """--enable-metrics-for-all-schedulers: 4 TP ranks report one batch of 12."""
    metrics = parse_metrics(_sglang_text([(tp, None) for tp in range(4)]))
    assert metrics.running == 12.0
    assert metrics.decode_tokens_total == 5000.0
    assert metrics.accept_len == 2.5


def test_dp_ranks_sum_counts_and_average_ratios() -> None:
    metrics = parse_metrics(_sglang_text([(0, 0), (0, 1)]))
    assert metrics.running == 24.0
    assert metrics.queued == 6.0
    assert metrics.gen_tps == pytest.approx(3668.4)
    assert metrics.decode_tokens_total == 10000.0
    assert metrics.accept_len == pytest.approx(3.0)
    assert metrics.token_usage == pytest.approx(0.15)


def test_priority_breakdown_is_not_counted_twice() -> None:
    """SGLang writes the total under priority="" and the breakdown under priority="<n>"."""
    text = _gauge(
        "sglang:num_running_reqs",
        [(_labels(priority=""), 10.0), (_labels(priority="0"), 7.0), (_labels(priority="1"), 3.0)],
    )
    assert parse_metrics(text).running == 10.0


def test_absent_and_non_finite_values_are_none() -> None:
    text = _gauge("sglang:spec_accept_length", [(_labels(), float("nan"))])
    assert parse_metrics(text) == ServerMetrics()
    assert parse_metrics("") == ServerMetrics()


@pytest.mark.parametrize(
    "text",
    [
        "sglang:num_running_reqs{tp_rank=\"0\" 3\n",
        "sglang:num_running_reqs not-a-number\n",
        "<html>502 Bad Gateway</html>\n",
    ],
)
def test_malformed_text_raises_metrics_error(text: str) -> None:
    with pytest.raises(MetricsError, match="malformed /metrics text"):
        parse_metrics(text)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_arbitrary_text_raises_only_metrics_error(text: str) -> None:
    try:
        result = parse_metrics(text)
    except MetricsError:
        return
    assert isinstance(result, ServerMetrics)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["sglang:num_running_reqs", "specctl:spec_on", "{", "}", '"', "=", ",", " ", "\n", "#", "1.5", "NaN", "x"]
        )
    ).map("".join)
)
def test_near_miss_text_raises_only_metrics_error(text: str) -> None:
    """Text built from exposition-format pieces reaches deeper into the parser than random text."""
    try:
        result = parse_metrics(text)
    except MetricsError:
        return
    assert isinstance(result, ServerMetrics)
