"""Does a chain draft with specctl's fast off beat the static tree at every load?

Offline, on the simulator (docs/sglang-plugin.md): for each concurrency, a closed loop
against a server without speculation, with an EAGLE-3 tree (topk 4, 2 steps,
16 draft tokens) run statically, and with a chain (topk 1, 3 steps) static and
under specctl's auto, at several chain accept lengths. Modelled, not measured.

``--system report`` (the default) is the report's 8x RTX PRO 6000 (preset
``rtx-8gpu-report``, its tree calibrated to the report, and
``rtx-8gpu-report-topk1``). ``--system h200-triton`` (or ``-fa3``,
``-flashinfer``) is the H200 of the GPU bench, whose ``tree`` phase measures
the same question (bench/gpu/run_fast_off.sh): the chain is the calibrated
Llama-8B preset, the tree the same machine with the report's tree flags at
``--tree-accept`` (an assumption, as on the GPU: SGLang's simulated
acceptance). It is the prediction written before that run.

    python bench/topk_compare.py [--system report|h200-triton|h200-fa3|h200-flashinfer]
        [--accept-lens 1.6,2.02,2.4,2.8] [--tree-accept 2.7] [--concurrency 1,16,128] [--set min_accept=0.5]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

from specctl.runtime.sim.offline import run_point
from specctl.runtime.sim.preset_model import Preset
from specctl.runtime.sim.presets import get_preset
from specctl.runtime.sim.rows import supervised_settings

CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def tok_s(preset: Preset, c: int, server: str, changes: dict[str, float] | None = None) -> float:
    """Steady-state tokens/s, windowed as the preset was calibrated; auto with the thresholds the supervisor
    would apply on the preset's GPU and model class (sim/rows.py), the operator's ``changes`` winning."""
    settings = supervised_settings(preset, changes or {})[0] if server == "auto" else None
    return run_point(preset, c, server, settings=settings, warmup_s=preset.warmup_s,  # type: ignore[arg-type]
                     window_s=preset.window_s).tok_s


H200_CHAINS = {"h200-triton": "h200-llama8b", "h200-fa3": "h200-llama8b-fa3",
               "h200-flashinfer": "h200-llama8b-flashinfer"}
SYSTEMS = ("report", *H200_CHAINS)
TREE = {"topk": 4, "steps": 2, "draft_tokens": 16}  # the report's flags (bench/gpu's TREE_* defaults)


def presets(system: str, tree_accept: float | None) -> tuple[Preset, Preset]:
    """(tree, chain) for a system; the report's tree keeps its calibrated acceptance unless given one."""
    if system == "report":
        tree = get_preset("rtx-8gpu-report")
        if tree_accept is not None:
            tree = dataclasses.replace(tree, accept_len=tree_accept)
        return tree, get_preset("rtx-8gpu-report-topk1")
    chain = get_preset(H200_CHAINS[system])
    tree = dataclasses.replace(
        chain, accept_len=2.7 if tree_accept is None else tree_accept, **TREE,
        description=f"{chain.description.replace('(steps 3, topk 1)', '(topk 4, 2 steps, 16 draft tokens)')}"
                    " (the chain's machine with the report's tree flags; uncalibrated)")
    return tree, chain


def table(accept_lens: list[float], concurrencies: tuple[int, ...], changes: dict[str, float],
          system: str = "report", tree_accept: float | None = None) -> str:
    tree, chain = presets(system, tree_accept)
    chains = [dataclasses.replace(chain, accept_len=a) for a in accept_lens]
    head = ["c", "no spec", "tree static (topk 4)"]
    for a in accept_lens:
        head += [f"chain static @{a:g}", f"chain + specctl auto @{a:g}", f"auto / tree @{a:g}"]
    lines = [f"tree: {tree.description}; accept length {tree.accept_len:g} (assumed)",
             f"chain: {chain.description}; accept lengths {', '.join(f'{a:g}' for a in accept_lens)}",
             f"auto's settings: the policy's defaults, the backend's row of runtime/core/thresholds.py, then {changes}",
             f"closed loop, {tree.warmup_s:g} s warm-up + {tree.window_s:g} s window of simulated time per point",
             "| " + " | ".join(head) + " |", "|" + " ---: |" * len(head)]
    for c in concurrencies:
        tree_on = tok_s(tree, c, "on")
        cells = [str(c), f"{tok_s(tree, c, 'nospec'):.1f}", f"{tree_on:.1f}"]
        for preset in chains:
            auto = tok_s(preset, c, "auto", changes)
            cells += [f"{tok_s(preset, c, 'on'):.1f}", f"{auto:.1f}", f"{auto / tree_on:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--accept-lens", default="1.6,2.02,2.4,2.8",
                    help="chain accept lengths at 3 steps, bonus token included (default 1.6,2.02,2.4,2.8)")
    ap.add_argument("--concurrency", default=",".join(map(str, CONCURRENCIES)))
    ap.add_argument("--system", choices=SYSTEMS, default="report",
                    help="the report's 8x RTX PRO 6000 (default) or the bench's H200 with one attention backend")
    ap.add_argument("--tree-accept", type=float, default=None,
                    help="the tree's accept length at 2 steps, bonus token included (default: the report's "
                         "calibrated one; 2.7 on the H200)")
    ap.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                    help="a policy setting for auto, e.g. --set min_accept=0.5 (repeatable)")
    ns = ap.parse_args(argv)
    try:
        accept_lens = [float(a) for a in ns.accept_lens.split(",")]
        concurrencies = tuple(int(c) for c in ns.concurrency.split(","))
        changes = {k: float(v) for k, v in (pair.split("=", 1) for pair in ns.settings)}
    except ValueError as exc:
        ap.error(f"not a number list or KEY=VALUE: {exc}")
    if any(not 1.0 <= a <= 4.0 for a in accept_lens):
        ap.error("an accept length at 3 steps lies between 1 and 4")
    if ns.tree_accept is not None and not 1.0 <= ns.tree_accept <= 3.0:
        ap.error("the tree's accept length at 2 steps lies between 1 and 3")
    start = time.monotonic()
    print(table(accept_lens, concurrencies, changes, ns.system, ns.tree_accept))
    print(f"\n({time.monotonic() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
