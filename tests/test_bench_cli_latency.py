"""bench/cli_latency.py runs end to end and its figures say what they measure."""

from __future__ import annotations

import pytest

from support.benches import load_bench


@pytest.mark.bench
def test_cli_latency_runs_twice_and_status_shows_off_at_the_first_call(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_bench("cli_latency")
    assert bench.main(["--runs", "2", "--interval", "0.2"]) == 0
    out = capsys.readouterr().out
    assert "force-off start -> status --json shows OFF" in out and "p99" in out
    assert "status calls until OFF shows                  mean 1.0  max 1" in out
