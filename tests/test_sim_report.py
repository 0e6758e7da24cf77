"""The report's own system: 8 RTX PRO 6000 Blackwell at TP 8, GLM-5-NVFP4 (a MoE), EAGLE-3 topk 4.

The preset must look like that machine to an operator (what nvidia-smi shows,
what /server_info says), cost a decode the way a MoE over PCIe costs it, land
on the report's points, and leave the dense presets' arithmetic untouched.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from specctl.runtime.sim.calibrate import points, worst
from specctl.runtime.sim.costs import decode_s, draft_forward_s, experts_touched, spec_s, tree_tokens, weights_read
from specctl.runtime.sim.offline import run_point
from specctl.runtime.sim.presets import get_preset

from support.sim_process import sim_process

REPORT = get_preset("rtx-8gpu-report")
TOPK1 = get_preset("rtx-8gpu-report-topk1")
H200 = get_preset("h200-llama8b")


@pytest.fixture
def report_sim(tmp_path: Path) -> Iterator[str]:
    """The simulator running the report's preset, as a real process on loopback."""
    with sim_process(tmp_path, "--preset", "rtx-8gpu-report", "--load", "idle") as url:
        yield url


def test_the_gpu_panels_read_what_nvidia_smi_shows_on_that_machine(report_sim: str) -> None:
    with httpx.Client(base_url=report_sim, timeout=30) as client:
        gpus = client.get("/sim/gpus").json()
        info = client.get("/server_info").json()
    assert len(gpus) == 8
    for gpu in gpus:
        assert gpu["name"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
        assert gpu["mem_total"] == 97_887 * 2**20  # nvidia-smi: 97887MiB
        assert gpu["power_limit_w"] == 600.0
    assert (info["tp_size"], info["attention_backend"]) == (8, "flashinfer")
    assert (info["speculative_eagle_topk"], info["speculative_num_steps"],
            info["speculative_num_draft_tokens"]) == (4, 2, 16)
    assert "GLM-5" in info["model_path"]


def test_the_moe_shapes_are_glm5s_published_figures() -> None:
    # GLM-5 (arXiv 2602.15763): 75 MoE layers, hidden 6144, expert intermediate 2048, 256 experts, 8 active
    one_expert_all_layers = 3 * 6144 * 2048 * 75
    assert REPORT.params.expert_bytes == pytest.approx(one_expert_all_layers * 0.5625)  # NVFP4: 4.5 bits
    assert (REPORT.params.moe_experts, REPORT.params.moe_active) == (256, 8)
    assert REPORT.params.flops_per_token == pytest.approx(2 * 40e9)  # 40 B active parameters
    all_weights = REPORT.params.weight_bytes + 256 * REPORT.params.expert_bytes
    assert 400e9 < all_weights < 8 * 96e9 * 0.6  # NVFP4 GLM-5 fits 8 x 96 GB with room for the KV cache
    assert REPORT.params.allreduce_count == 2 * 78


def test_a_tree_verify_reads_many_more_experts_than_a_decode() -> None:
    p = REPORT.params
    assert experts_touched(p, 1) == pytest.approx(8)
    assert 95 < experts_touched(p, 16) < 110  # 16 tree tokens: ~102 of 256 experts a layer
    assert experts_touched(p, 4096) == pytest.approx(256, rel=1e-6)
    assert weights_read(p, 16) > 4 * weights_read(p, 1)
    # so a verify of the 16-token tree costs far more than a 4-token chain's
    assert spec_s(p, 1, 600, 2, topk=4, draft_tokens=16) > 1.5 * spec_s(p, 1, 600, 3)


def test_tree_tokens_follow_sglangs_draft_tree() -> None:
    assert tree_tokens(3, 1) == 4
    assert tree_tokens(2, 4, 16) == 16
    assert tree_tokens(2, 4) == 1 + 4 + 16
    assert tree_tokens(2, 4, 64) == 21  # no more than the draft steps produce
    assert tree_tokens(0, 4, 16) == 1


def test_dense_presets_keep_their_arithmetic_exactly() -> None:
    p = H200.params
    assert experts_touched(p, 256) == 0.0
    for bs, ctx in ((1, 700), (64, 40_000), (256, 180_000)):
        gemm = max(p.weight_bytes / p.mem_bw, bs * p.flops_per_token / p.compute)
        assert decode_s(p, bs, ctx) == p.step_overhead_s + bs * p.req_overhead_s + gemm + ctx * p.decode_kv_s
        tokens = bs * 4
        verify_gemm = max(p.weight_bytes / p.mem_bw, tokens * p.flops_per_token / p.compute)
        expected = (3 * draft_forward_s(p, bs, ctx)
                    + (p.step_overhead_s + bs * p.req_overhead_s + verify_gemm + ctx * p.verify_kv_s)
                    + draft_forward_s(p, tokens, ctx))
        assert spec_s(p, bs, ctx, 3) == expected


def test_the_report_lands_on_its_four_points_and_the_tuned_single_stream() -> None:
    rows = points(REPORT)
    assert {(series, c) for series, c, _, _ in rows} == {("nospec", 1), ("nospec", 128), ("eagle3", 1),
                                                       ("eagle3", 128)}
    assert worst(rows) < 0.05
    tuned = points(TOPK1)
    assert ("eagle3", 1, 96.1) in {(s, c, m) for s, c, m, _ in tuned}
    assert worst(tuned) < 0.05


def test_on_the_report_system_the_tree_loses_to_no_speculation_at_every_load() -> None:
    for c in (1, 16, 128):
        on = run_point(REPORT, c, "on", warmup_s=REPORT.warmup_s, window_s=REPORT.window_s).tok_s
        nospec = run_point(REPORT, c, "nospec", warmup_s=REPORT.warmup_s, window_s=REPORT.window_s).tok_s
        assert on < 0.9 * nospec, c


def test_topk1_with_specctl_auto_beats_the_static_tree_at_every_load() -> None:
    # docs/sglang-plugin.md: modelled, at the accept length the tuned single stream implies (2.02)
    for c in (1, 16, 128):
        tree = run_point(REPORT, c, "on", warmup_s=REPORT.warmup_s, window_s=REPORT.window_s).tok_s
        auto = run_point(TOPK1, c, "auto", warmup_s=TOPK1.warmup_s, window_s=TOPK1.window_s).tok_s
        assert auto > 1.1 * tree, c


@pytest.mark.bench  # runs a bench/ script
def test_the_topk_bench_prints_the_comparison_and_refuses_bad_input() -> None:
    bench = Path(__file__).resolve().parents[1] / "bench" / "topk_compare.py"
    out = subprocess.run([sys.executable, str(bench), "--concurrency", "1", "--accept-lens", "2.02"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith("| 1 |"))
    ratio = float(row.strip("| ").split(" | ")[-1])
    assert ratio > 1.1  # chain + specctl over the static tree at one request
    bad = subprocess.run([sys.executable, str(bench), "--accept-lens", "9"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "between 1 and 4" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.bench  # runs a bench/ script
def test_the_topk_bench_predicts_the_h200_tree_run_with_the_reports_tree_flags() -> None:
    """--system h200-triton: the GPU bench's tree phase, predicted; the chain under specctl wins under load."""
    bench = Path(__file__).resolve().parents[1] / "bench" / "topk_compare.py"
    out = subprocess.run([sys.executable, str(bench), "--system", "h200-triton", "--concurrency", "1,128",
                          "--accept-lens", "2.8"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("tree: one H200, Llama-3.1-8B-Instruct shapes, EAGLE-3 head (topk 4, 2 steps, "
                                 "16 draft tokens), Triton attention")
    assert "accept length 2.7 (assumed)" in out.stdout.splitlines()[0]
    ratios = {int(line.split(" | ")[0].strip("| ")): float(line.strip("| ").split(" | ")[-1])
              for line in out.stdout.splitlines() if line.startswith(("| 1 |", "| 128 |"))}
    assert ratios[128] > 1.5, "at 128 requests specctl's off state serves what no speculation serves"
    assert ratios[1] < ratios[128], "alone, the tree's extra candidates are worth the most"
    bad = subprocess.run([sys.executable, str(bench), "--system", "h200-triton", "--tree-accept", "3.5"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "between 1 and 3" in bad.stderr and "Traceback" not in bad.stderr
