#!/usr/bin/env python3
"""The sweep's tables, in Markdown, from interleave.py's CSV rows.

    report.py INTERLEAVE.csv [INTERLEAVE.csv ...]

Rows are grouped by label prefix: ``nospec-*`` (a server without speculation),
``specctl-*`` (modes on = static EAGLE-3's runtime state, off, auto),
``adaptive-*`` (SGLang's own adaptive), ``tree-*`` (SGLang's static EAGLE-3
tree, topk > 1, no plugin: run_fast_off.sh's ``tree`` phase), ``treesw-*`` (that tree under specctl's
switch: ``treesweep``, tree_table.py), ``offwarmth-*`` (the off state with the
draft cold / warm), and run_fast_off.sh's ``offcost`` phase:
``decodeonly-{nospec,off}-*`` (every request admitted before the windows, none
arriving or ending in them; offpair's ``PAIR_LOAD=decode`` turns too) and
``mixed-{nospec,off}-*`` (the sweep's arrivals; the off server's modes are the
draft cold / warm; ``mixed-auto-*`` is specctl in auto; ``mixed-nospec2-*`` is
offpair's second server without speculation, its null test). The sweep's auto
is read against the forced mode it ran as (``same_state_table``), the windows'
own scatter. With arrivals it also pairs the servers turn by turn
(``paired_table``) and tells a server's role from its start position
(``position_table``). Each cell is the mean over the windows, with their
spread; each ratio is of the means, with the range the single windows allow
(worst window over best window, and the reverse), because these machines
scatter by several per cent from one window to the next.

A label ends in the target's model where it is not Llama-3.1-8B
(run_fast_off.sh's MODEL: ``nospec-triton-qwen3moe``), and is grouped by its
prefix as any other; files of more than one model are refused
(``models_in``), since their rows would otherwise land in the same cells.

Standard library only.
"""
from __future__ import annotations

import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import MODELS
from table_cells import best_of, captioned, cell, ratio
from tree_table import tree_switch_table

Cells = dict[tuple[str, str, int], list[dict[str, float]]]
SWEEP_KINDS = ("nospec", "specctl", "adaptive", "tree")
OFFCOST_LOADS = {"decodeonly": "decode only", "mixed": "with arrivals"}


def unmeasured(row: dict[str, str]) -> tuple[str, str] | None:
    """Why a window measures nothing of its mode (what it is, the rest of the message), or None."""
    if float(row["tok_s"]) == 0.0:  # a stall, not a rate: no window of a live server yields nothing
        return "with no tokens", "): the server stalled in it"
    if row.get("switch_rc") not in (None, "", "0"):  # interleave.py could not switch: the state before ran
        return "whose switch failed", f", rc {row['switch_rc']}): it ran in the state before it"
    return None


