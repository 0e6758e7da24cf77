"""The headless supervisor's opt-in Prometheus endpoint, read as Prometheus reads it."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from support.headless import Headless, wait_for


def scrape(url: str) -> dict[str, list]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_metrics_port_serves_gpus_settings_and_health_on_loopback(tmp_path: Path) -> None:
    sup = Headless(tmp_path, "--metrics-port", "0", "--sim-gpus", "2", "--set", "off_at=48")
    try:
        said = wait_for(lambda: re.search(r"Prometheus metrics at (http://127\.0\.0\.1:\d+/metrics)", sup.told()),
                        "the metrics address on stderr")
        url = said.group(1)
        wait_for(lambda: sup.records(kind="sample") and sup.records(kind="sample")[-1]["spec"], "a sample with spec")
        got = wait_for(lambda: (m := scrape(url)) and m.get("specctl_policy_setting") and m, "settings in a scrape")
    finally:
        sup.proc.terminate()
        sup.proc.wait(timeout=30)
    assert [s.value for s in got["specctl_supervisor_up"]] == [1.0]
    assert got["specctl_supervisor_up"][0].labels == {"sim": "1"}
    settings = {s.labels["setting"]: s.value for s in got["specctl_policy_setting"]}
    assert settings["off_at"] == 48.0 and settings["on_at"] == 24.0
    assert {s.labels["gpu"] for s in got["specctl_gpu_memory_used_bytes"]} == {"0", "1"}
    assert sum(s.value for s in got["specctl_server_state"]) == 1.0
    assert {s.labels["mode"]: s.value for s in got["specctl_policy_mode"]}["auto"] == 1.0


def test_grafana_dashboard_queries_series_that_exist(tmp_path: Path) -> None:
    """Every series the shipped dashboard queries is one the exporter or SGLang's /metrics (the simulator's, with
    the plugin's specctl:* gauges) serves."""
    import json

    from specctl.runtime.supervisor import exporter

    from support.sim_process import sim_process

    board = json.loads((Path(__file__).resolve().parent.parent / "docs/deploy/grafana-specctl.json").read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    names = {n for e in exprs for n in re.findall(r"([a-z_]+:[a-z_]+|specctl_[a-z_]+)\{", e)}
    with sim_process(tmp_path, "--load", "idle") as url:
        with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:
            sglang = {s.name for f in text_string_to_metric_families(resp.read().decode()) for s in f.samples}
    ours = {name for _, name, _, _ in exporter.GPU_SERIES} | {
        "specctl_supervisor_up", "specctl_server_state", "specctl_sample_age_seconds", "specctl_policy_setting"}
    assert names and names <= sglang | ours, names - sglang - ours
