"""`specctl run --headless --attach URL`: watch and steer a server started elsewhere, never own it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from specctl.runtime.probes.server_info import prefill_graphs

from support.headless import Headless, pid_alive, wait_for


def start_sim(tmp: Path, port: int = 0, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    port_file = tmp / f"port-{port}"
    proc = subprocess.Popen([sys.executable, "-m", "specctl.runtime.sim", "--port", str(port),
                             "--port-file", str(port_file), "--load", "steady:c=100", "--gpus", "1", *extra],
                            stdout=subprocess.DEVNULL, start_new_session=True)
    wait_for(port_file.exists, "the simulator's port file")
    return proc, f"http://127.0.0.1:{port_file.read_text().strip()}"


@pytest.fixture
def sims(tmp_path: Path):
    """``sims(*extra_args)`` starts a simulator; every one started is stopped at the end."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*extra: str) -> tuple[subprocess.Popen[bytes], str]:
        proc, url = start_sim(tmp_path, 0, *extra)
        procs.append(proc)
        return proc, url

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)


@pytest.fixture
def sim(sims):
    return sims()


def test_attached_server_is_steered_and_outlives_the_supervisor(tmp_path: Path, sim) -> None:
    proc, url = sim
    h = Headless(tmp_path, "--attach", url.removeprefix("http://") + "/")  # as SGLang prints its address
    try:
        sample = wait_for(lambda: (s := h.ready_sample())["gpus"] and s, "the simulator's GPUs")
        assert sample["server"]["url"] == url and sample["sim"] is True, "its /server_info says it simulates"
        assert [g["name"] for g in sample["gpus"]] == ["NVIDIA H200"], "the simulator's GPU, not NVML's"
        assert h.wait_event("attached_simulator")["url"] == url
        assert sample["procs"] and sample["procs"][0]["pid"] == proc.pid, "found by its listening port"
        assert h.cli("force-off").returncode == 0
        assert h.status()["spec"]["mode"] == "off"
        refused = h.cli("server", "stop")
        assert refused.returncode == 1 and "started elsewhere" in refused.stderr
        assert h.status()["spec"]["off_state"] == {"fast": True, "why_not": None}
        assert not h.records("event", "slow_off_state")
        assert h.status()["server"]["prefill_graphs"] is True
        assert "EAGER" not in h.cli("status").stdout and not h.records("event", "eager_prefill")
        assert h.status()["server"]["version"] == "0.5.17", "the release the simulator answers like"
        assert f"{url}  SGLang 0.5.17" in h.cli("status").stdout
    finally:
        assert h.stop() == 0
    assert pid_alive(proc.pid), "specctl never stops a server it did not start"


def test_a_server_whose_off_state_is_slow_is_said_once(tmp_path: Path, sims) -> None:
    _, url = sims("--slow-off")
    h = Headless(tmp_path, "--attach", url)
    try:
        told = h.wait_event("slow_off_state")
        assert "steps-0" in told["why"]
        h.ready_sample()
        text = h.cli("status")
        assert text.returncode == 0 and "off state  SLOW: simulated (--slow-off)" in text.stdout
        assert len(h.records("event", "slow_off_state")) == 1
    finally:
        assert h.stop() == 0


def test_status_shows_the_thresholds_auto_works_by_and_follows_a_set(tmp_path: Path, sim) -> None:
    _, url = sim
    h = Headless(tmp_path, "--attach", url)
    try:
        h.ready_sample()
        before = h.cli("status")
        assert before.returncode == 0 and "thresholds off_at 32  on_at 24  accept floor 1.3  dwell 8" in before.stdout
        assert h.cli("set", "off_at=114", "on_at=48", "min_accept=0.5", "accept_slope=0.022").returncode == 0
        wait_for(lambda: (h.status()["spec"] or {}).get("settings", {}).get("off_at") == 114, "the set read back")
        after = h.cli("status").stdout
        assert "thresholds off_at 114  on_at 48  accept floor 0.5 + 0.022 x batch  dwell 8" in after
        # FA3's rows, and a MoE's on Triton: never off for load, said so, not as a million requests
        assert h.cli("set", "off_at=1048576", "on_at=1048575").returncode == 0
        wait_for(lambda: (h.status()["spec"] or {}).get("settings", {}).get("off_at") == 1 << 20, "the set read back")
        never = h.cli("status").stdout
        assert "thresholds off_at never  accept floor 0.5 + 0.022 x batch  dwell 8" in never, never
    finally:
        assert h.stop() == 0


