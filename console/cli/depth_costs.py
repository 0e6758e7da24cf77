"""``specctl depth-costs JOURNAL ...``: the draft-depth cost table measured on the operator's own server.

The policy prices each candidate depth with a table given at start
(``--depth-costs FILE.json``). Until now a table came from a prediction (the
simulator's model) or a GPU sweep on dummy weights; this measures it from the
journal of a server that ran at each depth (runtime/supervisor/depth_fit.py
says the rule). It runs offline, in the CLI, so the file it writes is given to
every tensor-parallel rank at the next start and every rank prices depths alike.

What an operator sees: the coverage table on stdout, always (which cells were
measured, from how many decode steps and intervals, which kept the prior's value).
The JSON goes only to ``--out``: without it nothing is written (a look before
writing; stdout stays readable, and no table is taken for a file by a redirect
that also caught the coverage). Bad input (a journal that cannot be read or
holds no server built with several depths, a prior that is not a table, an
``--out`` that cannot be written) is refused in one line, exit 2; cells with
neither enough evidence nor a prior are refused, exit 1, naming them and how to
measure them, and so is a journal in which no cell has enough (the table would
be the prior's); nothing is written on any refusal.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from specctl.console.cli.exit_codes import EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from specctl.runtime.core.atomic_file import UnsafeTargetError, check_target, write_atomic
from specctl.runtime.core.depth_model import DepthCosts, DepthCostsError, pool_rising, read_costs
from specctl.runtime.supervisor.depth_fit import (
    DEFAULT_BUCKETS,
    MIN_INTERVALS,
    MIN_STEPS,
    Fit,
    built_depths,
    fit,
)
from specctl.runtime.supervisor.journal import read_records

PROG = "specctl depth-costs"


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    text = "measure the draft-depth cost table (--depth-costs) from a server's journal"
    p = sub.add_parser("depth-costs", help=text, description=text[0].upper() + text[1:] + ". "
                       "Pin each depth at the loads you serve for a while (specctl force-on --steps D, "
                       "specctl force-off for depth 0), then read the journal (specctl run --log FILE.jsonl). "
                       f"A cell is measured with at least {MIN_STEPS} decode steps in {MIN_INTERVALS} intervals; "
                       "the others keep --prior's value (docs/policy.md, \"Cost model\").")
    p.add_argument("journals", nargs="+", metavar="JOURNAL.jsonl", help="the supervisor's journal(s) (--log)")
    p.add_argument("--prior", metavar="TABLE.json", type=Path,
                   help="a cost table whose buckets the measured table takes and whose values fill the cells "
                        "without enough evidence, e.g. python -m specctl.runtime.sim.depth --preset NAME")
    p.add_argument("--out", metavar="FILE.json", type=Path,
                   help="write the table here (default: only print the coverage, write nothing)")


def run(args: argparse.Namespace) -> int:
    prior = None
    if args.prior is not None:
        try:
            prior = read_costs(args.prior)
        except DepthCostsError as exc:
            return _refuse(f"--prior {exc}")
    if args.out is not None and (problem := _unwritable(args.out)):
        return _refuse(f"--out {args.out}: {problem}")
    journals = []
    for path in args.journals:
        try:
            journals.append(read_samples(path))
        except OSError as exc:
            return _refuse(f"{path}: {exc.strerror or exc}")
    built = built_depths(s for samples in journals for s in samples)
    if not built:
        return _refuse(f"{', '.join(args.journals)}: no samples of a server built with several depths "
                       "(specctl run --speculative-candidate-steps 0,1,2,3): nothing to measure")
    depths = tuple(sorted(set(built) | set(prior.depths if prior else ())))
    buckets = prior.buckets if prior is not None else DEFAULT_BUCKETS
    result = fit(journals, depths, buckets, prior)
    print("\n".join(coverage(result, prior is not None)))
    if not result.measured:
        print(f"{PROG}: no cell has enough evidence, so the table would be --prior's own; pin each depth at the "
              "loads you serve for a minute (specctl force-on --steps D; specctl force-off for depth 0) and read "
              "that journal; nothing written", file=sys.stderr)
        return EXIT_REFUSED
    if result.missing:
        print(f"{PROG}: no value for {len(result.missing)} cells ({_cells(result)}); measure them by running the "
              "server at that batch with each depth pinned for a minute (specctl force-on --steps D; "
              "specctl force-off for depth 0), or give --prior TABLE.json for the rest "
              "(python -m specctl.runtime.sim.depth --preset NAME); nothing written", file=sys.stderr)
        return EXIT_REFUSED
    if args.out is None:
        print("nothing written: give --out FILE.json to write the table, then --depth-costs FILE.json at the "
              "next start")
        return EXIT_OK
    try:
        write_atomic(args.out, json.dumps(_document(result, args.journals, prior)) + "\n", mode=0o644)
    except OSError as exc:
        return _refuse(f"--out {args.out}: {exc.strerror or exc}")
    print(f"wrote {args.out}: give it to the next start with --depth-costs {args.out}")
    return EXIT_OK


def read_samples(path: str) -> list[dict[str, Any]]:
    """A journal's samples in the order written (OSError when it cannot be read; bad lines are skipped)."""
    return [dict(r) for r in read_records(path) if r["kind"] == "sample"]


