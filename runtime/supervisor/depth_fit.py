"""A draft-depth cost table measured from what a server did: step times per (batch bucket, depth) from its journal.

The policy prices each candidate depth with a table given at start
(``--depth-costs``, :mod:`specctl.runtime.core.depth_model`). This module
measures that table on the operator's own server, offline, from the samples
the supervisor journals every ``--interval`` (0.5 s by default; ``specctl
depth-costs``), instead
of predicting it (the simulator's model) or sweeping dummy weights on a GPU
(bench/gpu/depth_table.py).

Why offline and not in the plugin: every tensor-parallel rank must price
depths with the same table, or the ranks choose different depths and their
collectives hang. A rank's own step clock differs from its peers'; a table
measured here, in the supervisor's CLI, from one journal, is one file that
every rank reads at the next start. Everything here is a pure function of the
journal's records (no clock, no randomness, no I/O: the CLI reads the
journals with journal.read_records), so the same journals always give the same table.

The rule (docs/policy.md, "Draft depth"): an *interval* is two consecutive
samples of one journal, of the same server start (same pid and restart count,
uptime increasing), at most :data:`MAX_GAP_S` apart (and at least
:data:`MIN_INTERVAL_S`: a sample taken at once after a command measures the
poll's latency more than the steps), in which every decode step ran at one
depth d and the running batch stayed in one bucket. For d > 0 the increase of
``steps_at[d]`` equals the increase of ``step``; for d = 0 no ``steps_at``
entry increased while ``step`` did. Its step time is the elapsed seconds over
its decode steps, at batch = the mean of the two ``running`` values. A cell's
time is the median of its intervals' step times, each weighted by its decode
steps; a cell counts as measured with at least :data:`MIN_STEPS` decode steps
in :data:`MIN_INTERVALS` intervals.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specctl.runtime.core.depth_model import DepthCosts
from specctl.runtime.core.records import whole

#: The batch buckets of a measured table when no prior names its own.
DEFAULT_BUCKETS: tuple[int, ...] = (1, 4, 8, 16, 24, 32, 48, 64, 128, 256)
#: Samples further apart than this do not make an interval: the supervisor samples every --interval (0.5 s by
#: default), so a longer gap is a stall (the server unreachable, the supervisor suspended) whose steps are not steady.
MAX_GAP_S = 2.0
#: Samples closer than this do not either: the supervisor polls at once after a command, and over a few
#: milliseconds the step counter's read latency, not the steps, sets the ratio.
MIN_INTERVAL_S = 0.1
#: A cell is measured with at least this many decode steps, in at least this many intervals.
MIN_STEPS = 50
MIN_INTERVALS = 3


@dataclass(frozen=True)
class Interval:
    """Decode steps between two samples, all at one depth and one batch bucket."""

    start: float  # the first sample's journal time
    depth: int
    batch: float  # the mean of the running batch at both ends
    steps: int
    seconds: float

    @property
    def step_s(self) -> float:
        return self.seconds / self.steps


@dataclass(frozen=True)
class Evidence:
    """What one (bucket, depth) cell was measured from; ``step_s`` is None without any interval."""

    step_s: float | None
    steps: int
    intervals: int

    @property
    def enough(self) -> bool:
        return self.step_s is not None and self.steps >= MIN_STEPS and self.intervals >= MIN_INTERVALS


NO_EVIDENCE = Evidence(None, 0, 0)


@dataclass(frozen=True)
class Fit:
    """The measured table where the evidence suffices, the prior's value elsewhere, and what is lacking."""

    buckets: tuple[int, ...]
    depths: tuple[int, ...]
    evidence: dict[tuple[int, int], Evidence]
    step_s: dict[tuple[int, int], float]  # every cell that has a value: measured, else the prior's
    measured: frozenset[tuple[int, int]]
    missing: tuple[tuple[int, int], ...]  # (bucket, depth) cells with neither enough evidence nor a prior

    def table(self, source: str) -> DepthCosts:
        """The cost table; only for a fit without missing cells."""
        if self.missing:
            raise ValueError(f"cells without a value: {self.missing}")
        rows = tuple(tuple(self.step_s[(b, d)] for d in self.depths) for b in self.buckets)
        return DepthCosts(self.buckets, self.depths, rows, source)


def built_depths(samples: Iterable[Mapping[str, Any]]) -> tuple[int, ...]:
    """The depths the journalled servers were built for, where one was built with several (else empty)."""
    depths: set[int] = set()
    for sample in samples:
        spec = sample.get("spec")
        settings = spec.get("settings") if isinstance(spec, dict) else None
        built = settings.get("candidates") if isinstance(settings, dict) else None
        if isinstance(built, list):
            ints = [d for d in built if whole(d, 0) is not None]
            if len(ints) >= 2:
                depths.update(ints)
    return tuple(sorted(depths))


def nearest_bucket(batch: float, buckets: Sequence[int]) -> int:
    """The bucket nearest ``batch`` (a tie goes to the smaller one)."""
    return min(buckets, key=lambda b: (abs(b - batch), b))


def intervals(samples: Sequence[Mapping[str, Any]], buckets: Sequence[int]) -> list[Interval]:
    """Every interval of one journal's consecutive samples that the rule counts (the module's docstring)."""
    out = []
    for a, b in zip(samples, samples[1:]):
        found = interval(a, b, buckets)
        if found is not None:
            out.append(found)
    return out