def test_a_ready_server_is_not_asked_for_health_each_poll(tmp_path: Path, sim) -> None:
    """SGLang's /health generates a token and takes a second; once ready, the poll itself is the check."""
    _, url = sim
    h = Headless(tmp_path, "--attach", url, "--interval", "0.1")
    try:
        h.ready_sample()
        asked = httpx.get(f"{url}/server_info", timeout=10).json()["specctl_sim"]["health_checks"]
        polled = len(h.records("sample"))
        wait_for(lambda: len(h.records("sample")) >= polled + 5, "five more samples")
        assert asked >= 1, "asked until the server was ready"
        assert httpx.get(f"{url}/server_info", timeout=10).json()["specctl_sim"]["health_checks"] == asked
        assert h.ready_sample()["server"]["state"] == "ready"
    finally:
        assert h.stop() == 0


def test_a_server_with_eager_prefills_is_said_once(tmp_path: Path, sims) -> None:
    _, url = sims("--eager-prefill")
    h = Headless(tmp_path, "--attach", url)
    try:
        told = h.wait_event("eager_prefill")
        assert "prefill CUDA graphs are off" in told["why"] and "docs/sglang-plugin.md" in told["why"]
        assert h.ready_sample()["server"]["prefill_graphs"] is False
        text = h.cli("status")
        assert text.returncode == 0 and "prefill    EAGER: prefill CUDA graphs are off" in text.stdout
        polled = len(h.records("sample"))
        wait_for(lambda: len(h.records("sample")) >= polled + 3, "three more samples")
        assert len(h.records("event", "eager_prefill")) == 1
    finally:
        assert h.stop() == 0


@pytest.mark.parametrize(("info", "graphs"), [
    ({"cuda_graph_config": {"prefill": {"backend": "breakable"}}, "disable_prefill_cuda_graph": True}, True),
    ({"cuda_graph_config": {"prefill": {"backend": "disabled"}}}, False),
    ({"disable_prefill_cuda_graph": True}, False),  # no resolved config: the flags say it
    ({"disable_cuda_graph": True, "disable_prefill_cuda_graph": False}, False),
    ({"disable_cuda_graph": False, "disable_prefill_cuda_graph": False}, None),  # an SGLang that does not say
    ({"cuda_graph_config": "breakable"}, None),
    (None, None),
])
def test_prefill_graphs_reads_the_resolved_config_first(info, graphs) -> None:
    assert prefill_graphs(info) is graphs


def test_a_vanished_attached_server_is_unreachable_then_back(tmp_path: Path, sim) -> None:
    proc, url = sim
    h = Headless(tmp_path, "--attach", url)
    try:
        h.ready_sample()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        h.wait_event("server_unreachable")
        assert not h.records("event", "server_restart"), "nothing to restart: the server is not ours"
        wait_for(lambda: h.status()["server"]["state"] == "unreachable", "state unreachable")
        assert h.status()["spec"] is None, "no made-up policy state"
        again, _ = start_sim(tmp_path, port=int(url.rsplit(":", 1)[1]))
        try:
            wait_for(lambda: len(h.records("event", "server_ready")) >= 2, "ready again")
        finally:
            again.terminate()
            again.wait(timeout=30)
    finally:
        h.stop()


def test_attaching_to_a_server_that_does_not_answer_says_so_then_sees_it_come(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port with nothing behind it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    h = Headless(tmp_path, "--attach", f"http://127.0.0.1:{port}")
    try:
        told = h.wait_event("server_unreachable")
        assert "refused" in told["error"]
        wait_for(lambda: h.status()["server"]["state"] == "unreachable", "state unreachable")
        late, _ = start_sim(tmp_path, port=port)
        try:
            h.wait_event("server_ready")
            assert len(h.records("event", "server_unreachable")) == 1, "said once, not every sample"
        finally:
            late.terminate()
            late.wait(timeout=30)
    finally:
        assert h.stop() == 0


def test_status_of_a_server_without_the_plugin_says_view_only_and_how_to_fix_it(tmp_path: Path, sims) -> None:
    """Before: `spec  -  mode -  reason -  switches -`, which reads like a fault, not a missing plugin."""
    _proc, url = sims("--no-plugin")
    h = Headless(tmp_path, "--attach", url)
    try:
        h.ready_sample()
        out = h.cli("status")
        assert out.returncode == 0, out.stderr
        assert "view only: this server runs without the specctl plugin" in out.stdout
        assert "specctl sglang-args" in out.stdout, "how to fix it"
        assert "mode -" not in out.stdout and "switches -" not in out.stdout and "last switch" not in out.stdout
        assert "server     ready" in out.stdout and "gpu 0" in out.stdout, "what it can read, it still shows"
        refused = h.cli("force-off")
        assert refused.returncode == 1 and "view only" in refused.stderr
        said = h.records("event", "view_only")
        assert len(said) == 1 and said[0]["reason"] == "no_plugin", "journaled once, and why"
        assert "without speculation" not in out.stdout, "it speculates: the plugin is what is missing"
    finally:
        assert h.stop() == 0
