"""Cells and ratios of the GPU tables (report.py, depth_report.py, tree_table.py): one way to print a window set.

A cell is the mean tok/s over a set of windows with their spread and mean TPOT;
a ratio is of the means, with the range the single windows allow (worst over
best, and the reverse), because these machines scatter by several per cent
from one window to the next. Standard library only.
"""
from __future__ import annotations

import statistics

Windows = list[dict[str, float]]


def mean(windows: Windows, key: str = "tok_s") -> float:
    return statistics.fmean(w[key] for w in windows)


def cell(windows: Windows | None) -> str:
    if not windows:
        return "-"
    toks = [w["tok_s"] for w in windows]
    spread = f" ({min(toks):.0f}-{max(toks):.0f})" if len(toks) > 1 else ""
    return f"{mean(windows):.0f}{spread} [{mean(windows, 'tpot'):.1f}]"


def ratio(top: Windows | None, bottom: Windows | None) -> str:
    if not top or not bottom:
        return "-"
    t, b = [w["tok_s"] for w in top], [w["tok_s"] for w in bottom]
    return f"{mean(top) / mean(bottom):.3f} ({min(t) / max(b):.2f}-{max(t) / min(b):.2f})"


def best_of(a: Windows | None, b: Windows | None) -> Windows | None:
    """The windows of whichever of the two has the higher mean."""
    present = [x for x in (a, b) if x]
    return max(present, key=mean) if present else None


def captioned(caption: str, columns: str, rows: list[str]) -> str:
    """A Markdown table under its caption; "" without rows, so that main leaves it out.

    ``columns`` names the columns, "|"-separated; a name ending in ":" is a
    number column (right-aligned), so each table states its rule only once.
    """
    if not rows:
        return ""
    names = [n.strip() for n in columns.split("|")]
    header = "| " + " | ".join(n.rstrip(":") for n in names) + " |"
    rule = "| " + " | ".join("---:" if n.endswith(":") else "---" for n in names) + " |"
    return "\n".join([caption + "\n", header, rule, *rows])
