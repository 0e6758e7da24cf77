"""The view-only fix in its two lengths: the short note (the console's line) carries the refusal's facts.

A TP-8 server's refusal says `specctl sglang-args --tp 8 ...`; a note that said a bare
`specctl sglang-args` would have the operator relaunch at --tp-size 1. Pure functions, so
hypothesis tries every reason and TP size, and narrow lines.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from specctl.runtime.core import view_only

REASONS = st.sampled_from([view_only.NO_PLUGIN, view_only.NO_SPECULATION, view_only.TREE])


@given(why=REASONS, tp=st.integers(min_value=1, max_value=10**6))
def test_the_note_fits_80_columns_and_names_the_refusals_tp_and_steps(why: str, tp: int) -> None:
    note, refusal = view_only.note(why, tp), view_only.refusal(why, tp)
    assert len(note) <= 80, note
    for fact in ([f"--tp {tp}"] if tp > 1 else []) + {view_only.TREE: ["--steps 3"],
                                                      view_only.NO_SPECULATION: ["--draft"]}.get(why, []):
        assert fact in note and fact in refusal, (fact, note)
    if tp == 1:
        assert "--tp" not in note and "--tp" not in refusal


@given(why=REASONS, tp=st.integers(min_value=1, max_value=64), width=st.integers(min_value=40, max_value=80))
def test_a_narrower_line_still_gets_the_whole_command(why: str, tp: int, width: int) -> None:
    note = view_only.note(why, tp, width)
    line = view_only.command(why, tp, "DRAFT")
    assert len(note) <= width or note == line, note
    assert line.removesuffix(" --draft DRAFT") in note


def test_the_report_servers_note_in_words() -> None:
    """The words an operator of the report's TP-8 topk-4 server reads, and a TP-1 server's."""
    assert view_only.note(view_only.TREE, 8) == (
        "fix: relaunch as a chain: `specctl sglang-args --tp 8 --steps 3` prints how")
    assert view_only.note(view_only.TREE, 1) == (
        "fix: relaunch as a chain (topk 1): `specctl sglang-args --steps 3` prints how")
    assert view_only.note(view_only.NO_PLUGIN, 8) == (
        "fix: relaunch as `specctl sglang-args --tp 8` prints (docs/deployment.md)")
    assert view_only.note(view_only.NO_PLUGIN, None) == (
        "fix: relaunch it with what `specctl sglang-args` prints (docs/deployment.md)")