def interval(a: Mapping[str, Any], b: Mapping[str, Any], buckets: Sequence[int]) -> Interval | None:
    """The interval from sample ``a`` to the next sample ``b``; None where the rule does not count it."""
    spec_a, spec_b, server_a, server_b = a.get("spec"), b.get("spec"), a.get("server"), b.get("server")
    if not all(isinstance(x, dict) for x in (spec_a, spec_b, server_a, server_b)):
        return None
    assert isinstance(spec_a, dict) and isinstance(spec_b, dict)
    assert isinstance(server_a, dict) and isinstance(server_b, dict)
    seconds = _number(b.get("t")) - _number(a.get("t"))
    if not MIN_INTERVAL_S <= seconds <= MAX_GAP_S or not _same_start(server_a, server_b):
        return None
    step_a, step_b = whole(spec_a.get("step"), 0), whole(spec_b.get("step"), 0)
    if step_a is None or step_b is None or step_b <= step_a:
        return None
    depth = _one_depth(spec_a.get("steps_at"), spec_b.get("steps_at"), step_b - step_a)
    run_a, run_b = _number(server_a.get("running")), _number(server_b.get("running"))
    if depth is None or not (run_a >= 1 and run_b >= 1):
        return None
    if nearest_bucket(run_a, buckets) != nearest_bucket(run_b, buckets):
        return None
    return Interval(_number(a.get("t")), depth, (run_a + run_b) / 2, step_b - step_a, seconds)


def _number(value: Any) -> float:
    """A finite number, or NaN (which every comparison rejects)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return float("nan")


def _same_start(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """One server start at both ends: the same pid and restart count, its uptime going up."""
    if a.get("pid") != b.get("pid") or a.get("restarts") != b.get("restarts"):
        return False
    up_a, up_b = a.get("uptime_s"), b.get("uptime_s")
    if up_a is None and up_b is None:
        return True
    return _number(up_b) > _number(up_a)


def _one_depth(at_a: Any, at_b: Any, steps: int) -> int | None:
    """The one depth every decode step of the interval ran at, or None (mixed, or counters that went back)."""
    if not isinstance(at_a, dict) or not isinstance(at_b, dict):
        return None
    moved: dict[int, int] = {}
    for key in set(at_a) | set(at_b):
        before, after = whole(at_a.get(key, 0), 0), whole(at_b.get(key, 0), 0)
        depth = _depth_key(key)
        if before is None or after is None or depth is None or after < before:
            return None  # a counter that went back is a restart the pid did not show
        if after > before:
            moved[depth] = after - before
    if not moved:
        return 0
    if len(moved) == 1:
        (depth, count), = moved.items()
        return depth if count == steps else None
    return None


def _depth_key(key: Any) -> int | None:
    if not isinstance(key, str) or not key.isdigit():
        return None
    depth = int(key)
    return depth if depth >= 1 else None


def weighted_median(pairs: Iterable[tuple[float, int]]) -> float:
    """The smallest value at which the weights reach half their total (``pairs``: value, weight > 0)."""
    ordered = sorted(pairs)
    total = sum(w for _, w in ordered)
    seen = 0
    for value, weight in ordered:
        seen += weight
        if 2 * seen >= total:
            return value
    raise ValueError("no values")


def evidence(found: Iterable[Interval], buckets: Sequence[int]) -> dict[tuple[int, int], Evidence]:
    """Per (bucket, depth): the step-weighted median step time, its decode steps and intervals.

    Weighted by steps because an interval's time is a mean over its steps, and the
    fewer the steps the more the sample's timing jitter moves it; a median and not
    the ratio of totals because a stall (a collection, a burst of prefills) inflates
    one interval and should not move the cell.
    """
    cells: dict[tuple[int, int], list[Interval]] = {}
    for one in found:
        cells.setdefault((nearest_bucket(one.batch, buckets), one.depth), []).append(one)
    return {key: Evidence(weighted_median((i.step_s, i.steps) for i in group), sum(i.steps for i in group),
                          len(group))
            for key, group in sorted(cells.items())}


def fit(journals: Sequence[Sequence[Mapping[str, Any]]], depths: Sequence[int], buckets: Sequence[int],
        prior: DepthCosts | None = None) -> Fit:
    """Measure every (bucket, depth) cell over the journals' samples (one sequence per journal, as written).

    A cell without enough evidence keeps the prior's value at that bucket (the
    prior's table read there, which is its own cell when its buckets are the
    same), and is missing where there is no prior or it prices no such depth.
    """
    found = [one for samples in journals for one in intervals(samples, buckets)]
    seen = evidence(found, buckets)
    step_s: dict[tuple[int, int], float] = {}
    measured: set[tuple[int, int]] = set()
    missing: list[tuple[int, int]] = []
    for b in buckets:
        for d in depths:
            cell = seen.get((b, d), NO_EVIDENCE)
            kept = prior_value(prior, b, d)
            if cell.enough and cell.step_s is not None:
                step_s[(b, d)] = cell.step_s
                measured.add((b, d))
            elif kept is not None:
                step_s[(b, d)] = kept
            else:
                missing.append((b, d))
    return Fit(tuple(buckets), tuple(depths), seen, step_s, frozenset(measured), tuple(missing))


def prior_value(prior: DepthCosts | None, bucket: int, depth: int) -> float | None:
    """The prior's step seconds at (bucket, depth): its own cell where it has that bucket, else its
    table read at that batch as the policy reads it; None without a prior or a column for the depth."""
    if prior is None or depth not in prior.depths:
        return None
    j = prior.depths.index(depth)
    if bucket in prior.buckets:
        return prior.step_s[prior.buckets.index(bucket)][j]
    return prior.row(bucket)[depth]
