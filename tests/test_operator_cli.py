"""The operator's second hour: one exit-code rule, commands that return once they took effect, and a busy
server that reads BUSY, not gone. Real `specctl` processes against a real supervisor on the simulator."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from specctl.runtime.core.in_between import switching
from specctl.runtime.supervisor.health import ServerHealth

from support.headless import Headless, wait_for


def specctl(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specctl.console.cli.main", *argv],
                          capture_output=True, text=True, timeout=60)


# -- exit codes -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [("set", "off_at=-1"), ("set", "off_at=abc"), ("set", "bogus=1"),
                                  ("force-on", "--steps", "99"), ("set", "accept_slope=2"), ("set",)])
def test_malformed_or_out_of_range_is_2_with_or_without_a_supervisor(tmp_path: Path, argv: tuple[str, ...]) -> None:
    out = specctl(*argv, "--socket", str(tmp_path / "nobody.sock"))
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert "go together" not in out.stderr


def test_off_at_minus_one_names_its_own_range_only(tmp_path: Path) -> None:
    out = specctl("set", "off_at=-1", "--socket", str(tmp_path / "nobody.sock"))
    assert out.stderr == "specctl set: off_at: must be between 1 and 1048576, got -1\n"


def test_the_rule_is_in_the_help_of_every_verb() -> None:
    for argv in (("--help",), ("set", "--help"), ("force-on", "--help"), ("status", "--help")):
        text = " ".join(specctl(*argv).stdout.split())
        assert "1 refused for the server's state" in text and "2 malformed or out of range" in text, argv
        assert "3 no supervisor to talk to" in text


def test_run_is_headless_without_the_flag(tmp_path: Path) -> None:
    h = Headless(tmp_path, "--sim-load", "idle")  # Headless passes --headless: check the flag is optional too
    h.stop()
    out = specctl("run", "--help")
    assert "always headless" in out.stdout
    from specctl.console.cli.main import build_parser

    args = build_parser().parse_args(["run", "--socket", "x"])
    assert args.verb == "run" and args.headless is False


# -- in-between states ------------------------------------------------------------------------------------

def test_the_in_between_words() -> None:
    assert switching({"mode": "off", "on": True}) == "switching off at the next step"
    assert switching({"mode": "on", "on": False}) == "switching on at the next step"
    assert switching({"mode": "on", "on": True, "depth": 2, "settings": {"steps": 3}}) == \
        "going to depth 3 at the next step"
    assert switching({"mode": "auto", "on": True}) is None


@pytest.mark.slow
def test_a_command_returns_once_it_shows_and_an_idle_server_says_at_the_next_step(tmp_path: Path) -> None:
    h = Headless(tmp_path, "--sim-load", "steady:c=64")
    try:
        h.ready_sample()
        out = h.cli("force-off")
        assert out.returncode == 0 and "[" not in out.stdout, out.stdout  # taken effect: no "pending"
        assert h.status()["spec"]["on"] is False, "status agrees the moment the command returns"
        assert h.cli("force-on").returncode == 0
        assert h.status()["spec"]["on"] is True
        # an idle server runs no decode step: the switch waits for one, and both the answer and status say so
        assert h.cli("force-off").returncode == 0
        h.set_sim_load("idle")
        wait_for(lambda: h.status()["server"]["running"] == 0, "the server idle")
        out = h.cli("force-on")
        assert out.returncode == 0 and "[switching on at the next step]" in out.stdout, out.stdout
        assert "OFF (forced on; switching on at the next step)" in h.cli("status").stdout
    finally:
        h.stop()


# -- busy is not gone -------------------------------------------------------------------------------------

def test_health_tells_busy_from_unreachable() -> None:
    health = ServerHealth((1.0, 30.0))
    assert health.answered(True, attached=False, url="u")["event"] == "server_ready"
    health.unanswered("timed out after 2.0 s")
    assert health.answered(False, attached=False, url="u", busy=True)["event"] == "server_busy"
    assert health.state == "busy"
    assert health.answered(False, attached=False, url="u", busy=True) is None, "said once"
    health.unanswered("connection refused")
    assert health.answered(False, attached=False, url="u")["event"] == "server_unreachable"
    assert health.answered(True, attached=False, url="u")["event"] == "server_ready"


@pytest.mark.slow
def test_a_server_that_accepts_and_stalls_reads_busy_with_its_last_step_then_ready(tmp_path: Path) -> None:
    """The simulator's /sim/stall: connections are taken, answers wait (SGLang's first-use kernel compile)."""
    h = Headless(tmp_path, "--sim-load", "steady:c=8")
    try:
        url = h.ready_sample()["server"]["url"]
        r = httpx.post(f"{url}/sim/stall", json={"seconds": 6}, headers=h.admin(), timeout=10)
        assert r.status_code == 200
        busy = h.wait_event("server_busy")
        assert "timed out" in busy["error"]
        told = wait_for(lambda: "BUSY since" in (t := h.cli("status").stdout) and t, "status to say BUSY")
        assert "last step" in told and "s ago" in told and "working, not gone" in told
        health = ("server_busy", "server_ready", "server_unreachable")
        said = wait_for(lambda: (e := [r["event"] for r in h.records("event") if r["event"] in health])[-1]
                        == "server_ready" and len(e) > 1 and e, "ready again once the stall ends")
        assert said == ["server_ready", "server_busy", "server_ready"]
        assert not h.records("event", "server_unreachable"), "busy is not gone"
    finally:
        h.stop()
