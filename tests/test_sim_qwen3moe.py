"""h200-qwen3moe: the Triton H200 with a Qwen3-30B-A3B-shaped target, calibrated to its real-token sitting.

Written as a prediction before the first run, fitted to it (whose windows decoded
SGLang's fixed token id 100), then refitted to the eighth sitting's, which decoded
real tokens. The preset must be known wherever presets are chosen, be
Qwen3-30B-A3B's shapes on h200-llama8b's machine with only the fitted parameters
changed besides, land on the sitting's windows (where static crosses under no
speculation, too), and show the cost a MoE verify pays and a dense one does not:
at one request a verify of 4 tokens reaches more experts than a decode of one, so
it reads more weights; at 64 requests nearly every expert is read either way.
"""

from __future__ import annotations

import ast
import csv
import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from specctl.runtime.core.settings import PolicySettings
from specctl.runtime.core.thresholds import BY_BACKEND, MOE_BY_BACKEND, for_backend
from specctl.runtime.sim.calibrate import crossover, predicted, table
from specctl.runtime.sim.calibrate import main as calibrate_main
from specctl.runtime.sim.costs import decode_s, experts_touched, gemm_s, spec_s, weights_read
from specctl.runtime.sim.offline import run_point
from specctl.runtime.sim.presets import DEFAULT_PRESET, PRESETS, get_preset

from support.sim_process import sim_process

MOE = get_preset("h200-qwen3moe")
TRITON = get_preset("h200-llama8b")


def test_it_is_listed_and_calibrated_to_the_real_token_sittings() -> None:
    assert "h200-qwen3moe" in PRESETS and DEFAULT_PRESET == "h200-llama8b"
    assert all(p.calibrated for p in PRESETS.values())
    assert {series: sorted(values) for series, values in MOE.measured.items()} == {
        "nospec": [1, 4, 16, 32, 64, 96, 128, 192, 256], "eagle3": [1, 4, 16, 32, 64, 96, 128, 192, 256]}
    assert all(f in MOE.source for f in ("triton-realtok-sweep2.csv", "triton-newrow-{a,b,c}.csv",
                                         "triton-crossover.csv")) and "real tokens" in MOE.source
    assert [c.label for c in MOE.checks] == ["no-spec server", "no-spec server, eighth sitting",
                                             "token 100 (the first fit's basis)"]
    assert "UNCALIBRATED" not in MOE.description and "Qwen3-30B-A3B" in MOE.description
    assert (MOE.attention_backend, MOE.steps, MOE.topk, MOE.accept_len, MOE.tp_size) == ("triton", 3, 1, 2.8, 1)
    assert MOE.gpu == TRITON.gpu and MOE.workload == TRITON.workload


# Left out of the basis (docs/benchmarks.md): the ninth sitting's windows of a cold first switch to off (the
# server paused 7-10 s compiling) and the tenth's first window after its start (on at 96, round 0)
LEFT_OUT = {("triton-newrow-a.csv", "1", "off"), ("triton-newrow-a.csv", "1", "auto"),
            ("triton-newrow-b.csv", "1", "off"), ("triton-newrow-b.csv", "128", "off"),
            ("triton-crossover.csv", "96", "on", "0")}
SITTINGS = (("triton-realtok-sweep2.csv",), ("triton-newrow-a.csv", "triton-newrow-b.csv", "triton-newrow-c.csv"),
            ("triton-crossover.csv",))


def sitting_means(files: tuple[str, ...]) -> dict[str, dict[int, float]]:
    """One sitting's mean window a state and concurrency: forced off and auto's off windows, forced on and
    auto's on windows."""
    states: dict[str, dict[int, list[float]]] = {"nospec": {}, "eagle3": {}}
    for name in files:
        path = Path(__file__).parents[1] / "bench/gpu/results/moe" / name
        for row in csv.DictReader(path.open()):
            key = (name, row["concurrency"], row["mode"])
            if key in LEFT_OUT or (*key, row["round"]) in LEFT_OUT:
                continue
            on = row["mode"] == "on" or (row["mode"] == "auto" and float(row["steps"]) > 0)
            states["eagle3" if on else "nospec"].setdefault(int(row["concurrency"]), []).append(float(row["tok_s"]))
    return {series: {c: sum(v) / len(v) for c, v in by_c.items()} for series, by_c in states.items()}


