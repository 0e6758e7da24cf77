"""Which measured thresholds a server gets: its backend's row, on the GPU and model class it was measured on."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specctl.runtime.core.thresholds import (
    BY_BACKEND,
    MEASURED_ON,
    MOE_BY_BACKEND,
    for_backend,
    for_server,
    for_tree_server,
)

H200 = "NVIDIA H200"
RTX = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


@pytest.mark.parametrize("backend", sorted(BY_BACKEND))
def test_every_row_applies_on_the_gpu_it_was_measured_on(backend: str) -> None:
    assert MEASURED_ON in H200
    assert for_server(backend, [H200] * 8) == (BY_BACKEND[backend], None)


@pytest.mark.parametrize("names", [[RTX] * 8, [H200, "NVIDIA H100 80GB HBM3"]])
def test_a_row_stays_out_where_any_gpu_is_another_and_names_it(names: list[str]) -> None:
    row, why = for_server("flashinfer", names)
    assert row is None and why is not None
    others = sorted(set(names) - {H200})
    assert f"this server runs on {', '.join(others)}" in why and "specctl set" in why


@pytest.mark.parametrize("names", [[], [None], [H200, None]])
def test_a_row_stays_out_where_the_gpus_cannot_be_read(names: list[str | None]) -> None:
    row, why = for_server("fa3", names)
    assert row is None and why is not None and "could not be read" in why


@pytest.mark.parametrize("backend", [None, "trtllm_mha", "aiter"])
def test_an_unmeasured_backend_has_nothing_to_say(backend: str | None) -> None:
    assert for_server(backend, [RTX]) == (None, None)


def test_a_row_that_stays_out_is_said_only_where_the_operator_left_part_of_it_to_it() -> None:
    assert for_server("flashinfer", [RTX], {"off_at": 64, "min_accept": 1.0}) == (None, None), "all set by hand"
    row, why = for_server("flashinfer", [RTX], {"off_at": 64})
    assert row is None and why is not None, "the floor is still the defaults', not the row's: say why"
    assert for_server("flashinfer", [H200], {"off_at": 64, "min_accept": 1.0}) == (BY_BACKEND["flashinfer"], None)


# -- the model class: BY_BACKEND measured with a dense target (Llama-3.1-8B), MOE_BY_BACKEND with a MoE ------

NO_MOE_ROW = sorted(set(BY_BACKEND) - set(MOE_BY_BACKEND))


def test_moe_rows_were_measured_for_triton_and_fa3_and_differ_from_the_dense_ones() -> None:
    assert sorted(MOE_BY_BACKEND) == ["fa3", "triton"] and NO_MOE_ROW == ["flashinfer"]
    assert MOE_BY_BACKEND["triton"] == {"off_at": BY_BACKEND["fa3"]["off_at"], "on_at": BY_BACKEND["fa3"]["on_at"],
                                        "min_accept": 0.62, "accept_slope": 0.0105}
    assert for_backend("triton", 128) == MOE_BY_BACKEND["triton"] != for_backend("triton") == BY_BACKEND["triton"]
    assert for_backend("flashinfer", 128) is None and for_backend("triton", 1) == BY_BACKEND["triton"]


def test_the_fa3_moe_row_never_turns_off_for_load_and_its_floor_stays_under_the_break_even() -> None:
    # docs/benchmarks.md: static won at every load 1-256 at 2.8; h200-qwen3moe-fa3 breaks even at
    # 0.69 accepted drafts at 1 request, 0.90 at 64-128 and 1.05 at 256 (accept_breakeven.py --breakeven)
    row = MOE_BY_BACKEND["fa3"]
    assert for_backend("fa3", 128) == row != BY_BACKEND["fa3"]
    assert row["off_at"] == BY_BACKEND["fa3"]["off_at"] and row["on_at"] == BY_BACKEND["fa3"]["on_at"]
    floor = {c: row["min_accept"] + row["accept_slope"] * c for c in (1, 64, 128, 256)}
    assert floor[1] < 0.69 and floor[64] < 0.90 and floor[128] < 0.90 and floor[256] < 1.05
    assert for_server("fa3", [H200], experts=128) == (row, None)


def test_the_triton_moe_row_leaves_the_choice_to_its_floor_which_stays_under_the_break_even() -> None:
    # docs/benchmarks.md, "Tenth sitting": h200-qwen3moe, refitted to three sittings with real tokens, breaks
    # even at 0.78 accepted drafts at 1 request, 0.97 at 24, 1.07 at 32, 1.43 at 64, 2.06 at 128, 2.49 at 192
    # (accept_breakeven.py --breakeven)
    row = MOE_BY_BACKEND["triton"]
    floor = {c: row["min_accept"] + row["accept_slope"] * c for c in (1, 24, 32, 64, 96, 128, 192)}
    assert floor[1] < 0.78 - 0.1 and floor[24] < 0.97 - 0.09 and floor[32] < 1.07 - 0.1 and floor[64] < 1.43 - 0.1
    assert floor[128] < 2.06 and floor[192] > 2.49  # under the curve to about 150, over it from about 170
    # at the sweeps' accept length 2.8 (1.8 accepted drafts) it turns off between 96 and 128, where the GPU crossed
    assert floor[96] < 1.8 < floor[128]


def test_a_moe_on_triton_on_the_h200_gets_the_moe_row() -> None:
    # Qwen3-30B-A3B, as the MoE sittings ran it
    assert for_server("triton", [H200, H200], experts=128) == (MOE_BY_BACKEND["triton"], None)


def test_the_moe_row_stays_out_on_another_gpu_and_says_which_row() -> None:
    row, why = for_server("triton", [RTX], experts=256)
    assert row is None and why == (
        f"the triton thresholds for a MoE were measured on an H200, this server runs on {RTX}: the policy's "
        "defaults stay (set off_at, on_at, min_accept and accept_slope with specctl set; docs/policy.md)")
    row, why = for_server("triton", [None], experts=128)
    assert row is None and why is not None and "for a MoE were measured on an H200 and this server's GPUs" in why


@pytest.mark.parametrize("backend", NO_MOE_ROW)
def test_a_moe_target_keeps_the_defaults_and_is_told_why(backend: str) -> None:
    # Qwen3-30B-A3B on the very H200 the rows were measured on: the GPU is right, no row for a MoE on this backend.
    row, why = for_server(backend, [H200], experts=128)
    assert row is None and why is not None
    assert f"the {backend} thresholds were measured on a dense model" in why
    assert "this server's target is a MoE (128 experts)" in why
    assert "the policy's defaults stay" in why and "docs/benchmarks.md" in why


@pytest.mark.parametrize("experts", [0, 1])
def test_a_dense_target_gets_the_row(experts: int) -> None:
    assert for_server("triton", [H200], experts=experts) == (BY_BACKEND["triton"], None)


def test_an_unknown_model_class_gets_the_row_as_before_specctl_could_tell() -> None:
    """A plugin older than the count (or no specctl block): the row applies (thresholds.for_server says why)."""
    assert for_server("triton", [H200], experts=None) == (BY_BACKEND["triton"], None)
    assert for_server("triton", [H200]) == for_server("triton", [H200], experts=0)


def test_the_operators_whole_groups_win_over_a_moe_too_and_then_nothing_is_said() -> None:
    assert for_server("flashinfer", [H200], {"off_at": 64, "on_at": 8, "min_accept": 1.0, "accept_slope": 0.0},
                      experts=128) == (None, None)
    row, why = for_server("flashinfer", [H200], {"off_at": 64, "on_at": 8}, experts=128)
    assert row is None and why is not None and "MoE" in why, "the floor is still left to the row: say why"


def test_what_stays_at_the_defaults_is_only_what_the_operator_left() -> None:
    # `specctl set off_at=64 on_at=8` on a MoE, then a restart: off_at and on_at are the operator's,
    # not the defaults, so the journal must not say they stay at the defaults.
    _, why = for_server("flashinfer", [H200], {"off_at": 64, "on_at": 8}, experts=128)
    assert why is not None and why.endswith(
        ": the policy's defaults stay for min_accept and accept_slope (set them with specctl set; docs/policy.md)")
    assert "off_at" not in why


def test_another_gpu_and_a_moe_are_both_said_so_one_fix_is_not_a_surprise() -> None:
    # the report's system: GLM-5 (256 routed experts) on RTX PRO 6000s
    row, why = for_server("flashinfer", [RTX], experts=256)
    gpu, moe = for_server("flashinfer", [RTX])[1], for_server("flashinfer", [H200], experts=256)[1]
    assert row is None and why is not None and gpu is not None and moe is not None
    stay = ": the policy's defaults stay ("
    assert why == f"{gpu.split(stay)[0]}; also, {moe.split(stay)[0]}{stay}{gpu.split(stay)[1]}"
    assert why.startswith(f"the flashinfer thresholds were measured on an H200, this server runs on {RTX}; also, "
                          "the flashinfer thresholds were measured on a dense model and this server's target is "
                          "a MoE (256 experts)")
    assert why.count("the policy's defaults stay") == 1, "what happens instead is said once, after both"


def test_unreadable_gpus_and_a_moe_are_both_said() -> None:
    row, why = for_server("flashinfer", [None], experts=128)
    assert row is None and why is not None
    assert "this server's GPUs could not be read; also, " in why and "a MoE (128 experts)" in why


def test_one_reason_reads_as_it_did() -> None:
    """The texts the journal has carried stay, for whoever searches old journals by them."""
    assert for_server("flashinfer", [RTX])[1] == (
        f"the flashinfer thresholds were measured on an H200, this server runs on {RTX}: the policy's defaults "
        "stay (set off_at, on_at, min_accept and accept_slope with specctl set; docs/policy.md)")
    # (a MoE on Triton and FA3 had this line until their MoE rows; FlashInfer, with no MoE row, still does)
    assert for_server("flashinfer", [H200], experts=128)[1] == (
        "the flashinfer thresholds were measured on a dense model and this server's target is a MoE (128 experts), "
        "whose verify cost over the batch is not a dense model's (docs/benchmarks.md): the policy's defaults "
        "stay (set off_at, on_at, min_accept and accept_slope with specctl set; docs/policy.md)")


GPUS = st.lists(st.sampled_from([H200, RTX, None]), max_size=4)
CHOSEN = st.dictionaries(st.sampled_from(["off_at", "on_at", "min_accept", "accept_slope"]), st.just(1))


@given(backend=st.sampled_from(NO_MOE_ROW), gpus=GPUS, chosen=CHOSEN, experts=st.integers(2, 1024))
def test_no_dense_row_ever_reaches_a_moe(backend: str, gpus: list[str | None], chosen: dict[str, int],
                                         experts: int) -> None:
    row, why = for_server(backend, gpus, chosen, experts=experts)
    assert row is None
    touched_both = {"off_at", "on_at"} & set(chosen) and {"min_accept", "accept_slope"} & set(chosen)
    assert (why is None) == bool(touched_both), "said exactly when a group is left to the row"


@given(gpus=GPUS, chosen=CHOSEN, experts=st.integers(2, 1024))
def test_a_moe_on_triton_gets_the_moe_row_exactly_on_h200s(gpus: list[str | None], chosen: dict[str, int],
                                                           experts: int) -> None:
    row, why = for_server("triton", gpus, chosen, experts=experts)
    on_h200s = bool(gpus) and all(name == H200 for name in gpus)
    assert row == (MOE_BY_BACKEND["triton"] if on_h200s else None)
    assert row != BY_BACKEND["triton"], "never the dense row"
    touched_both = {"off_at", "on_at"} & set(chosen) and {"min_accept", "accept_slope"} & set(chosen)
    assert (why is None) == (on_h200s or bool(touched_both))


@given(backend=st.sampled_from([*sorted(BY_BACKEND), "trtllm_mha", None]), gpus=GPUS, chosen=CHOSEN)
def test_unknown_and_dense_are_treated_alike(backend: str | None, gpus: list[str | None],
                                             chosen: dict[str, int]) -> None:
    assert for_server(backend, gpus, chosen, experts=None) == for_server(backend, gpus, chosen, experts=0)


@pytest.mark.parametrize("name", ["NVIDIA GH200 480GB", "NVIDIA GH200 144G HBM3e"])
def test_a_grace_hopper_is_not_the_h200_the_rows_were_measured_on(name: str) -> None:
    # GH200's GPU is a Hopper with its own memory (96 GB HBM3 or 144 GB HBM3e), not an H200; its
    # NVML name only contains the letters "H200", which took the H200's rows there.
    row, why = for_server("flashinfer", [name] * 4)
    assert row is None and why is not None and f"this server runs on {name}" in why


@pytest.mark.parametrize("name", ["NVIDIA H200", "NVIDIA H200 NVL", "nvidia h200"])
def test_every_name_of_an_h200_gets_the_rows(name: str) -> None:
    assert for_server("triton", [name]) == (BY_BACKEND["triton"], None)


@pytest.mark.parametrize(("backend", "gpus", "chosen", "experts", "row"), [
    ("triton", ["NVIDIA H200"], {}, None, {"off_at": 16, "on_at": 8}),  # where the tree was measured
    ("triton", ["NVIDIA H200"], {"min_accept": 0.5}, 0, {"off_at": 16, "on_at": 8}),  # the floor is not the row's
    ("triton", ["NVIDIA H200"], {"off_at": 24}, None, None),  # the operator's own load pair: nothing said
    ("triton", ["NVIDIA H200"], {}, 128, None),  # a MoE's tree: not measured
    ("fa3", ["NVIDIA H200"], {}, None, None),  # FA3's chain row would never turn a tree off for load
    ("triton", ["NVIDIA RTX PRO 6000 Blackwell Server Edition"], {}, None, None),
    ("triton", [None], {}, None, None),  # GPUs not read
])
def test_a_tree_gets_its_own_row_only_where_it_was_measured(backend: str, gpus: list, chosen: dict,
                                                            experts: int | None, row: dict | None) -> None:
    got, why = for_tree_server(backend, gpus, chosen, experts=experts)
    assert got == row
    if row is None and not {"off_at", "on_at"} & chosen.keys():
        assert why is not None and "a tree's were measured on Triton with a dense target on an H200 only" in why
        assert "the policy's defaults stay" in why
    else:
        assert why is None
