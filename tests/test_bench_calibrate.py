"""bench/calibrate.py runs and prints its side-by-side table, with a usage error for a bad window."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.benches import load_bench


@pytest.mark.bench
def test_the_side_by_side_prints_each_server_and_the_ratio(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_bench("calibrate")
    out_csv = tmp_path / "sim.csv"
    assert bench.main(["--preset", "rtx-topk1", "--level-s", "20", "--window-s", "10", "--csv", str(out_csv)]) == 0
    printed = capsys.readouterr().out
    assert "| level | c | forced on | forced off | default auto | calibrated auto |" in printed
    assert len(out_csv.read_text().splitlines()) == 1 + 6  # a header and one row a level
    assert bench.main(["--level-s", "3", "--window-s", "5"]) == 2