def test_the_basis_is_the_mean_over_three_sittings_of_each_sittings_raw_windows() -> None:
    sittings = [sitting_means(files) for files in SITTINGS]
    expected = {}
    for series in ("nospec", "eagle3"):
        points = sorted({c for s in sittings for c in s[series]})
        expected[series] = {c: round(sum(s[series][c] for s in sittings if c in s[series])
                                     / sum(1 for s in sittings if c in s[series]), 1) for c in points}
    assert MOE.measured == expected


def test_it_is_qwen3_30b_a3b_on_the_triton_h200_and_nothing_else_changed() -> None:
    p = MOE.params
    assert (p.moe_experts, p.moe_active) == (128, 8)
    assert p.expert_bytes == 3 * 2048 * 768 * 48 * 2  # gate, up, down of one expert, 48 layers, bf16
    all_params = (p.weight_bytes + 128 * p.expert_bytes) / 2
    assert all_params == pytest.approx(30.53e9, rel=1e-3)  # docs/benchmarks.md: 30.53 B, 56.9 GiB
    assert p.flops_per_token / 2 == pytest.approx(3.35e9, rel=2e-3)  # 3.35 B active a token
    assert p.decode_kv_s == pytest.approx(TRITON.params.decode_kv_s * 96 / 128)  # KV 96 KiB a token, not 128
    changed = {f.name for f in dataclasses.fields(p) if getattr(p, f.name) != getattr(TRITON.params, f.name)}
    counted = {"weight_bytes", "flops_per_token", "moe_experts", "moe_active", "expert_bytes", "decode_kv_s",
               "draft_weight_bytes", "draft_flops_per_token", "prefill_attn_s"}
    fitted = {"moe_spread": 1.06, "step_overhead_s": 3.09e-3, "verify_kv_s": 0.95e-6, "req_overhead_s": 117e-6,
              "draft_overhead_s": 0.077e-3, "prefill_overhead_s": 7.7e-3}  # docs/simulator.md, each's why
    assert changed == counted | set(fitted)  # bandwidth, compute, the draft's KV term and chunks are Triton's
    assert {key: getattr(p, key) for key in fitted} == fitted
    assert MOE.kv_pool_tokens == 669_000  # moe.md's pool without speculation, as h200-llama8b carries its


def test_at_one_request_a_verify_reads_more_weights_than_a_decode_on_the_moe_only() -> None:
    moe, dense = MOE.params, TRITON.params
    uniform = dataclasses.replace(moe, moe_spread=1.0)  # every token its own route: the prediction's law
    assert experts_touched(uniform, 1) == experts_touched(moe, 1) == pytest.approx(8)
    assert experts_touched(uniform, 4) == pytest.approx(29.12, abs=0.01)  # moe.md's table: 29 of 128
    assert experts_touched(moe, 4) == pytest.approx(30.27, abs=0.01)  # 4.24 draws at the fitted spread 1.06
    assert experts_touched(moe, 0) == 0.0 and experts_touched(dense, 4) == 0.0
    assert weights_read(uniform, 4) > 2 * weights_read(uniform, 1)
    assert weights_read(moe, 4) > 2.2 * weights_read(moe, 1) and gemm_s(moe, 4) > 2.2 * gemm_s(moe, 1)
    assert weights_read(dense, 4) == weights_read(dense, 1) and gemm_s(dense, 4) == gemm_s(dense, 1)
    # at 64 requests a decode already reads 126 of 128 experts: the verify's 256 tokens read 2 % more
    assert weights_read(uniform, 4 * 64) == pytest.approx(weights_read(uniform, 64), rel=0.02)
    assert weights_read(moe, 4 * 64) == pytest.approx(weights_read(moe, 64), rel=0.03)
    # so a speculative cycle over a decode step costs more on the MoE at one request, less at 64
    ctx = 640  # tokens a request holds, mean of the workload
    assert (spec_s(moe, 1, ctx, 3) / decode_s(moe, 1, ctx)) > \
        1.15 * (spec_s(dense, 1, ctx, 3) / decode_s(dense, 1, ctx))
    assert (spec_s(moe, 64, 64 * ctx, 3) / decode_s(moe, 64, 64 * ctx)) < \
        (spec_s(dense, 64, 64 * ctx, 3) / decode_s(dense, 64, 64 * ctx))


