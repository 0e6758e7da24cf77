"""bench/accept_window.py: the two window rules side by side really are two rules, and the policy is left as found."""

from __future__ import annotations

import subprocess
import sys

import pytest

from specctl.runtime.core import policy
from specctl.runtime.sim.presets import get_preset

from support.benches import BENCH_DIR, load_bench

pytestmark = pytest.mark.bench  # tests a bench/ script: the second tier

BENCH = BENCH_DIR / "accept_window.py"


def test_the_request_counted_window_settles_a_slow_target_sooner_than_the_verify_counted_one() -> None:
    # the MoE at 256 requests and accept length 2.8: off pays, auto starts on, and runs on until its window is full
    bench, moe = load_bench("accept_window"), get_preset("h200-qwen3moe")
    by_verifies = bench.auto_tok_s(moe, 256, 10.0, 30.0, bench.VERIFIES_ONLY)
    by_requests = bench.auto_tok_s(moe, 256, 10.0, 30.0, policy.ACCEPT_REQUESTS_PER_SLOT)
    assert by_requests > by_verifies
    assert policy.ACCEPT_REQUESTS_PER_SLOT == 8, "the bench puts the policy's rule back"
    one_request = [bench.auto_tok_s(moe, 1, 10.0, 30.0, rule) for rule in (bench.VERIFIES_ONLY, 8)]
    assert one_request[0] == one_request[1], "a batch of one fills the window in accept_window verifies either way"


def test_a_bad_accept_length_is_refused_in_one_line() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--accept-lens", "2.0,x"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--accept-lens takes numbers separated by commas, got '2.0,x'" in done.stderr
