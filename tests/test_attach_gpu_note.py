"""`specctl run --headless --attach URL`: `gpu_unavailable` only where it is true of the attached server.

Attaching opens this machine's NVML before the first poll can say what the server is. specctl's
simulator supplies its own GPUs (attached_simulator), so a missing NVML says nothing about them and
its `gpu_unavailable` was noise just before `attached_simulator`. Any other server keeps the line.
Real processes: the simulator, an HTTP stand-in for SGLang (which cannot run here), the supervisor.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.headless import Headless, wait_for
from support.sim_process import sim_process

# SGLang's answers that the supervisor reads, with no `specctl_sim` block: a server, not the simulator
STAND_IN = r'''
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

INFO = json.dumps({"version": "0.5.17", "model_path": "stand-in", "tp_size": 1, "internal_states": [{}]})

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body, kind = {"/health": ("", "text/plain"), "/server_info": (INFO, "application/json"),
                      "/metrics": ("", "text/plain")}.get(self.path, (None, None))
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
open(sys.argv[1], "w").write(str(server.server_address[1]))
server.serve_forever()
'''


def nvml_works() -> bool:
    """Whether this machine has NVML (a GPU host): then nothing is unavailable to say."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[str]:
    port_file = tmp_path / "stand-in.port"
    proc = subprocess.Popen([sys.executable, "-c", STAND_IN, str(port_file)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: port_file.exists() and port_file.read_text(), "the stand-in's port")
        yield f"http://127.0.0.1:{int(port_file.read_text())}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_attaching_to_the_simulator_says_no_gpu_unavailable(tmp_path: Path) -> None:
    with sim_process(tmp_path, "--gpus", "2") as url:
        h = Headless(tmp_path, "--attach", url)
        try:
            wait_for(lambda: "attached_simulator" in h.told(), "attached_simulator on stderr")
            sample = wait_for(lambda: (s := h.ready_sample())["gpus"] and s, "the simulator's GPUs")
            assert sample["sim"] is True and len(sample["gpus"]) == 2
            h.wait_event("attached_simulator")
        finally:
            assert h.stop() == 0
        told = h.told()
        assert "gpu_unavailable" not in told, told
        assert not h.records("event", "gpu_unavailable"), "nor in the journal"
        assert "server_ready" in told and h.records("event", "supervisor_stop"), "the whole run, to its end"


@pytest.mark.skipif(nvml_works(), reason="NVML works here: no GPU is unavailable to report")
def test_attaching_to_a_real_server_still_says_nvml_is_missing(tmp_path: Path, stand_in: str) -> None:
    h = Headless(tmp_path, "--attach", stand_in)
    try:
        wait_for(lambda: "gpu_unavailable" in h.told(), "gpu_unavailable on stderr")
        [said] = h.records("event", "gpu_unavailable")
        assert "NVML" in said["error"], said
        h.ready_sample()
    finally:
        assert h.stop() == 0
    told = h.told()
    assert "attached_simulator" not in told and told.count("gpu_unavailable") == 1, told
    assert told.index("server_start") < told.index("gpu_unavailable"), "said on the first poll"