def test_it_gains_alone_and_crosses_over_where_the_gpu_did() -> None:
    # the three sittings (real tokens): static / forced off 1.49 at one request, 1.56 at 4, 1.27 at 16, 1.16
    # at 64, 1.14 at 96, 0.91 at 128, 0.77 at 192: the crossover between 96 and 128
    rows = predicted(MOE, (1, 4, 16, 64, 128, 256))
    ratio = {c: static / none for c, none, static in rows}
    assert 1.4 < ratio[1] < 1.7 and 1.2 < ratio[4] < 1.45 and 1.3 < ratio[16] < 1.5 and ratio[64] > 1.05
    assert 0.85 < ratio[128] < 1.0 and ratio[256] < ratio[128]
    assert 90 <= crossover(MOE, predicted(MOE)) < 128
    # Llama-8B on the same machine gains more alone, and crosses over far sooner: a decode of 64
    # requests reads nearly every expert, so a MoE's verify of 4 tokens a request costs little more
    (_, dense_none_1, dense_static_1), = predicted(TRITON, (1,))
    assert dense_static_1 / dense_none_1 > ratio[1] + 0.2
    assert crossover(TRITON, predicted(TRITON)) < 48


def test_calibrate_prints_the_fit_and_a_preset_without_measurements_its_prediction(
        capsys: pytest.CaptureFixture[str]) -> None:
    text = table(MOE)
    assert "worst point: 12.1 % off (tolerance 12.5 %)" in text
    assert "check (not fitted): no-spec server" in text and "check (not fitted): token 100" in text
    assert calibrate_main(["--preset", "h200-qwen3moe"]) == 0
    assert capsys.readouterr().out.strip() == text
    prediction = table(dataclasses.replace(MOE, measured={}, checks=()))  # as it stood before the sitting
    assert "UNCALIBRATED" in prediction and "| static / none |" in prediction
    assert "static falls under no speculation from c = " in prediction


@pytest.fixture
def moe_sim(tmp_path: Path) -> Iterator[str]:
    """The simulator serving the MoE preset, as a real process on loopback."""
    with sim_process(tmp_path, "--preset", "h200-qwen3moe", "--load", "idle") as url:
        yield url


def test_the_simulator_serves_with_the_moe_preset(moe_sim: str) -> None:
    with httpx.Client(base_url=moe_sim, timeout=60) as client:
        info = client.get("/server_info").json()
        answer = client.post("/generate", json={"input_ids": list(range(40)),
                                                "sampling_params": {"max_new_tokens": 12}}).json()
    assert info["attention_backend"] == "triton" and "Qwen3-30B-A3B" in info["model_path"]
    assert info["speculative_num_steps"] == 3
    assert answer["meta_info"]["completion_tokens"] == 12 and len(answer["output_ids"]) == 12
    assert answer["meta_info"]["spec_accept_length"] > 1.0  # alone in the batch: speculation on


def test_the_moe_row_runs_the_better_state_where_the_gpu_measured_it_and_the_dense_row_does_not() -> None:
    # The real-token sitting: on wins 1.34x at 4 requests and 1.45x at 32, off leads at 256. The dense
    # Triton row's floor (0.3 + 0.05 x) passes 2.8's 1.8 accepted drafts at 30 requests and turns
    # speculation off at 32; the MoE row (thresholds.MOE_BY_BACKEND) keeps it on there, off at 256.
    moe_row, dense_row = for_backend("triton", MOE.params.moe_experts), for_backend("triton")
    assert moe_row != dense_row
    for c, state in ((4, 1.0), (32, 1.0), (256, 0.0)):
        on = run_point(MOE, c, "on", warmup_s=10, window_s=30).tok_s
        off = run_point(MOE, c, "off", warmup_s=10, window_s=30).tok_s
        auto = run_point(MOE, c, "auto", settings=moe_row, warmup_s=10, window_s=30)
        assert auto.on_fraction == pytest.approx(state, abs=0.05) and auto.tok_s >= 0.95 * max(on, off), (c, auto)
    dense = run_point(MOE, 32, "auto", settings=dense_row, warmup_s=10, window_s=30)
    assert dense.on_fraction == 0.0 and dense.tok_s < 0.8 * run_point(MOE, 32, "on", warmup_s=10, window_s=30).tok_s


ENVELOPE = Path(__file__).resolve().parents[1] / "bench" / "policy_envelope.py"


