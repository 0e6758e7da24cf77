"""bench/control_limits.py's p99: what it prints must lie between the fastest and the slowest try."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from support.benches import load_bench

pytestmark = pytest.mark.bench  # tests a bench/ script: the second tier

control_limits = load_bench("control_limits")


def test_p99_of_ten_tries_is_not_above_the_slowest() -> None:
    # `--tries 10`: the exclusive default printed p99 1.84 ms beside max 1.61 ms
    lat = [0.8, 0.85, 0.9, 0.92, 0.93, 1.0, 1.1, 1.2, 1.3, 1.61]
    assert control_limits.p99(lat) <= max(lat)
    assert control_limits.p99(lat) > 1.3


@given(st.lists(st.floats(min_value=0.0, max_value=1e4, allow_nan=False), min_size=2, max_size=300))
def test_p99_lies_within_the_tries(lat: list[float]) -> None:
    slack = 1e-9 * max(lat)  # the interpolation's own rounding, not an extrapolation
    assert min(lat) - slack <= control_limits.p99(lat) <= max(lat) + slack