def coverage(result: Fit, with_prior: bool) -> list[str]:
    """The table an operator reads: per bucket and depth, the measured ms (decode steps/intervals) or where
    the value comes from; a cell with some evidence but too little shows it in brackets."""
    header = ["batch", *(f"d{d}" for d in result.depths)]
    rows = [header]
    for b in result.buckets:
        row = [str(b)]
        for d in result.depths:
            cell = result.evidence.get((b, d))
            if (b, d) in result.measured and cell is not None:
                row.append(f"{result.step_s[(b, d)] * 1e3:.3f} ms ({cell.steps}/{cell.intervals})")
            else:
                text = "prior" if (b, d) in result.step_s else "-"
                if cell is not None:
                    text += f" [{cell.steps}/{cell.intervals}]"
                row.append(text)
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) if i == 0 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
             for r in rows]
    cells = len(result.buckets) * len(result.depths)
    lines.append(f"{len(result.measured)} of {cells} cells measured: ms (decode steps/intervals); a cell needs "
                 f"{MIN_STEPS} decode steps in {MIN_INTERVALS} intervals, [steps/intervals] had too few; "
                 + ("prior = --prior's value" if with_prior else "- = no value (no --prior)"))
    if pooled := pooled_runs(result):
        lines.append("a deeper draft reads cheaper here (noise, or a prior from another server), so the policy "
                     "prices these depths alike: " + "; ".join(pooled))
    return lines


def pooled_runs(result: Fit) -> list[str]:
    """'batch B: dI-dJ at X ms' for each run of depths the policy prices alike (DepthCosts' pool_rising).

    Why: the file keeps what was measured, and an operator reading it would
    otherwise expect the policy to prefer the cheaper-looking deeper draft.
    """
    runs = []
    for b in result.buckets:
        if any((b, d) not in result.step_s for d in result.depths):
            continue
        measured = [result.step_s[(b, d)] for d in result.depths]
        priced = pool_rising(measured)
        start = 0
        for end in range(1, len(priced) + 1):
            if end < len(priced) and priced[end] == priced[start]:
                continue
            if any(measured[k] != priced[start] for k in range(start, end)):  # pooled, not merely equal
                runs.append(f"batch {b}: d{result.depths[start]}-d{result.depths[end - 1]} at "
                            f"{priced[start] * 1e3:.3f} ms")
            start = end
    return runs


def _cells(result: Fit) -> str:
    by_bucket: dict[int, list[int]] = {}
    for b, d in result.missing:
        by_bucket.setdefault(b, []).append(d)
    return "; ".join(f"batch {b}: depth {','.join(map(str, ds))}" for b, ds in by_bucket.items())


def _document(result: Fit, journals: list[str], prior: DepthCosts | None) -> dict[str, object]:
    cells = len(result.buckets) * len(result.depths)
    source = (f"measured by specctl depth-costs from {', '.join(os.path.basename(j) for j in journals)}: "
              f"{len(result.measured)} of {cells} cells")
    if prior is not None and len(result.measured) < cells:
        source += f", the rest from the prior ({prior.source or 'no source given'})"
    doc: dict[str, object] = dict(result.table(source).as_dict())
    doc["evidence"] = [[[result.evidence[(b, d)].steps, result.evidence[(b, d)].intervals]
                        if (b, d) in result.measured else None for d in result.depths] for b in result.buckets]
    return doc


def _unwritable(path: Path) -> str | None:
    """Why ``path`` cannot be written, checked before any work; None where it can."""
    if path.is_dir():
        return "is a folder"
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        return f"no folder {folder}"
    if not os.access(folder, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return "permission denied"
    try:
        check_target(path)
    except OSError as exc:  # UnsafeTargetError: a device, a FIFO, a link, a folder others can swap names in
        return str(exc) if isinstance(exc, UnsafeTargetError) else exc.strerror or str(exc)
    return None


def _refuse(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return EXIT_USAGE