@pytest.mark.bench  # runs a bench/ script
def test_the_envelope_runs_with_sglangs_acceptance_law_without_depths() -> None:
    out = subprocess.run([sys.executable, str(ENVELOPE), "--preset", "h200-qwen3moe", "--sglang-law"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "accept length 2.8 (SGLang's simulated acceptance)" in out.stdout
    assert "the triton row for a MoE applies" in out.stdout and "goal >= 0.95: met at every point" in out.stdout


def auto_settings(stdout: str, preset: str) -> dict[str, Any]:
    """The settings a table of the envelope ran auto with, as its header prints them."""
    [line] = [line for line in stdout.splitlines() if line.startswith(f"preset {preset}, accept length")]
    return ast.literal_eval(line.partition("auto settings: ")[2])


@pytest.mark.bench  # runs a bench/ script
def test_the_envelope_picks_each_presets_row_as_the_supervisor_would() -> None:
    # The MoE on Triton's H200 gets the row measured on a MoE (thresholds.for_server), the report's GLM-5
    # on RTX PRO 6000s keeps the defaults for both reasons; the dense FlashInfer H200 gets its row. Each
    # preset's line says which, and why.
    out = subprocess.run([sys.executable, str(ENVELOPE), "--preset", "h200-qwen3moe", "--preset",
                          "rtx-8gpu-report-topk1", "--preset", "h200-llama8b-flashinfer", "--sglang-law"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert ("preset h200-qwen3moe (triton, NVIDIA H200, a MoE of 128 experts): the triton row for a MoE "
            f"applies: {MOE_BY_BACKEND['triton']}") in out.stdout
    assert ("preset h200-llama8b-flashinfer (flashinfer, NVIDIA H200, dense): the flashinfer row applies: "
            f"{BY_BACKEND['flashinfer']}") in out.stdout
    rtx = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert (f"preset rtx-8gpu-report-topk1 (flashinfer, {rtx}, a MoE of 256 experts): the flashinfer thresholds "
            f"were measured on an H200, this server runs on {rtx}; also, the flashinfer thresholds were measured "
            "on a dense model and this server's target is a MoE (256 experts)") in out.stdout
    defaults = PolicySettings().as_dict()
    report = auto_settings(out.stdout, "rtx-8gpu-report-topk1")
    assert {key: report[key] for key in BY_BACKEND["triton"]} == {key: defaults[key] for key in BY_BACKEND["triton"]}
    moe = auto_settings(out.stdout, "h200-qwen3moe")
    assert {key: moe[key] for key in MOE_BY_BACKEND["triton"]} == MOE_BY_BACKEND["triton"]
    dense = auto_settings(out.stdout, "h200-llama8b-flashinfer")
    assert {key: dense[key] for key in BY_BACKEND["flashinfer"]} == BY_BACKEND["flashinfer"]


@pytest.mark.bench  # runs a bench/ script
def test_the_operators_set_wins_over_the_row_group_by_group_in_the_envelope() -> None:
    out = subprocess.run([sys.executable, str(ENVELOPE), "--preset", "h200-llama8b-flashinfer", "--sglang-law",
                          "--set", "off_at=64", "on_at=16"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    floor = {key: BY_BACKEND["flashinfer"][key] for key in ("min_accept", "accept_slope")}
    assert f"the flashinfer row applies: {floor}" in out.stdout
    settings = auto_settings(out.stdout, "h200-llama8b-flashinfer")
    assert (settings["off_at"], settings["on_at"]) == (64, 16) and {k: settings[k] for k in floor} == floor


@pytest.mark.bench  # runs a bench/ script
def test_a_row_kept_off_the_moe_is_still_run_there_when_set_by_hand() -> None:
    """How docs/benchmarks.md judges the Triton row on the MoE: the whole row with --set."""
    row = BY_BACKEND["triton"]
    out = subprocess.run([sys.executable, str(ENVELOPE), "--preset", "h200-qwen3moe", "--sglang-law", "--set",
                          *(f"{key}={value:g}" for key, value in row.items())],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "preset h200-qwen3moe (triton, NVIDIA H200, a MoE of 128 experts): every group of the row is set by " \
           "hand (--set)" in out.stdout
    settings = auto_settings(out.stdout, "h200-qwen3moe")
    assert {key: settings[key] for key in row} == row


def test_a_bench_asks_the_supervisors_rule_for_a_presets_row() -> None:
    """sim/rows.py: what policy_envelope and topk_compare run auto with, one rule for both."""
    from specctl.runtime.core.thresholds import for_backend
    from specctl.runtime.sim.rows import supervised_settings

    dense, said = supervised_settings(PRESETS["h200-llama8b"], {})
    assert dense == for_backend("triton") and "the triton row applies" in said
    report, said = supervised_settings(PRESETS["rtx-8gpu-report-topk1"], {"dwell": 4})
    assert report == {"dwell": 4}
    assert "RTX PRO 6000" in said and "MoE" in said and "defaults stay" in said
    moe, said = supervised_settings(PRESETS["h200-qwen3moe"], {})
    assert moe == for_backend("triton", 128) == MOE_BY_BACKEND["triton"] and "row for a MoE applies" in said
