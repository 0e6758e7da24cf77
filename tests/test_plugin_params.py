"""The params adapter, the settings path and the plugin's start-up, without SGLang."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specctl.runtime.core.adaptive_config import (
    bucket_sizes,
    build_config,
    candidate_steps,
    read_candidate_steps,
    write_config,
)
from specctl.runtime.core.settings import PolicySettings, SettingsError
from specctl.runtime.sglang_plugin import params as params_module
from specctl.runtime.sglang_plugin.params import SpecctlParams, active
from specctl.runtime.sglang_plugin.plugin import load, settings_from_env
from specctl.runtime.sglang_plugin.sglang_access import SpecctlPluginError, release_for

QUICK = PolicySettings(steps=3, off_at=8, on_at=4, dwell=0)


@pytest.fixture
def config(tmp_path: Path) -> str:
    return str(write_config(tmp_path / "adaptive.json", 3))


def make(config: str, settings: PolicySettings = QUICK, **kw) -> SpecctlParams:
    return SpecctlParams(3, config, settings=settings, **kw)


# -- the generated config ------------------------------------------------------


def test_config_lists_off_and_on_in_every_bucket_up_to_the_largest_graph() -> None:
    config = build_config(5, bucket_sizes(160))
    assert list(config) == ["1", "2", "4", "8", "16", "32", "64", "128", "256"]
    assert all(entry == {"candidate_steps": [0, 5]} for entry in config.values())
    assert candidate_steps(config) == [0, 5]


def test_written_config_reads_back(tmp_path: Path) -> None:
    path = write_config(tmp_path / "sub" / "cfg.json", 4)
    assert read_candidate_steps(path) == [0, 4]
    assert json.loads(path.read_text())["512"] == {"candidate_steps": [0, 4]}
    assert [p.name for p in path.parent.iterdir()] == ["cfg.json"]


@pytest.mark.parametrize("steps", [0, -1, True, 2.0])
def test_config_refuses_steps_that_are_not_positive_integers(steps: object) -> None:
    with pytest.raises(ValueError, match="steps"):
        build_config(steps)  # type: ignore[arg-type]


def test_config_must_start_at_batch_size_one() -> None:
    with pytest.raises(ValueError, match="batch size 1"):
        build_config(3, [8, 16])


# -- the AdaptiveSpeculativeParams protocol ------------------------------------


def test_candidates_come_from_the_config_and_every_state_gets_every_graph(config: str) -> None:
    p = make(config)
    assert p.candidate_steps == [0, 3]
    assert p.cuda_graph_bs_for_step(0) is None  # CUDA graphs off until SGLang says otherwise
    p.set_cuda_graph_bs([8, 1, 4, 2])
    assert p.cuda_graph_bs_for_step(0) == [1, 2, 4, 8]
    assert p.cuda_graph_bs_for_step(3) == [1, 2, 4, 8]


def test_steps_follow_the_policy_per_batch(config: str) -> None:
    p = make(config)
    assert [p.get_steps_for_batch(bs) for bs in (1, 7, 8, 5, 4)] == [3, 3, 0, 0, 3]
    assert p.state()["switches"] == 2
    assert p.state()["recent_switches"][0]["reason"] == "load"


def test_verify_never_asks_for_a_switch_and_feeds_acceptance(config: str) -> None:
    p = make(config)
    p.get_steps_for_batch(2)
    assert p.on_verify_complete([3, 1], 2) is None
    assert p.state()["accept_mean"] == 2.0
    assert p.state()["verifies"] == 1


def test_zeros_from_a_batch_that_did_not_draft_are_not_acceptance(config: str) -> None:
    p = make(config)
    p.get_steps_for_batch(2)  # drafted (3 steps)
    p.get_steps_for_batch(9)  # off: overlap launches it before batch 1's result arrives
    p.on_verify_complete([2, 2], 2)
    p.on_verify_complete([0] * 9, 9)
    assert p.state()["accept_mean"] == 2.0
    assert p.state()["verifies"] == 1


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(st.integers(0, 300), max_size=80),
    modes=st.lists(st.sampled_from([0, 1, 2]), max_size=5),
)
def test_only_steps_of_the_config_are_ever_returned(tmp_path_factory, batches, modes) -> None:
    path = str(write_config(tmp_path_factory.mktemp("cfg") / "c.json", 3))
    p = make(path)
    for i, bs in enumerate(batches):
        if modes and i % 7 == 0:
            p.apply_settings(p.validate_wire({"specctl_mode": modes[i % len(modes)]}))
        steps = p.get_steps_for_batch(bs)
        assert steps in (0, 3)
        p.on_verify_complete([min(1, steps)] * max(bs, 1), bs)


def test_settings_steps_must_have_a_runtime_state(config: str) -> None:
    with pytest.raises(SettingsError) as err:
        make(config, PolicySettings(steps=5))
    assert err.value.field == "steps"


def test_config_without_an_off_state_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "no-off.json"
    path.write_text(json.dumps({"1": {"candidate_steps": [1, 3]}}))
    with pytest.raises(ValueError, match="include 0"):
        SpecctlParams(3, str(path))


def test_a_config_path_is_required() -> None:
    with pytest.raises(ValueError, match="--speculative-adaptive-config"):
        SpecctlParams(3, None)


def test_the_last_built_params_is_the_active_one(config: str, monkeypatch) -> None:
    monkeypatch.setattr(params_module, "_active", None)
    assert active() is None
    p = make(config)
    assert active() is p


# -- settings: wire dict -> applied or refused ---------------------------------


def test_wire_settings_apply_at_the_next_batch(config: str) -> None:
    p = make(config)
    new = p.validate_wire({"specctl_mode": 2, "specctl_off_at": 48, "pp_max_micro_batch_size": 4})
    assert (new.mode, new.off_at) == ("off", 48)
    assert p.policy.settings.mode == "auto"  # validation alone changes nothing
    p.apply_settings(new)
    assert p.get_steps_for_batch(1) == 0
    assert p.state()["settings"]["off_at"] == 48


def test_keys_that_only_fit_together_are_accepted_together(config: str) -> None:
    p = make(config)
    new = p.validate_wire({"specctl_on_at": 70, "specctl_off_at": 80})
    assert (new.on_at, new.off_at) == (70, 80)


@pytest.mark.parametrize(
    ("wire", "field"),
    [
        ({"specctl_on_at": 9}, "on_at"),  # not below off_at (8)
        ({"specctl_mode": 7}, "mode"),
        ({"specctl_steps": 5}, "steps"),  # no runtime state for 5
        ({"specctl_dwell": 1.5}, "dwell"),
        ({"specctl_off_at": 100, "specctl_bogus": 1}, "bogus"),
    ],
)
def test_a_refused_change_names_the_field_and_changes_nothing(config: str, wire: dict, field: str) -> None:
    p = make(config)
    before = p.state()
    with pytest.raises(SettingsError) as err:
        p.validate_wire(wire)
    assert err.value.field == field
    assert p.state() == before


# -- the exported gauges' observer --------------------------------------------


def test_observer_hears_each_change_once(config: str) -> None:
    heard: list[tuple[bool, int, int]] = []
    p = make(config, observer=lambda s: heard.append((s["on"], s["steps"], s["switches"])))
    for bs in (1, 2, 9, 9, 9, 1):
        p.get_steps_for_batch(bs)
    assert heard == [(True, 3, 0), (False, 0, 1), (True, 3, 2)]


def test_each_switch_is_logged_with_the_step_it_acted_at(config: str, caplog: pytest.LogCaptureFixture) -> None:
    from specctl.runtime.sglang_plugin.plugin import log_switch

    p = make(config, observer=log_switch)
    with caplog.at_level(logging.INFO, logger="specctl.plugin"):
        for bs in (1, 2, 9, 9, 9, 1):
            p.get_steps_for_batch(bs)
        p.apply_settings(p.validate_wire({"specctl_mode": "off"}))
        p.get_steps_for_batch(1)
    assert [r.getMessage() for r in caplog.records] == [
        "specctl: switch 1 at step 3: speculation off (load), batch 9",
        "specctl: switch 2 at step 6: speculation on (quiet), batch 1",
        "specctl: switch 3 at step 7: speculation off (forced), batch 1"]


def test_gauges_reach_a_multiprocess_collector(tmp_path: Path) -> None:
    # prometheus_client picks its multiprocess mode at import, so this runs in a fresh
    # interpreter with the folder set first, as SGLang's scheduler processes are.
    script = """
