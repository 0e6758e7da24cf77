"""Calibration through a real headless supervisor on the simulator: learned, journaled, shown, frozen, reset,
and never over what the operator set."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.headless import Headless, wait_for


@pytest.mark.slow
def test_calibration_learns_and_the_operator_stays_in_charge(tmp_path: Path) -> None:
    h = Headless(tmp_path, "--sim-preset", "h200-qwen3moe", "--sim-load", "steady:c=4", "--set", "calibrate=on")
    try:
        first = h.wait_event("calibrated", ok=True)
        assert first["changes"] and first["table"], first  # the values and the readings behind them
        assert {row["bucket"] for row in first["table"]} >= {4}
        probe = h.records("event", "calibration_probe")
        assert probe and probe[0]["state"] == "off" and probe[0]["bucket"] == 4  # on in use: off probed
        shown = h.cli("calibration", "show")
        assert shown.returncode == 0, shown.stderr
        assert "calibration on" in shown.stdout and "learned    min_accept=" in shown.stdout
        assert "steps of what they could lose" in shown.stdout.splitlines()[0]  # the cap is on that charge
        assert any(line.split()[:1] == ["4"] for line in shown.stdout.splitlines())

        # the operator sets the floor: calibration never publishes it again
        out = h.cli("set", "min_accept=0.9", "accept_slope=0")
        assert out.returncode == 0, out.stderr
        shown = h.cli("calibration", "show")
        assert "operator's accept_slope min_accept" in shown.stdout
        seen = len(h.records("event", "calibrated"))
        out = h.cli("set", "calibrate=off")
        assert out.returncode == 0 and "calibrate: off" in out.stdout, out.stderr
        assert "calibration off (frozen)" in h.cli("calibration", "show").stdout
        assert all("min_accept" not in r["changes"] for r in h.records("event", "calibrated")[seen:])

        bad = h.cli("set", "calibrate=maybe")
        assert bad.returncode == 2 and "calibrate: must be on or off" in bad.stderr
        out = h.cli("calibration", "reset")
        assert out.returncode == 0 and out.stdout.startswith("calibration reset: readings cleared"), out.stderr
        wait_for(lambda: h.records("event", "calibration_reset"), "the reset journaled")
        status = h.status()
        assert status["spec"]["settings"]["min_accept"] == 0.9  # the operator's, untouched by the reset
    finally:
        h.stop()


def test_calibrate_is_refused_in_one_line_without_a_supervisor(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "specctl.console.cli.main", "set", "calibrate=sometimes",
                          "--socket", str(tmp_path / "none.sock")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "calibrate: must be on or off, got 'sometimes'" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    out = subprocess.run([sys.executable, "-m", "specctl.console.cli.main", "calibration", "show",
                          "--socket", str(tmp_path / "none.sock")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 3, out.stderr


@pytest.mark.bench
def test_the_gpu_kits_calibration_switch_drives_a_real_supervisor(tmp_path: Path) -> None:
    """bench/gpu/calib_switch.sh, as interleave.py calls it: row = the row alone (frozen), auto = calibrated."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    specctl = Path(sys.executable).parent / "specctl"
    h = Headless(tmp_path, "--sim-preset", "h200-qwen3moe", "--sim-load", "steady:c=4", "--set", "calibrate=on")

    def switch(mode: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(root / "bench/gpu/calib_switch.sh"), mode, "--socket", str(h.socket)],
                              capture_output=True, text=True, timeout=60, env={**os.environ, "SPECCTL": str(specctl)})

    try:
        h.wait_event("calibrated", ok=True)
        assert switch("row").returncode == 0
        assert "calibration off (frozen)" in h.cli("calibration", "show").stdout
        assert h.status()["spec"]["mode"] == "auto"
        assert switch("off").returncode == 0 and h.status()["spec"]["mode"] == "off"
        assert switch("auto").returncode == 0
        assert "calibration on" in h.cli("calibration", "show").stdout and h.status()["spec"]["mode"] == "auto"
        bad = switch("sideways")
        assert bad.returncode == 2 and "unknown mode 'sideways'" in bad.stderr
    finally:
        h.stop()
