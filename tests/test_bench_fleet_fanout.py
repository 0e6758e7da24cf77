"""bench/fleet_fanout.py runs end to end on a small fleet and prints its figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.bench
@pytest.mark.slow
def test_fleet_fanout_prints_the_slope_and_the_failing_run(tmp_path: Path) -> None:
    pytest.importorskip("sglang_router")
    csv = tmp_path / "fanout.csv"
    got = subprocess.run([sys.executable, str(ROOT / "bench" / "fleet_fanout.py"), "--sizes", "2,4", "--repeat", "1",
                          "--console-seconds", "0", "--csv", str(csv)], capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stdout + got.stderr
    assert "fan-out per server" in got.stdout and "500 servers projected" in got.stdout
    assert "'timeout': 2" in got.stdout and "'missing': 2" in got.stdout
    assert csv.read_text().splitlines()[0] == "servers,fanout_s,process_s"
