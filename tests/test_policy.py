"""SpecPolicy: the rules, and the properties tensor parallelism depends on."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specctl.runtime.core.policy import REASONS, SpecPolicy
from specctl.runtime.core.settings import PolicySettings, SettingsError, check_fields, settings_from_wire


def run(policy: SpecPolicy, batches: list[int], accept: float = 2.0) -> list[int]:
    out = []
    for bs in batches:
        steps = policy.decide(bs)
        if steps:
            policy.on_verify([min(accept, steps)] * max(bs, 1))
        out.append(steps)
    return out


def test_load_turns_off_and_quiet_turns_back_on() -> None:
    p = SpecPolicy(PolicySettings(off_at=64, on_at=32, dwell=0))
    assert run(p, [10, 63]) == [3, 3]
    assert p.decide(64) == 0
    assert p.state()["reason"] == "load"
    assert run(p, [40, 33]) == [0, 0], "hysteresis: between on_at and off_at nothing changes"
    assert p.decide(32) == 3
    assert p.state()["reason"] == "quiet"
    assert [s.reason for s in p.recent_switches()] == ["load", "quiet"]


def test_dwell_holds_the_state() -> None:
    p = SpecPolicy(PolicySettings(off_at=64, on_at=32, dwell=5))
    p.decide(100)  # step 1: dwell counts from the start only after a switch
    assert not p.on
    assert run(p, [1, 1, 1, 1]) == [0, 0, 0, 0]
    assert p.decide(1) == 3  # step 6: five steps after the switch at step 1


def test_low_accept_switches_off_then_probes() -> None:
    p = SpecPolicy(PolicySettings(min_accept=1.0, accept_window=4, probe_after=10, dwell=0))
    run(p, [8] * 4, accept=0.5)
    assert p.decide(8) == 0
    assert p.state()["reason"] == "low_accept"
    assert run(p, [8] * 9) == [0] * 9, "no quiet return while off for low acceptance"
    assert p.decide(8) == 3
    assert p.state()["reason"] == "probe"
    assert p.accept_mean() is None, "a resume starts a fresh acceptance window"


def test_a_window_of_large_batches_is_full_in_fewer_verifies() -> None:
    # 64 verifies of one request, or 8 verifies of 64: the same 512 samples (a MoE at 192 requests took 12 s
    # to fill 64 verifies after every resume on the H200, docs/benchmarks.md); never fewer than 8 verifies
    wide = SpecPolicy(PolicySettings(min_accept=1.0, off_at=1000, on_at=999, dwell=0))
    assert run(wide, [64] * 7, accept=0.5) == [3] * 7, "7 verifies: not yet, whatever their requests"
    assert wide.decide(64) == 3, "the 8th decision comes before the 8th verify"
    wide.on_verify([0.5] * 64)
    assert wide.decide(64) == 0 and wide.state()["reason"] == "low_accept"
    narrow = SpecPolicy(PolicySettings(min_accept=1.0, off_at=1000, on_at=999, dwell=0))
    assert run(narrow, [4] * 64, accept=0.5) == [3] * 64, "4 requests a verify: the 64 verifies it always was"
    assert narrow.decide(4) == 0 and narrow.state()["reason"] == "low_accept"


def test_the_first_verify_after_a_resume_is_left_out_of_the_window() -> None:
    # the draft model did not follow the requests while off: that verify accepts about nothing
    p = SpecPolicy(PolicySettings(min_accept=1.0, off_at=1000, on_at=999, dwell=0))
    p.apply({"mode": "off"})
    assert p.decide(64) == 0
    p.apply({"mode": "auto"})
    assert p.decide(64) == 3 and p.state()["reason"] == "quiet"
    p.on_verify([0] * 64)  # the cold one
    assert p.accept_mean() is None and p.state()["verifies"] == 1, "heard, counted, not in the window"
    assert run(p, [64] * 8, accept=2.0) == [3] * 8
    assert p.accept_mean() == 2.0 and p.decide(64) == 3, "8 warm verifies of 2.0 accepted: on"
    p.on_verify([0] * 64)
    assert p.accept_mean() == pytest.approx(16 / 9), "a verify that is not the first after a resume counts"


def floor_policy(**changes: float) -> SpecPolicy:
    """Floor 0.3 + 0.05 per request, a 4-verify window, never off for load."""
    base = {"min_accept": 0.3, "accept_slope": 0.05, "accept_window": 4, "probe_after": 1000, "dwell": 0,
            "off_at": 200, "on_at": 100}
    return SpecPolicy(PolicySettings(**{**base, **changes}))


def test_the_floor_rises_with_the_batch() -> None:
    small, large = floor_policy(), floor_policy()
    assert run(small, [8] * 40, accept=1.0) == [3] * 40, "floor at 8 requests: 0.7, below 1.0"
    assert run(large, [32] * 4, accept=1.0) == [3] * 4
    assert large.decide(32) == 0, "floor at 32 requests: 1.9, above 1.0"
    assert large.state()["reason"] == "low_accept"
    assert [(s.reason, s.batch_size) for s in large.recent_switches()] == [("low_accept", 32)]


def test_without_a_slope_the_floor_is_min_accept_at_every_batch() -> None:
    p = floor_policy(accept_slope=0.0, min_accept=1.2)
    run(p, [1] * 4, accept=1.0)
    assert p.decide(1) == 0 and p.state()["reason"] == "low_accept"
    assert run(p, [1] * 50) == [0] * 50, "no quiet return without a slope: only the probe"


def test_quiet_return_once_the_batch_is_small_enough_for_the_acceptance() -> None:
    p = floor_policy()
    run(p, [32] * 4, accept=1.0)
    assert p.decide(32) == 0  # off with a mean of 1.0: back when the floor is <= 0.8, i.e. 10 requests
    assert run(p, [200, 20, 11]) == [0, 0, 0], "still too many requests for 1.0 accepted with 20 % to spare"
    assert p.decide(9) == 3
    assert p.state()["reason"] == "quiet"
    assert p.accept_mean() is None, "a resume starts a fresh acceptance window"
    assert [s.reason for s in p.recent_switches()] == ["low_accept", "quiet"]


def test_quiet_return_waits_for_dwell_and_stays_below_off_at() -> None:
    p = floor_policy(dwell=6, off_at=8, on_at=4, min_accept=0.0, accept_slope=0.5)
    run(p, [6] * 5, accept=2.0)  # floor 3.0 at 6 requests: off at step 5, mean 2.0
    assert p.state()["reason"] == "low_accept" and p.recent_switches()[0].step == 5
    assert run(p, [1] * 5) == [0] * 5, "dwell: six steps from the switch, though 1 request clears the floor"
    assert p.decide(8) == 0, "at off_at or above nothing turns it on"
    assert p.decide(1) == 3 and p.state()["reason"] == "quiet"


def test_forced_modes_win_and_auto_resumes() -> None:
    p = SpecPolicy(PolicySettings(dwell=100))
    p.apply({"mode": "off"})
    assert p.decide(1) == 0 and p.state()["reason"] == "forced"
    p.apply({"mode": "on"})
    assert run(p, [500, 500]) == [3, 3]
    p.apply({"mode": "auto"})
    assert p.decide(500) == 3, "dwell counts from the forced switch too"


def test_warm_below_is_a_setting_the_policy_does_not_decide_on() -> None:
    assert PolicySettings().warm_below == 0, "never warm unless the operator says so"
    with pytest.raises(SettingsError) as err:
        PolicySettings().with_changes({"warm_below": -1})
    assert err.value.field == "warm_below" and "between 0 and 1000000" in err.value.message
    cold, warm = SpecPolicy(), SpecPolicy(PolicySettings(warm_below=64))
    sizes = [1, 40, 10, 100, 5, 5, 200, 0]
    assert [cold.decide(n) for n in sizes] == [warm.decide(n) for n in sizes]
    assert warm.state()["settings"]["warm_below"] == 64


def test_settings_are_all_or_nothing_and_name_the_field() -> None:
    p = SpecPolicy()
    before = p.settings
    with pytest.raises(SettingsError) as err:
        p.apply({"off_at": 48, "on_at": 48})
    assert err.value.field == "on_at"
    assert p.settings == before
    with pytest.raises(SettingsError, match="unknown setting"):
        p.apply({"off_at": 48, "bogus": 1})
    assert p.settings == before
    assert p.apply({"off_at": "48", "on_at": 16, "min_accept": "0.8"}).off_at == 48
    assert p.apply({"accept_slope": "0.05"}).accept_slope == 0.05
    assert p.apply({"min_accept": " .5 ", "off_at": "+40"}).min_accept == 0.5
    assert p.apply({"min_accept": "0e3"}).min_accept == 0.0, "a zero written as one is a zero"
    assert p.apply({"off_at": "64.0", "on_at": "1e1"}).on_at == 10, "a whole number written as a decimal"
    with pytest.raises(SettingsError, match="too large to hold"):
        p.apply({"min_accept": 10**400})  # JSON can carry it
    with pytest.raises(SettingsError, match="must be an integer"):
        p.apply({"off_at": "9" * 5000})


@pytest.mark.parametrize("changes", [
    {"steps": 0}, {"off_at": 0}, {"on_at": -1}, {"min_accept": float("nan")}, {"min_accept": 9},
    {"dwell": True}, {"mode": "sometimes"}, {"accept_window": 1.5}, {"off_at": "ten"},
    {"accept_slope": -0.01}, {"accept_slope": 1.5}, {"accept_slope": float("inf")}, {"accept_slope": "steep"},
    {"accept_slope": True}, {"warm_below": -1}, {"warm_below": 1_000_001}, {"warm_below": 2.5},
    {"off_at": "99999999999999999999999"}, {"off_at": "٤٨"}, {"off_at": "1_000"}, {"min_accept": "1e-400"},
    {"min_accept": "0x1p0"}, {"min_accept": "1_0.5"},
    {"warm_below": "some"},
])
def test_bad_values_are_refused(changes: dict) -> None:
    with pytest.raises(SettingsError):
        PolicySettings().with_changes(changes)


def test_wire_round_trip() -> None:
    s = PolicySettings().with_changes({"mode": "off", "off_at": 48, "on_at": 16, "accept_slope": 0.05,
                                       "warm_below": "16"})
    wire = s.to_wire(["mode", "off_at", "on_at", "accept_slope", "warm_below"])
    assert wire == {"specctl_mode": 2, "specctl_off_at": 48, "specctl_on_at": 16, "specctl_accept_slope": 0.05,
                    "specctl_warm_below": 16}
    assert settings_from_wire(PolicySettings(), wire) == s
    assert settings_from_wire(PolicySettings(), s.to_wire()) == s


settings_st = st.builds(
    lambda off_at, gap, dwell, min_accept, slope, window, probe: PolicySettings(
        off_at=off_at, on_at=max(0, off_at - gap), dwell=dwell, min_accept=min_accept, accept_slope=slope,
        accept_window=window, probe_after=probe),
    off_at=st.integers(1, 300), gap=st.integers(1, 300), dwell=st.integers(0, 20),
    min_accept=st.sampled_from([0.0, 0.15, 0.5, 1.5]), slope=st.sampled_from([0.0, 0.0042, 0.05, 0.3]),
    window=st.integers(1, 16), probe=st.integers(1, 50))
inputs_st = st.lists(st.tuples(st.integers(0, 320), st.floats(0, 3)), max_size=300)


@settings(max_examples=150, deadline=None)
@given(settings_st, inputs_st)
def test_two_copies_always_agree(s: PolicySettings, inputs: list[tuple[int, float]]) -> None:
    a, b = SpecPolicy(s), SpecPolicy(s)
    for bs, acc in inputs:
        assert a.decide(bs) == b.decide(bs)
        a.on_verify([acc] * (bs % 7 + 1))
        b.on_verify([acc] * (bs % 7 + 1))
    assert a.state() == b.state()


@settings(max_examples=150, deadline=None)
@given(settings_st, inputs_st)
def test_auto_switches_respect_dwell_and_have_reasons(s: PolicySettings, inputs: list[tuple[int, float]]) -> None:
    p = SpecPolicy(s)
    for bs, acc in inputs:
        if p.decide(bs):
            p.on_verify([acc] * 3)
    steps = [sw.step for sw in p.recent_switches()]
    assert all(b - a >= s.dwell for a, b in zip(steps, steps[1:]))
    assert all(sw.reason in REASONS and sw.reason != "forced" for sw in p.recent_switches())
    assert p.state()["switches"] == len(steps) or len(steps) == 64


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["on", "off"]), st.sampled_from([0.0, 0.05, 0.3]), inputs_st)
def test_forced_mode_is_never_overridden(mode: str, slope: float, inputs: list[tuple[int, float]]) -> None:
    p = SpecPolicy(PolicySettings(min_accept=1.0, accept_slope=slope, accept_window=2, probe_after=1, dwell=0))
    p.apply({"mode": mode})
    for bs, acc in inputs:
        steps = p.decide(bs)
        assert (steps > 0) == (mode == "on")
        p.on_verify([acc])


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=12) | st.from_regex(r"[+-]?[0-9]{0,6}(\.[0-9]{0,4})?([eE][+-]?[0-9]{1,4})?", fullmatch=True))
def test_typed_settings_are_taken_only_as_the_plain_decimal_they_say(text: str) -> None:
    """Whatever an operator types, a setting is refused or holds exactly the number the text spells."""
    for key in ("min_accept", "off_at"):
        try:
            value = check_fields({key: text})[key]
        except SettingsError:
            continue
        assert text.strip().isascii() and "_" not in text
        if key == "off_at":
            assert value == float(text) and isinstance(value, int)
        else:
            assert value == float(text) and math.isfinite(value)
            assert value != 0 or not set(text.lower().partition("e")[0]) & set("123456789"), "no underflow to 0"
