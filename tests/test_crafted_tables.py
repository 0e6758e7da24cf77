"""Crafted depth-cost tables (and the other JSON files specctl reads): each a one-line error with exit 2, fast.

A table reaches `specctl run --depth-costs`, `specctl sglang-args --depth-costs`, `specctl depth-costs
--prior`, the simulator and, through SPECCTL_DEPTH_COSTS, every rank of a server with the plugin. None of
them may hang (a FIFO), spin (a top bucket of a trillion: a row per integer), or die with a traceback (a
400-digit value, deep nesting, bad UTF-8).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specctl.runtime.core.depth_model import MAX_BATCH, MAX_BUCKETS, DepthCosts, DepthCostsError, read_costs
from specctl.runtime.sglang_plugin.plugin import costs_from_env
from specctl.runtime.sglang_plugin.sglang_access import SpecctlPluginError

GOOD = {"buckets": [1, 64], "depths": [0, 3], "step_ms": [[5.0, 6.0], [8.0, 12.0]]}


def _write(path: Path, content: bytes | str) -> Path:
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


CRAFTED: dict[str, tuple[bytes | str | None, str]] = {  # name: (content, what the one line says)
    "top_bucket_a_trillion": ('{"buckets":[1,1000000000000],"depths":[0,3],"step_ms":[[1,2],[3,4]]}',
                              f"batch sizes 1..{MAX_BATCH}"),
    "too_many_buckets": (json.dumps({"buckets": list(range(1, 200_001)), "depths": [0],
                                     "step_ms": [[1.0]] * 200_000}), f"at most {MAX_BUCKETS}"),
    "a_400_digit_value": ('{"buckets":[1],"depths":[0],"step_ms":[[' + "9" * 400 + "]]}", "positive numbers up to"),
    "a_5000_digit_value": ('{"buckets":[1],"depths":[0],"step_ms":[[' + "9" * 5000 + "]]}", "digits"),
    "a_400_digit_bucket": ('{"buckets":[' + "9" * 400 + '],"depths":[0],"step_ms":[[1]]}', "batch sizes"),
    "deep_nesting": ("[" * 100_000 + "]" * 100_000, "nested too deep"),
    "bad_utf8": (b'{"source": "\xff\xfe", "buckets": [1]}', "not UTF-8"),
    "not_json": ("{buckets: 1}", "not JSON"),
    "nan": ('{"buckets":[1],"depths":[0],"step_ms":[[NaN]]}', "positive numbers"),
    "fifo": (None, "not a regular file"),
}


def crafted(tmp_path: Path, name: str) -> Path:
    content, _ = CRAFTED[name]
    path = tmp_path / f"{name}.json"
    if content is None:
        os.mkfifo(path)
    else:
        _write(path, content)
    return path


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_read_costs_refuses_in_one_line(tmp_path: Path, name: str) -> None:
    with pytest.raises(DepthCostsError) as caught:
        read_costs(crafted(tmp_path, name))
    message = str(caught.value)
    assert CRAFTED[name][1] in message and "\n" not in message and len(message) < 400, message


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_the_cli_says_one_line_and_exits_2(tmp_path: Path, name: str) -> None:
    path = crafted(tmp_path, name)
    for argv in (["sglang-args", "--steps", "3", "--config", str(tmp_path / "adaptive.json"), "--depth-costs",
                  str(path)],
                 ["depth-costs", str(_write(tmp_path / "j.jsonl", "")), "--prior", str(path)]):
        proc = subprocess.run([sys.executable, "-m", "specctl.console.cli.main", *argv], capture_output=True,
                              text=True, timeout=120, env=dict(os.environ, SPECCTL_STATE_DIR=str(tmp_path / "s")))
        assert proc.returncode == 2, (argv[0], proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and CRAFTED[name][1] in lines[0] and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("name", ["fifo", "top_bucket_a_trillion", "deep_nesting", "bad_utf8"])
def test_the_plugin_stops_the_launch_with_a_clear_error(tmp_path: Path, name: str) -> None:
    with pytest.raises(SpecctlPluginError) as caught:
        costs_from_env({"SPECCTL_DEPTH_COSTS": str(crafted(tmp_path, name))})
    assert "SPECCTL_DEPTH_COSTS" in str(caught.value) and CRAFTED[name][1] in str(caught.value)


def test_the_largest_table_allowed_loads_lazily_and_prices_like_a_small_one() -> None:
    """A top bucket of MAX_BATCH: no row per integer at load; a row asked for is interpolated as before."""
    buckets = [1, 64, MAX_BATCH]
    table = DepthCosts(tuple(buckets), (0, 3), ((0.005, 0.006), (0.008, 0.012), (1.0, 2.0)))
    assert len(table._rows) <= 1025
    small = DepthCosts((1, 64), (0, 3), ((0.005, 0.006), (0.008, 0.012)))
    assert table.row(32) == small.row(32)
    mid = table.row(MAX_BATCH // 2)
    assert 0.008 < mid[0] < 1.0 and mid[1] == mid[2] == float("inf")
    assert table.row(MAX_BATCH * 2)[3] > 2.0  # extrapolated past the top, as before


def test_many_buckets_at_the_limit_load(tmp_path: Path) -> None:
    n = MAX_BUCKETS
    raw = {"buckets": list(range(1, n + 1)), "depths": [0, 1], "step_ms": [[1.0 + i, 2.0 + i] for i in range(n)]}
    table = read_costs(_write(tmp_path / "t.json", json.dumps(raw)))
    assert table.row(n)[1] == pytest.approx((2.0 + n - 1) / 1e3)


def test_a_good_table_still_reads(tmp_path: Path) -> None:
    table = read_costs(_write(tmp_path / "t.json", json.dumps(GOOD)))
    assert table.row(64)[3] == pytest.approx(0.012)
