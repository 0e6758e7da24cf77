"""The tree under specctl's switch beside the static tree and no speculation (report.py prints it).

run_fast_off.sh's ``treesweep`` labels its windows ``treesw-ATTN`` (modes on, off,
auto), ``tree`` the static tree ``tree-ATTN``, ``nospec2`` ``nospec-ATTN``. What the
proof must show (docs/sglang-plugin.md, "Could the plugin do it with hooks alone?"): on
reads the static tree, off reads no speculation, and auto the better of the two
at every load. Standard library only.
"""
from __future__ import annotations

from table_cells import Windows, best_of, captioned, cell, ratio


def tree_switch_table(cells: dict[tuple[str, str, int], Windows]) -> str:
    """One row per concurrency where the tree under the switch ran; "" where it did not."""
    rows = []
    for c in sorted(c for (kind, mode, c) in cells if (kind, mode) == ("treesw", "on")):
        none, static = cells.get(("nospec", "-", c)), cells.get(("tree", "-", c))
        on, off, auto = (cells.get(("treesw", mode, c)) for mode in ("on", "off", "auto"))
        rows.append(f"| {c} | {cell(none)} | {cell(static)} | {cell(on)} | {cell(off)} | {cell(auto)} | "
                    f"{ratio(on, static)} | {ratio(off, none)} | {ratio(auto, best_of(static, none))} | "
                    f"{ratio(auto, best_of(on, off))} |")
    return captioned("The tree under specctl's switch (SPECCTL_TREE_SWITCH=1) beside the static tree and no"
                     " speculation (other servers); the last column reads one server:",
                     "c: | no spec: | static tree: | switch on: | switch off: | switch auto: | on / static tree: | "
                     "off / none: | auto / max(static tree, none): | auto / max(on, off):", rows)
