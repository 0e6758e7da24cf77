"""End to end: `specctl run --headless` on the simulator, steered with the CLI, as an operator would."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from specctl.runtime.supervisor.journal import read_journal

from support.disk import small_disk
from support.headless import Headless, pid_alive, wait_for


@pytest.fixture
def sup(tmp_path: Path):
    h = Headless(tmp_path, "--sim-load", "steady:c=200", "--sim-gpus", "2", "--set", "dwell=4")
    yield h
    h.stop()


@pytest.mark.slow
def test_load_switches_off_force_on_is_journaled_and_quiet_turns_it_back_on(sup: Headless) -> None:
    switch = sup.wait_event("spec_switch", on=False)
    off_at = sup.status()["spec"]["settings"]["off_at"]
    assert switch["reason"] == "load" and switch["batch_size"] >= off_at

    out = sup.cli("force-on")
    assert out.returncode == 0, out.stderr
    cmd = wait_for(lambda: [r for r in sup.records("command") if r["cmd"] == "mode"], "the command line")[-1]
    assert cmd["ok"] is True and cmd["uid"] == os.getuid() and cmd["args"] == {"mode": "on"}
    status = sup.status()
    assert status["kind"] == "sample" and status["sim"] is True
    assert status["spec"]["mode"] == "on"
    wait_for(lambda: sup.status()["spec"]["on"], "speculation on while forced")

    assert sup.cli("auto").returncode == 0
    sup.set_sim_load("steady:c=4")
    back = sup.wait_event("spec_switch", on=True, reason="quiet")
    assert back["batch_size"] <= sup.status()["spec"]["settings"]["on_at"]
    assert sup.status()["spec"]["mode"] == "auto"


def test_set_is_all_or_nothing_from_the_cli(sup: Headless) -> None:
    sup.ready_sample()
    before = sup.status()["spec"]["settings"]
    bad = sup.cli("set", "off_at=48", "on_at=60")
    assert bad.returncode == 1 and "on_at" in bad.stderr
    assert sup.status()["spec"]["settings"] == before, "nothing applied"
    refused = sup.cli("set", "steps=5")  # valid for the policy, but the server built no steps-5 state
    assert refused.returncode == 1 and "refused" in refused.stderr
    assert sup.status()["spec"]["settings"] == before
    good = sup.cli("set", "off_at=48", "on_at=16", "min_accept=0.8")
    assert good.returncode == 0, good.stderr
    settings = sup.status()["spec"]["settings"]
    assert (settings["off_at"], settings["on_at"], settings["min_accept"]) == (48, 16, 0.8)


def test_kill_9_of_the_simulator_is_journaled_and_sampling_resumes(sup: Headless) -> None:
    first = sup.ready_sample()["server"]["pid"]
    assert sup.cli("force-off").returncode == 0
    os.kill(first, signal.SIGKILL)
    exit_ = sup.wait_event("server_exit", pid=first)
    assert exit_["returncode"] == -signal.SIGKILL
    sup.wait_event("server_restart", attempt=1)
    ready = wait_for(lambda: [s for s in sup.records("sample")
                              if s["server"]["state"] == "ready" and s["server"]["pid"] != first],
                     "samples from the restarted server")
    assert ready[-1]["server"]["restarts"] == 1
    # what the operator asked for survives the crash
    wait_for(lambda: sup.status()["spec"]["mode"] == "off", "the forced mode restored after restart")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])  # SIGHUP: the ssh session closed
def test_a_signal_to_stop_stops_the_supervisor_and_everything_it_started(tmp_path: Path, sig: int) -> None:
    h = Headless(tmp_path, "--sim-load", "steady:c=8")
    pid = h.ready_sample()["server"]["pid"]
    h.proc.send_signal(sig)
    assert h.proc.wait(timeout=30) == 0
    wait_for(lambda: not pid_alive(pid), "the simulator to be gone")
    assert not h.socket.exists()
    assert h.records("event")[-1]["event"] == "supervisor_stop"
    told = h.told()
    assert "supervising simulator" in told and "server_start pid=" in told and "Traceback" not in told


def test_under_nohup_a_hang_up_leaves_the_supervisor_running(tmp_path: Path) -> None:
    """`nohup specctl run --headless &` asks to outlive the session: SIGHUP stays ignored."""
    journal = tmp_path / "run.jsonl"
    proc = subprocess.Popen(["nohup", sys.executable, "-m", "specctl.console.cli.main", "run", "--headless",
                             "--socket", str(tmp_path / "s.sock"), "--log", str(journal), "--interval", "0.2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    samples = lambda: [r for r in read_journal(journal) if r.get("kind") == "sample"] if journal.exists() else []  # noqa: E731
    try:
        wait_for(lambda: len(samples()) >= 2, "samples")
        proc.send_signal(signal.SIGHUP)
        seen = len(samples())
        wait_for(lambda: len(samples()) >= seen + 3, "three more samples after the hang-up")
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.slow
def test_kill_9_of_the_supervisor_leaves_a_readable_journal_and_no_orphans(tmp_path: Path) -> None:
    h = Headless(tmp_path, "--sim-load", "steady:c=100", "--sim-gpus", "8")
    pid = h.ready_sample()["server"]["pid"]
    wait_for(lambda: len(h.records("sample")) > 10, "a few samples")
    h.proc.kill()
    h.proc.wait()
    complete = h.journal.read_bytes().split(b"\n")[:-1]
    recs = list(read_journal(h.journal))
    assert len(recs) == len(complete) and all(json.loads(c) == r for c, r in zip(complete, recs))
    wait_for(lambda: not pid_alive(pid), "the simulator to follow its supervisor")


def test_socket_abuse_does_not_disturb_the_supervisor(sup: Headless) -> None:
    sup.ready_sample()
    for payload in (b"\xff\xfe\n", b"{not json\n", b'{"id": 1, "cmd": 7}\n', b"x" * (1 << 20) + b"\n",
                    b'{"id": 2, "cmd": "set", "args": {"settings": {"off_at": "lots"}}}\n'):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(10)
            s.connect(str(sup.socket))
            s.recv(4096)  # greeting
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
            for line in answer.splitlines():
                reply = json.loads(line)
                assert reply["ok"] is False and isinstance(reply["error"]["code"], str)
    assert sup.cli("force-off").returncode == 0
    assert sup.status()["spec"]["mode"] == "off"
    assert all(isinstance(r, dict) for r in read_journal(sup.journal))
    assert sup.proc.poll() is None


@pytest.mark.slow
def test_server_stop_start_restart_from_the_cli(sup: Headless) -> None:
    first = sup.ready_sample()["server"]["pid"]
    stopped = sup.cli("server", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert sup.status()["server"]["state"] == "stopped" and sup.status()["server"]["pid"] is None
    wait_for(lambda: not pid_alive(first), "the simulator to be stopped")
    assert not sup.records("event", "server_restart"), "a stopped server stays stopped"
    gpus = wait_for(lambda: (g := sup.records("sample")[-1]["gpus"]) and g[0]["state"] == "unread" and g,
                    "the simulated GPUs unread")
    assert [g["state"] for g in gpus] == ["unread", "unread"] and "simulator does not answer" in gpus[0]["error"]
    assert not sup.records("event", "gpu_failed"), "the simulator stopped, not its GPUs"
    assert sup.cli("set", "off_at=48").returncode == 1, "no server to take settings"
    assert sup.cli("server", "start").returncode == 0
    again = sup.cli("server", "start")
    assert again.returncode == 1 and "already running" in again.stderr and "server restart" in again.stderr
    second = wait_for(lambda: sup.status()["server"]["state"] == "ready" and sup.status()["server"]["pid"],
                      "the server started again")
    assert second != first
    assert sup.cli("server", "restart").returncode == 0
    third = wait_for(lambda: sup.status()["server"]["state"] == "ready" and sup.status()["server"]["pid"],
                     "the server restarted")
    assert third not in (first, second) and not pid_alive(second)
    assert len(list(sup.records("event", "server_start"))) == 3, "a refused start starts nothing"


def test_a_gpu_that_fails_then_recovers_is_journalled_once_each_way(sup: Headless) -> None:
    url = sup.ready_sample()["server"]["url"]
    assert httpx.post(f"{url}/sim/gpus", json={"failed": [1]}, headers=sup.admin(), timeout=10).status_code == 200
    failed = sup.wait_event("gpu_failed", index=1)
    assert failed["error"] == "simulated fault (--fail-gpu)"
    polled = len(sup.records("sample"))
    wait_for(lambda: len(sup.records("sample")) >= polled + 3, "three more samples")
    assert httpx.post(f"{url}/sim/gpus", json={"failed": []}, headers=sup.admin(), timeout=10).status_code == 200
    sup.wait_event("gpu_recovered", index=1)
    assert [(r["event"], r["index"]) for r in sup.records("event") if r["event"].startswith("gpu_")] == [
        ("gpu_failed", 1), ("gpu_recovered", 1)]
    assert "gpu_failed index=1" in sup.told()


def test_a_float_the_file_gives_an_integer_setting_reaches_the_simulator_as_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "specctl.toml"
    config.write_text("[policy]\noff_at = 40.0\n")  # TOML's 40.0 is a float; the simulator parses text
    monkeypatch.setenv("SPECCTL_CONFIG", str(config))
    h = Headless(tmp_path)
    try:
        assert h.ready_sample()["spec"]["settings"]["off_at"] == 40
        assert not h.records("event", "server_start_failed")
    finally:
        assert h.stop() == 0


def test_a_journal_on_a_full_disk_is_said_once_and_its_gap_recorded_when_it_heals(tmp_path: Path) -> None:
    """A real full disk (disk_helpers): the failure is said once, every line that was written parses,
    and the journal_gap record comes first when space returns."""
    with small_disk(tmp_path, size_kib=512) as (mnt, fill, free):
        h = Headless(tmp_path, "--log", str(mnt / "run.jsonl"))
        h.journal = mnt / "run.jsonl"
        try:
            h.ready_sample()
            fill(h.proc.pid)
            wait_for(lambda: "journal write failed" in h.told(), "the failure said")
            first = h.status()["t"]
            wait_for(lambda: h.status()["t"] >= first + 1.0, "a second of samples not journalled")
            free()
            healed = h.status()["t"]
            wait_for(lambda: h.records("sample")[-1]["t"] > healed, "samples journalled again")
            raw = h.journal.read_bytes()
            assert raw.endswith(b"\n") and all(json.loads(line) for line in raw.splitlines())
            gaps = h.records("event", "journal_gap")
            assert gaps and sum(g["lost"] for g in gaps) >= 3
            after = h.records()
            assert after[after.index(gaps[-1]) - 1]["t"] < first, "the gap comes before the records after it"
        finally:
            assert h.stop() == 0
    assert h.told().count("journal write failed") == 1 and "journal writes resumed" in h.told()


def test_a_second_supervisor_on_the_same_socket_leaves_the_first_s_journal_alone(sup: Headless) -> None:
    sup.ready_sample()
    second = subprocess.run([sys.executable, "-m", "specctl.console.cli.main", "run", "--headless", "--socket",
                             str(sup.socket), "--log", str(sup.journal)], capture_output=True, text=True,
                            timeout=60)
    assert second.returncode == 1 and "another specctl supervisor" in second.stderr, second.stderr
    polled = len(sup.records("sample"))
    wait_for(lambda: len(sup.records("sample")) > polled, "the first supervisor to journal on")
    assert [r["event"] for r in sup.records("event") if r["event"].startswith("supervisor_")] == [
        "supervisor_start"], "nothing of the refused one's in the journal"


def test_the_journal_rotates_at_the_size_asked_for(tmp_path: Path) -> None:
    h = Headless(tmp_path, "--sim-load", "steady:c=8", "--sim-gpus", "8", "--log-max-mb", "0.02")
    try:
        rotated = h.journal.with_name(h.journal.name + ".1")
        wait_for(rotated.exists, "a rotated journal")
        assert rotated.stat().st_size >= 0.02 * 1024 * 1024
        assert all(r["v"] == 1 for r in read_journal(rotated))
    finally:
        assert h.stop() == 0
