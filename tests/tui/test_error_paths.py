"""Error paths an operator meets in the first hour: each refusal names the field, says why and what to do."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from specctl.console.tui.app import SpecctlApp
from specctl.console.tui.links import LocalLink
from specctl.runtime.supervisor.config import SupervisorConfig
from specctl.runtime.supervisor.lifecycle import Supervisor
from specctl.widgets.banner import SpecBanner
from specctl.widgets.event_log import EventLog

from support.headless import Headless, wait_for
from support.tui import until


@pytest.fixture
def headless(sock_dir: Path):
    sup = Headless(sock_dir, "--sim-load", "steady:c=4", "--sim-gpus", "1")
    sup.ready_sample()
    yield sup
    sup.proc.terminate()
    sup.proc.wait(timeout=60)


def test_set_steps_names_the_field_and_why(headless: Headless) -> None:
    out = headless.cli("set", "steps=5")
    assert out.returncode == 1
    line = out.stderr.strip()
    assert line.startswith("specctl set: refused: steps: the model server was launched for 3 draft steps"), line
    assert "--speculative-num-steps 5" in line and "nothing changed" in line
    [record] = [r for r in headless.records("command") if r["cmd"] == "set"]
    assert record["ok"] is False and "launched for 3 draft steps" in record["message"]


@pytest.mark.slow
def test_set_half_a_pair_says_which_pair_to_set_together(headless: Headless) -> None:
    out = headless.cli("set", "off_at=8")
    assert out.returncode == 1
    line = out.stderr.strip()
    assert "on_at: must be below off_at (8)" in line, line
    assert "off_at and on_at go together: set both in one command (specctl set off_at=... on_at=...)" in line
    assert headless.cli("set", "off_at=8", "on_at=4").returncode == 0, "the pair together is taken"


def test_a_config_file_named_by_specctl_config_must_exist(tmp_path: Path) -> None:
    env = dict(os.environ, SPECCTL_CONFIG=str(tmp_path / "missing.toml"))
    for verb in (["status"], ["set", "off_at=64"], ["run", "--headless"]):
        out = subprocess.run([sys.executable, "-m", "specctl.console.cli.main", *verb], capture_output=True,
                             text=True, timeout=60, env=env)
        assert out.returncode == 2, (verb, out.stderr)
        assert f"SPECCTL_CONFIG names {tmp_path / 'missing.toml'}, which does not exist" in out.stderr
        assert "Traceback" not in out.stderr


async def test_a_refusal_wraps_in_the_80_column_event_log(tmp_path: Path) -> None:
    sup = Supervisor(SupervisorConfig(sim_load="steady:c=4", sim_gpus=1, interval=0.2, socket_path=None,
                                      journal_path=tmp_path / "run.jsonl"))
    app = SpecctlApp(LocalLink(sup), remember_theme=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: "READY" in app.dashboard.query_one(SpecBanner).render().plain, "ready")
        app.send("set", {"settings": {"steps": 5}}, "applied")
        log = app.dashboard.query_one(EventLog)
        text = lambda: " ".join(s.text.strip() for s in log.lines)  # noqa: E731
        await until(pilot, lambda: "nothing changed" in text(), "the whole refusal in the log")
        assert "refused: the model server was launched for 3 draft steps" in text()
        assert all(len(s.text.rstrip()) <= log.scrollable_content_region.width for s in log.lines)


def test_tui_while_a_supervisor_holds_the_socket_says_to_connect(headless: Headless) -> None:
    out = subprocess.run([sys.executable, "-m", "specctl.console.cli.main", "tui", "--socket", str(headless.socket)],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 2
    assert f"a supervisor is already running on {headless.socket}" in out.stderr
    assert f"specctl tui --connect {headless.socket}" in out.stderr


def test_tui_refuses_a_socket_folder_others_can_write_before_taking_the_screen(tmp_path: Path) -> None:
    """A console whose supervisor cannot bind is a dead one: one line, as `specctl run` says it, instead."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp
    out = subprocess.run([sys.executable, "-m", "specctl.console.cli.main", "tui", "--socket", str(shared / "s.sock")],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        f"specctl tui: cannot start: refusing {shared} for the control socket: others can write it (mode 1777); "
        "choose a folder of your own with --socket, or chmod go-w it"]
    assert not (shared / "s.sock").exists()


@pytest.mark.slow
def test_tui_in_a_terminal_offers_to_connect_and_does(headless: Headless, tmp_path: Path) -> None:
    master, slave = os.openpty()
    env = dict(os.environ, TERM="xterm-256color", SPECCTL_STATE_DIR=str(tmp_path / "state"))
    proc = subprocess.Popen([sys.executable, "-m", "specctl.console.cli.main", "tui", "--socket",
                             str(headless.socket)], stdin=slave, stdout=slave, stderr=slave, env=env,
                            start_new_session=True)
    os.close(slave)
    seen = bytearray()

    def read() -> None:
        try:
            while chunk := os.read(master, 65536):
                seen.extend(chunk)
        except OSError:
            pass

    threading.Thread(target=read, daemon=True).start()
    try:
        wait_for(lambda: b"Connect to it instead? [Y/n]" in seen, "the offer")
        os.write(master, b"y\r")
        wait_for(lambda: b"SPEC" in seen, "the console, connected")
        time.sleep(1.0)  # let it subscribe before the key
        os.write(master, b"x")
        wait_for(lambda: any(r.get("args") == {"mode": "off"} for r in headless.records("command")),
                 "force-off from the connected console")
        os.write(master, b"q")
        assert proc.wait(timeout=60) == 0
        assert headless.proc.poll() is None, "the console that connected leaves the supervisor running"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(master)