import os, sys
os.environ["PROMETHEUS_MULTIPROC_DIR"] = sys.argv[1]
from specctl.runtime.sglang_plugin.gauges import metrics_observer
metrics_observer()({"on": False, "steps": 0, "switches": 5})
from prometheus_client import CollectorRegistry, generate_latest, multiprocess
registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry)
print(generate_latest(registry).decode())
"""
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, check=True)
    samples = {line.split()[0]: float(line.split()[1])
               for line in out.stdout.splitlines() if line.startswith("specctl:")}
    assert samples == {"specctl:spec_on": 0.0, "specctl:spec_steps": 0.0, "specctl:spec_switches_total": 5.0}


def test_no_gauges_without_sglang_metrics(monkeypatch) -> None:
    from specctl.runtime.sglang_plugin.gauges import metrics_observer

    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    assert metrics_observer() is None


# -- plugin start-up -----------------------------------------------------------


def test_settings_from_env() -> None:
    assert settings_from_env({}) == PolicySettings()
    got = settings_from_env({"SPECCTL_SETTINGS": '{"mode": "off", "steps": 4, "off_at": 40}'})
    assert (got.mode, got.steps, got.off_at) == ("off", 4, 40)


@pytest.mark.parametrize(
    ("text", "words"),
    [("{nope", "not JSON"), ("[1]", "JSON object"), ('{"on_at": 99}', "on_at"), ('{"color": 1}', "color")],
)
def test_bad_env_settings_stop_the_launch(text: str, words: str) -> None:
    with pytest.raises(SpecctlPluginError) as err:
        settings_from_env({"SPECCTL_SETTINGS": text})
    assert isinstance(err.value, SystemExit)  # passes through SGLang's `except Exception`
    assert words in str(err.value.code)


def test_unsupported_release_is_refused_by_name() -> None:
    with pytest.raises(SpecctlPluginError, match=r"0\.5\.20 is not supported \(supported: 0\.5\.17, 0\.5\.23\)"):
        release_for("0.5.20")


def test_load_is_inert_without_the_launchers_variable(monkeypatch) -> None:
    monkeypatch.delenv("SPECCTL_PLUGIN", raising=False)
    load()
    assert not [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]


# -- several depths ----------------------------------------------------------------

DEPTH_COSTS = {"source": "test", "buckets": [1, 16, 48, 96], "depths": [0, 1, 2, 3],
               "step_ms": [[6, 7, 8, 8.6], [8, 10.5, 12.5, 15], [14, 19, 26, 32], [20, 36, 48, 60]]}
DEPTHS = PolicySettings(candidates=(0, 1, 2, 3), off_at=1000, on_at=999, dwell=2, min_accept=0.3)


@pytest.fixture
def depth_config(tmp_path: Path) -> str:
    return str(write_config(tmp_path / "adaptive-depths.json", 3, candidates=[0, 1, 2, 3]))


def test_config_lists_exactly_the_candidates_in_every_bucket() -> None:
    config = build_config(3, bucket_sizes(16), candidates=[3, 0, 1, 2])
    assert {tuple(v["candidate_steps"]) for v in config.values()} == {(0, 1, 2, 3)}
    assert candidate_steps(config) == [0, 1, 2, 3]
    assert build_config(3, [1]) == {"1": {"candidate_steps": [0, 3]}}  # the default is unchanged


@pytest.mark.parametrize("candidates", [[1, 2, 3], [0, 1, 2]])
def test_config_candidates_need_off_and_steps(candidates: list[int]) -> None:
    with pytest.raises(ValueError, match="must hold 0 and steps"):
        build_config(3, [1], candidates=candidates)


def test_candidates_without_a_runtime_state_are_refused(config: str, depth_config: str) -> None:
    with pytest.raises(SettingsError) as err:
        make(config, DEPTHS)  # the config built only 0 and 3
    assert err.value.field == "candidates"
    p = make(depth_config, DEPTHS)
    with pytest.raises(SettingsError) as err:
        p.validate_wire({"specctl_candidates": 0b111001})  # 0, 3, 4, 5
    assert err.value.field == "candidates" and "[4, 5]" in err.value.message
    p.apply_settings(p.validate_wire({"specctl_candidates": 0b1011}))  # a subset is fine: 0, 1, 3
    assert p.state()["settings"]["candidates"] == [0, 1, 3]


def test_the_depth_follows_the_load_among_the_candidates(depth_config: str) -> None:
    from specctl.runtime.core.depth_model import costs_from_dict

    p = make(depth_config, DEPTHS, costs=costs_from_dict(DEPTH_COSTS))
    pattern = [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]
    seen = []
    for i, bs in enumerate([1] * 100 + [16] * 100 + [48] * 100):
        depth = p.get_steps_for_batch(bs)
        seen.append(depth)
        p.on_verify_complete([min(depth, pattern[(i + j) % 10]) for j in range(bs)], bs)
    assert (seen[99], seen[199], seen[299]) == (3, 2, 1)
    assert {sw["reason"] for sw in p.state()["recent_switches"]} == {"depth"}


def test_a_verify_counts_at_the_depth_its_batch_drafted(depth_config: str) -> None:
    """Overlap: batch k+1 is decided (at a new depth) before batch k's result comes back."""
    p = make(depth_config, DEPTHS.with_changes({"mode": "on", "steps": 1}))
    p.get_steps_for_batch(8)  # drafts 1
    p.apply_settings(p.validate_wire({"specctl_steps": 3}))
    assert p.get_steps_for_batch(8) == 3
    p.on_verify_complete([1] * 8, 8)  # batch 1's: every request accepted its one draft
    assert p.state()["accept_by_depth"]["3"] == 3.0  # seen as depth 1 (deeper unknown), not as 1 of 3