def read(paths: list[str]) -> Cells:
    """(kind, mode, concurrency) -> windows (tok_s, tpot_ms)."""
    cells: Cells = defaultdict(list)
    for path in paths:
        with open(path, newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                if not row.get("tok_s"):
                    continue
                why = unmeasured(row)
                if why:
                    print(f"report.py: {path}: dropped a window {why[0]} ({row['label']} c={row['concurrency']} "
                          f"mode={row['mode']} round={row.get('round', '?')}{why[1]}", file=sys.stderr)
                    continue
                parts = row["label"].split("-")
                kind = "-".join(parts[:2]) if parts[0] in OFFCOST_LOADS else parts[0]
                tpot = float(row["tpot_ms"]) if row.get("tpot_ms") else float("nan")
                steps = float(row["steps"]) if row.get("steps") else float("nan")
                cells[(kind, row["mode"], int(row["concurrency"]))].append(
                    {"tok_s": float(row["tok_s"]), "tpot": tpot, "steps": steps})
    return cells


DEFAULT_MODEL = "llama8b"  # run_fast_off.sh's MODEL that adds nothing to the labels
OTHER_MODELS = tuple(m for m in MODELS if m != DEFAULT_MODEL)  # run_fast_off.sh appends these to every label


def model_of(label: str) -> str:
    """The target model a label was measured on: its last part where that names one, else Llama-3.1-8B.

    Why by name and not by position: the labels' shapes differ by phase
    (``nospec-triton``, ``mixed-off-triton``, ``specctl-on-triton``).
    """
    last = label.rsplit("-", 1)[-1]
    return last if last in OTHER_MODELS else DEFAULT_MODEL


def models_in(paths: list[str]) -> set[str]:
    """Every target model the files' rows were measured on."""
    found = set()
    for path in paths:
        with open(path, newline="", encoding="utf-8") as fh:
            found |= {model_of(row["label"]) for row in csv.DictReader(fh) if row.get("label")}
    return found






def sweep_table(cells: Cells) -> str:
    """One row per concurrency; SGLang's adaptive and the static tree get columns only where measured.

    With a tree (issue 23's question: is the chain under specctl better than the operator's
    static topk-4 tree at every load?) the last column is specctl auto over the tree.
    """
    concs = sorted({c for (kind, _, c) in cells if kind in SWEEP_KINDS})
    if not concs:
        return ""
    adaptive = any(kind == "adaptive" for (kind, _, _) in cells)
    tree = any(kind == "tree" for (kind, _, _) in cells)
    names = ["no spec", "static (forced on)"] + (["SGLang adaptive"] if adaptive else []) + (
        ["static tree"] if tree else []) + ["specctl off", "specctl auto", "off / none", "auto / max(static, none)"] + (
        ["auto / tree"] if tree else [])
    lines = ["| c | " + " | ".join(names) + " |", "|" + " ---: |" * (len(names) + 1)]
    for c in concs:
        none, on = cells.get(("nospec", "-", c)), cells.get(("specctl", "on", c))
        off, auto = cells.get(("specctl", "off", c)), cells.get(("specctl", "auto", c))
        trees = cells.get(("tree", "-", c))
        row = [cell(none), cell(on)] + ([cell(cells.get(("adaptive", "-", c)))] if adaptive else []) + (
            [cell(trees)] if tree else []) + [
            cell(off), cell(auto), ratio(off, none), ratio(auto, best_of(on, none))] + (
            [ratio(auto, trees)] if tree else [])
        lines.append(f"| {c} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def same_state_table(cells: Cells) -> str:
    """specctl auto against the forced mode whose runtime state it ran in every window.

    Why: both are the same server in the same state, a few seconds apart, so
    their ratio should read 1; what it reads instead is how far windows of one
    state scatter, the yardstick for every other ratio of the sweep. A cell
    where auto switched inside a window (its steps between the two modes')
    is left out.
    """
    rows = []
    for c in sorted(c for (kind, mode, c) in cells if (kind, mode) == ("specctl", "auto")):
        auto = cells[("specctl", "auto", c)]
        states = {w["steps"] for w in auto}
        for forced in ("on", "off"):
            twin = cells.get(("specctl", forced, c))
            if twin and len(states) == 1 and states == {w["steps"] for w in twin}:
                rows.append(f"| {c} | {forced} ({twin[0]['steps']:g} steps) | {len(auto)} / {len(twin)} | "
                            f"{ratio(auto, twin)} |")
    return captioned("specctl auto against the forced mode whose state it ran in every window (one server,"
                     " adjacent windows; it should read 1, so it reads the windows' scatter):",
                     "c: | auto ran as | windows auto / forced: | auto / forced:", rows)


def warmth_table(cells: Cells) -> str:
    concs = sorted({c for (k, _, c) in cells if k == "offwarmth"})
    if not concs:
        return ""
    lines = ["| c | off, draft cold | off, draft warm | warm / cold |", "| ---: | ---: | ---: | ---: |"]
    for c in concs:
        cold, warm = cells.get(("offwarmth", "cold", c)), cells.get(("offwarmth", "warm", c))
        lines.append(f"| {c} | {cell(cold)} | {cell(warm)} | {ratio(warm, cold)} |")
    return "\n".join(lines)


def offcost_table(cells: Cells) -> str:
    """No spec vs the specctl server forced off, per load shape (run_fast_off.sh offcost)."""
    rows = sorted({(load, c) for (kind, _, c) in cells for load in OFFCOST_LOADS if kind.startswith(load + "-")})
    if not rows:
        return ""
    lines = ["| load | c | no spec | specctl off (draft cold) | off / none | off, draft warm | warm / none |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for load, c in rows:
        none = cells.get((f"{load}-nospec", "-", c))
        cold = cells.get((f"{load}-off", "cold", c)) or cells.get((f"{load}-off", "-", c))
        warm = cells.get((f"{load}-off", "warm", c))
        lines.append(f"| {OFFCOST_LOADS[load]} | {c} | {cell(none)} | {cell(cold)} | {ratio(cold, none)} | "
                     f"{cell(warm)} | {ratio(warm, none)} |")
    return "\n".join(lines)


Turn = tuple[int, list[float]]  # (row of its first window in the CSV, tok/s windows)
# The servers a no-spec server is paired with: specctl forced off, specctl in auto, the tree under
# the switch forced off (issue 23), and for offpair's null test (two servers alike) a second server
# without speculation.
PAIRED = ("off", "auto", "nospec2", "treeoff")


# offpair's decode-only turns (PAIR_LOAD=decode) are their servers' under this suffix, so that
# they pair only with each other: "off (decode only)" with "nospec (decode only)".
DECODE_ONLY = " (decode only)"


def split_kind(kind: str) -> tuple[str, str]:
    """A turn's server kind as (role, load suffix): "off (decode only)" -> ("off", DECODE_ONLY)."""
    if kind.endswith(DECODE_ONLY):
        return kind[: -len(DECODE_ONLY)], DECODE_ONLY
    return kind, ""


def turns(path: str) -> dict[int, dict[str, list[Turn]]]:
    """c -> {"nospec"|"off"|"auto"|"nospec2" (+ DECODE_ONLY): turns in time order} for one CSV's turns.

    A turn is a run of consecutive windows of one server at one
    concurrency (the off server's draft-warm windows left out), as offab
    (fresh servers taking turns) and offpair (resident servers taking turns)
    write them; one CSV is one sitting, so turns pair only within a file.
    Two turns of one server in a row (offpair's B A after A B at one
    concurrency) are told apart by the warm-up between them: windows more
    than 1.5 windows + 2 s after the row before (interleave.py's t_unix) start
    a new turn.
    """
    out: dict[int, dict[str, list[Turn]]] = defaultdict(lambda: defaultdict(list))
    last, last_t = None, None
    with open(path, newline="", encoding="utf-8") as fh:
        for row_no, row in enumerate(csv.DictReader(fh)):
            t = float(row["t_unix"]) if row.get("t_unix") else None
            gap = t is not None and last_t is not None and t - last_t > 1.5 * float(row.get("window_s") or 0) + 2
            last_t = t  # the gap is to the row before, whatever it was (a draft-warm window too)
            parts = row["label"].split("-")
            if parts[0] not in OFFCOST_LOADS or len(parts) < 2 or parts[1] not in ("nospec", *PAIRED):
                continue
            if not row.get("tok_s") or row["mode"] == "warm":
                continue
            key = (parts[1] + ("" if parts[0] == "mixed" else DECODE_ONLY), int(row["concurrency"]))
            if key != last or gap:
                out[key[1]][key[0]].append((row_no, []))
            last = key
            out[key[1]][key[0]][-1][1].append(float(row["tok_s"]))
    return out



class Pair(NamedTuple):
    """One no-spec turn with the other server's turn of the same rank."""

    ratio: float  # the other server's tok/s over no spec's
    went_first: bool  # the other server's turn came first in the pair
    started_second: bool  # the other server was started after the file's first server


def pairs_of(paths: list[str]) -> dict[tuple[int, str], list[Pair]]:
    """(c, server) -> its pairs with no spec (or ``base_of``'s base) over all files; each file is one sitting.

    The file's first turn is its first-started server's (offpair's rounds
    begin A B), which is how a server's start position is known.
    """
    pairs: dict[tuple[int, str], list[Pair]] = defaultdict(list)
    for path in paths:
        by_c = turns(path)
        starts = [(ts[0][0], kind) for by in by_c.values() for kind, ts in by.items() if ts]
        first_started = min(starts)[1] if starts else "nospec"
        for c, by in by_c.items():
            for kind in sorted(k for k in by if split_kind(k)[0] in PAIRED):
                base, name = base_of(by, kind)
                for (t_base, low), (t_x, x) in zip(by.get(base, []), by[kind]):
                    pairs[c, name].append(Pair(statistics.fmean(x) / statistics.fmean(low), t_x < t_base,
                                               kind != first_started))
    return pairs


def base_of(by: dict[str, list[Turn]], kind: str) -> tuple[str, str]:
    """The server X pairs with at one concurrency of one file (same load), and the row's name.

    No spec where the file has it; otherwise auto pairs with the forced-off
    server (offpair's ``PAIR="off auto"``), named ``auto/off``: both run the
    same off state under load, so that ratio is what auto's policy costs.
    """
    role, load = split_kind(kind)
    if by.get("nospec" + load) or role != "auto":
        return "nospec" + load, kind
    return "off" + load, "auto/off" + load


def order_balanced(pairs: list[Pair]) -> tuple[float, float | None]:
    """The mean of the two orders' means where both occur (else of the pairs), with its standard error.

    Why: resident servers taking turns at 128 requests read about 12 % apart
    by who went first in the pair; averaging the two orders' means
    cancels that where the plain mean would weigh whichever order had more
    pairs. The error needs two pairs in each group it averages.
    """
    groups = [g for g in ([p.ratio for p in pairs if not p.went_first], [p.ratio for p in pairs if p.went_first]) if g]
    if any(len(g) < 2 for g in groups):
        return statistics.fmean(statistics.fmean(g) for g in groups), None
    se = sum(statistics.variance(g) / len(g) for g in groups) ** 0.5 / len(groups)
    return statistics.fmean(statistics.fmean(g) for g in groups), se


def paired_table(paths: list[str]) -> str:
    """X / none per pair of turns (the k-th no-spec turn with the k-th X turn), over all files.

    Why: the same server kind read up to 25 % apart from one start to the
    next (docs/benchmarks.md, "Method"), more than the windows within a start,
    so the spread of the pairs, not of the windows, says how sure a ratio is.
    Which server went first in a pair is marked, and where both orders
    occur the two orders' means are averaged (``order_balanced``).
    """
    pairs = pairs_of(paths)
    lines = []
    for c, kind in sorted(pairs):
        r = [p.ratio for p in pairs[c, kind]]
        shown = {first: f"{statistics.fmean(g):.3f} ({len(g)})" for first in (False, True)
                 if (g := [p.ratio for p in pairs[c, kind] if p.went_first == first])}
        balanced = "-"
        if len(shown) == 2:
            m, se = order_balanced(pairs[c, kind])
            balanced = f"{m:.3f}" + ("" if se is None else f" +- {se:.3f}")
        listed = ", ".join(f"{p.ratio:.3f}" + ("*" if p.went_first else "") for p in pairs[c, kind])
        lines.append(f"| {c} | {kind} | {len(r)} | {listed} | {statistics.fmean(r):.3f} | {min(r):.2f}-{max(r):.2f} | "
                     f"{shown.get(False, '-')} | {shown.get(True, '-')} | {balanced} |")
    return captioned("Paired turns, with arrivals unless marked (each no-spec turn with the other server's turn"
                     " of the same rank, in time order; * = the other server went first; nospec2 = a second"
                     " server without speculation; auto/off = auto over the forced-off server, in a file"
                     " without no spec):",
                     "c: | server | pairs: | server / none per pair | mean: | range: | none first: | other first: |"
                     " order-balanced:", lines)


def position_table(paths: list[str]) -> str:
    """X / none with X started second and with X started first, and what the two give apart.

    Why: the null test (two servers alike) and the roles swapped showed a
    server's start position moving its reading by a few per cent.
    If starting second is worth a factor p and the role a factor r, X
    started second reads r * p and started first r / p, so their geometric
    mean is the role alone and the square root of their ratio the position
    alone. Rows only where X was measured in both positions.
    """
    lines = []
    for (c, kind), pairs in sorted(pairs_of(paths).items()):
        second = [p for p in pairs if p.started_second]
        first = [p for p in pairs if not p.started_second]
        if not second or not first:
            continue
        (ms, ses), (mf, sef) = order_balanced(second), order_balanced(first)
        role, position = (ms * mf) ** 0.5, (ms / mf) ** 0.5
        err = ""
        if ses is not None and sef is not None:  # relative errors of the two means, halved by the square root
            err = f" +- {role * 0.5 * ((ses / ms) ** 2 + (sef / mf) ** 2) ** 0.5:.3f}"
        lines.append(f"| {c} | {kind} | {ms:.3f} ({len(second)}) | {mf:.3f} ({len(first)}) | "
                     f"{role:.3f}{err} | {position:.3f} |")
    return captioned("The server's role apart from its start position (order-balanced means over the files;"
                     " role = sqrt(second x first), start position = sqrt(second / first)):",
                     "c: | server | started second (pairs): | started first (pairs): | role: | start position:", lines)


def sittings_table(paths: list[str]) -> str:
    """X / none per file (order-balanced), and the mean over the files with its standard error.

    Why: each file is one pair of server starts, and a start's own speed
    is shared by all its turns, so the pairs of one file are not independent
    of each other; the spread of the files' means is what says how sure the
    ratio is across starts. Rows where two files or more measured X.
    """
    per_file: dict[tuple[int, str], list[float]] = defaultdict(list)
    for path in paths:
        for key, pairs in pairs_of([path]).items():
            per_file[key].append(order_balanced(pairs)[0])
    lines = []
    for (c, kind), means in sorted(per_file.items()):
        if len(means) < 2:
            continue
        se = statistics.stdev(means) / len(means) ** 0.5
        lines.append(f"| {c} | {kind} | {len(means)} | {', '.join(f'{m:.3f}' for m in means)} | "
                     f"{statistics.fmean(means):.3f} +- {se:.3f} |")
    return captioned("Per file (one sitting's pair of server starts, order-balanced), and over the files"
                     " (mean +- standard error of the files' means):",
                     "c: | server | files: | server / none per file | over the files:", lines)


def follows_table(paths: list[str]) -> str:
    """Per file and concurrency, off / none over turns matched on the turn that ran just before them.

    Why: the order effect at 128 requests (``order_balanced``) looked like "a turn right
    after the other server's turn runs slower", so turns that followed the
    same thing (the server's own turn, or the other server's) compare like
    with like; one file is one sitting, so each file gets its own rows.
    """
    lines = []
    for path in paths:
        seq = sorted((row_no, kind, c, windows) for c, by in turns(path).items()
                     for kind, ts in by.items() for row_no, windows in ts)
        means: dict[tuple[int, str, str], list[float]] = defaultdict(list)  # (c, follows, kind) -> turn means
        for before, (_, kind, c, windows) in zip([None, *seq], seq):
            if before is not None:  # the same server whatever its load: own
                follows = "own" if split_kind(before[1])[0] == split_kind(kind)[0] else "other"
                means[c, follows, kind].append(statistics.fmean(windows))
        for c, follows, kind in sorted(k for k in means if split_kind(k[2])[0] != "nospec"):
            none, other = means.get((c, follows, "nospec" + split_kind(kind)[1])), means[c, follows, kind]
            if none:
                lines.append(f"| {path.rsplit('/', 1)[-1]} | {c} | {follows} | {kind} | {len(none)} / {len(other)} | "
                             f"{statistics.fmean(other) / statistics.fmean(none):.3f} |")
    return captioned("Turns matched on the turn just before them (own: the same server's; other: the other"
                     " server's; the file's first turn left out):",
                     "file | c: | follows | server | turns none / server: | server / none:", lines)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    models = models_in(argv)
    if len(models) > 1:
        print(f"report.py: these files hold more than one target model ({', '.join(sorted(models))}); "
              "give each model's files apart", file=sys.stderr)
        return 2
    cells = read(argv)
    print("Output tok/s, mean over the windows (window range) [TPOT ms, Little's law];"
          " ratios of the means (range over single windows)\n")
    tables = [t for t in (sweep_table(cells), tree_switch_table(cells), same_state_table(cells), warmth_table(cells),
                          offcost_table(cells),
                          paired_table(argv), position_table(argv), sittings_table(argv), follows_table(argv))
              if t]
    print("\n\n".join(tables))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
