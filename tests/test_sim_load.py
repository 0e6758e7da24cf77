"""Load specs: what operators type on the command line and send to POST /sim/load."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specctl.runtime.sim.load import LoadDriver, parse_load
from specctl.runtime.sim.presets import get_preset


def test_bare_bursts_has_the_documented_defaults() -> None:
    spec = parse_load("bursts")
    assert str(spec) == "bursts:low=4,high=160,period=40,duty=0.4"
    assert spec.concurrency(0.0) == 160  # a fresh simulator starts loaded, so it switches off
    assert spec.concurrency(16.1) == 4  # and quiet after the duty share of the period
    assert spec.concurrency(40.0) == 160


def test_steady_and_idle() -> None:
    assert parse_load("steady:c=200").concurrency(123.0) == 200
    assert parse_load(" idle ").concurrency(5.0) == 0


def test_ramp_is_a_triangle_between_from_and_to() -> None:
    spec = parse_load("ramp:from=10,to=110,period=20")
    assert [spec.concurrency(t) for t in (0, 5, 10, 15, 20)] == [10, 60, 110, 60, 10]


@pytest.mark.parametrize(("text", "names"), [
    ("flood:c=3", "flood"),
    ("steady:c=abc", "c"),
    ("steady:q=1", "q"),
    ("steady:c", "'c'"),
    ("bursts:duty=1.5", "duty"),
    ("ramp:period=0", "period"),
    ("steady:c=1,c=2", "c given twice"),
    ("steady:c=-1", "c"),
    ("bursts:period=nan", "period"),
])
def test_errors_name_the_bad_part(text: str, names: str) -> None:
    with pytest.raises(ValueError, match=names):
        parse_load(text)


@given(st.text(max_size=60))
def test_arbitrary_text_is_a_valid_spec_or_a_value_error(text: str) -> None:
    try:
        spec = parse_load(text)
    except ValueError:
        return
    assert parse_load(str(spec)) == spec
    assert spec.concurrency(7.5) >= 0


@given(st.sampled_from(["steady", "ramp", "bursts"]),
       st.dictionaries(st.sampled_from(["c", "from", "to", "period", "low", "high", "duty"]),
                       st.one_of(st.integers(-5, 500), st.floats(allow_nan=True)), max_size=4))
def test_structured_specs_round_trip_or_refuse(kind: str, params: dict[str, float]) -> None:
    text = kind + (":" + ",".join(f"{k}={v}" for k, v in params.items()) if params else "")
    try:
        spec = parse_load(text)
    except ValueError:
        return
    assert parse_load(str(spec)) == spec


def test_driver_keeps_the_engine_at_the_target_concurrency() -> None:
    engine = get_preset("h200-llama8b").engine(None)
    driver = LoadDriver(parse_load("steady:c=12"))
    for _ in range(200):
        driver.top_up(engine)
        engine.step()
        assert engine.in_flight("load") <= 12
    driver.top_up(engine)
    assert engine.in_flight("load") == 12
