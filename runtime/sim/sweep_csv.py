"""A GPU sweep's CSV (bench/gpu/interleave.py) read as windows of static states, for checking a preset.

Why a module of its own: ``calibrate --depth-csv`` checks a simulator preset
against what the GPU's ``depthsweep``/``depthauto`` phases measured, and the
reading (columns, modes, bad rows refused with where they are) is a concern
apart from running the simulator. Standard library only.
"""

from __future__ import annotations

import csv
import re
import statistics
from typing import Any

Measured = dict[str, dict[int, float]]  # series -> concurrency -> tok/s: a preset's measured points, or a sweep's

CSV_COLUMNS = ("label", "concurrency", "mode", "tok_s")


class DepthCsvError(ValueError):
    """A sweep CSV that cannot be read as windows of static depths; the message says where."""


def series_of(mode: str) -> str | None:
    """A window's mode as a series: 'd2' -> 'd2', 'off' -> 'off', '-' (no-spec server) -> 'nospec'; auto -> None."""
    if re.fullmatch(r"d([1-9]|1[0-6])", mode) or mode == "off":
        return mode
    if mode == "-":
        return "nospec"
    if mode == "auto":
        return None  # the GPU's auto priced with the measured table, not the simulator's: not comparable
    raise ValueError(f"mode {mode!r} is none of dN, off, - or auto")


def read_windows(path: str) -> dict[str, Measured]:
    """label -> series -> concurrency -> tok/s (the mean where a state has several windows)."""
    cells: dict[str, dict[str, dict[int, list[float]]]] = {}
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in CSV_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise DepthCsvError(f"{path}: not a sweep CSV (no {', '.join(missing)} column)")
            for row in reader:
                try:
                    series = series_of(row["mode"] or "")
                    c, tok_s = _number(int, row, "concurrency"), _number(float, row, "tok_s")
                except ValueError as exc:
                    raise DepthCsvError(f"{path} line {reader.line_num}: {exc}") from None
                if series is None:
                    continue
                if c < 1 or not tok_s > 0:
                    raise DepthCsvError(f"{path} line {reader.line_num}: concurrency {c}, tok_s {tok_s:g}")
                cells.setdefault(row["label"] or "", {}).setdefault(series, {}).setdefault(c, []).append(tok_s)
    except OSError as exc:
        raise DepthCsvError(f"{path}: {exc.strerror or exc}") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise DepthCsvError(f"{path}: not a sweep CSV ({exc})") from None
    if not cells:
        raise DepthCsvError(f"{path}: no windows of a dN, off or - mode")
    return {label: {series: {c: statistics.fmean(v) for c, v in sorted(by_c.items())}
                    for series, by_c in sorted(by_series.items(), key=lambda kv: _series_order(kv[0]))}
            for label, by_series in cells.items()}


def _number(kind: type[int] | type[float], row: dict[str, str | None], column: str) -> Any:
    text = row.get(column) or ""
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"{column} {text!r} is not {'a whole number' if kind is int else 'a number'}") from None


def _series_order(series: str) -> tuple[int, int]:
    return (0, int(series[1:])) if series.startswith("d") else (1, 0 if series == "off" else 1)