def test_cost_table_from_the_launchers_variable(tmp_path: Path) -> None:
    from specctl.runtime.sglang_plugin.plugin import costs_from_env

    assert costs_from_env({}) is None
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(DEPTH_COSTS))
    costs = costs_from_env({"SPECCTL_DEPTH_COSTS": str(path)})
    assert costs is not None and costs.depths == (0, 1, 2, 3) and costs.source == "test"
    path.write_text('{"buckets": [1]}')
    with pytest.raises(SpecctlPluginError) as err:
        costs_from_env({"SPECCTL_DEPTH_COSTS": str(path)})
    assert isinstance(err.value, SystemExit) and "SPECCTL_DEPTH_COSTS" in str(err.value.code)
    assert "depths, step_ms" in str(err.value.code)


# -- the switch warm-up's hold (switch_warmup.py) ------------------------------


def test_a_held_depth_runs_every_batch_and_leaves_the_policy_as_it_was(config: str) -> None:
    p = make(config)
    p.get_steps_for_batch(2)
    p.on_verify_complete([2, 2], 2)
    before = p.state()
    p.hold(0)
    assert [p.get_steps_for_batch(bs) for bs in (1, 64, 256)] == [0, 0, 0]  # off_at 8 would say the same at 64
    p.hold(3)
    assert [p.get_steps_for_batch(bs) for bs in (1, 64)] == [3, 3]  # auto would be off at 64
    for _ in range(5):
        p.on_verify_complete([0, 0, 0], 3)  # the warm-up's acceptance: not the traffic's
    assert p.state()["held"] == 3
    p.hold(-1)
    after = p.state()
    assert after["held"] is None and after["built"] == [0, 3]
    # the meter timed the step before the hold (it ran at 3); the held steps are not the policy's: not timed
    assert sum(c[0] for depths in after["meter"].values() for c in depths.values()) <= 1
    assert {k: v for k, v in after.items() if k not in ("held", "meter")} == {
        k: v for k, v in before.items() if k not in ("held", "meter")}


@pytest.mark.parametrize("depth", [2, 4, -2, 1.5, True, "0", None])
def test_a_hold_of_a_depth_the_server_did_not_build_is_refused_and_changes_nothing(config: str, depth: object) -> None:
    p = make(config)
    with pytest.raises(SettingsError) as err:
        p.hold(depth)  # type: ignore[arg-type]
    assert err.value.field == "warmup"
    assert p.state()["held"] is None
    assert p.get_steps_for_batch(1) == 3
