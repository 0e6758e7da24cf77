"""Which measured thresholds a server gets: its attention backend's row, on the GPU it was measured on."""

from __future__ import annotations

import pytest

from specctl.runtime.core.thresholds import BY_BACKEND, MEASURED_ON, for_server

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
