"""What the policy needs to choose a draft depth: a cost table and an acceptance estimate.

Both are plain data and arithmetic, with no clock and no randomness, so every
tensor-parallel rank that reads the same table and sees the same verifies
computes the same numbers and picks the same depth at the same step.

- :class:`DepthCosts`: seconds one decode step takes per (batch size, depth),
  given at start-up as a table (a start-up profile or the simulator's
  calibrated model, ``specctl.runtime.sim.depth``), never measured by the
  policy itself: a rank's own clock differs from its peers', and a decision
  taken on it would split the ranks.
- :class:`AcceptStats`: how far drafts get accepted, position by position,
  from the accepted counts of each verify, whatever depth drafted them. It
  gives E[min(L, d)] for every candidate depth d, where L is how many drafts
  a request would accept with unlimited depth.
"""

from __future__ import annotations

import bisect
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specctl.runtime.core.json_file import JsonFileError, read_json

MAX_DEPTH = 16  # PolicySettings.steps' upper bound
# A table's bounds: far past any server (SGLang's largest CUDA-graph batch is 1024s), close enough that a crafted
# table costs nothing to read: at most MAX_BUCKETS rows, the top bucket at most MAX_BATCH, a step at most
# MAX_STEP (in the table's unit: 1e9 ms is 11 days), the file at most MAX_TABLE_BYTES.
MAX_BUCKETS = 4096
MAX_BATCH = 1 << 20
MAX_STEP = 1e9
MAX_TABLE_BYTES = 4 << 20
EAGER_ROWS = 1024  # rows priced at load, one per batch size up to here; above, a row is priced when asked
_LAZY_CACHE = 4096  # rows kept of those priced when asked (cleared when full)
# Pseudo-requests of the geometric prior for a position beyond the evidence: a
# position not drafted lately is taken to accept as often as the one before it,
# weighted like one request's worth of evidence (docs/policy.md, "Draft depth").
PRIOR_REQUESTS = 1.0
# Positions deeper than the drafted depth keep their evidence this many times longer than drafted
# ones: their estimate drifts to the geometric tail, and the policy re-tries the deeper depth, only
# after about this many windows, not every few hundred verifies (the simulator's traces under
# SGLang's simulated acceptance switched about once a second with 1).
IDLE_MEMORY = 8


class DepthCostsError(ValueError):
    """A cost table that cannot be used; the message names what is wrong."""


@dataclass(frozen=True)
class DepthCosts:
    """Seconds per decode step by batch-size bucket and draft depth (0 = no drafting).

    ``step_s[i][j]`` is the step time at batch ``buckets[i]`` and depth
    ``depths[j]``. Between buckets the time is interpolated linearly; above the
    largest it is extrapolated from the last two (a decode step's cost is close
    to linear in the batch there).

    The policy prices depths with each bucket's row made non-decreasing in
    depth (:func:`pool_rising`): a deeper draft runs one more draft forward and
    verifies one more token a request, so where a measured row says otherwise
    it is noise (the GPU sweep's row at 8 requests read depth 1 the dearest and
    depth 3 the cheapest, within 6 %), and the depth with the more acceptance
    should not also look cheaper for it. Pooled depths cost the same, and
    acceptance alone tells them apart. ``step_s`` and :meth:`as_dict` keep the
    table as measured.
    """

    buckets: tuple[int, ...]
    depths: tuple[int, ...]
    step_s: tuple[tuple[float, ...], ...]
    source: str = ""
    _rows: list[list[float]] = field(default_factory=list, repr=False, compare=False)
    _priced: list[list[float]] = field(default_factory=list, repr=False, compare=False)
    _lazy: dict[int, list[float]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_table(self.buckets, self.depths, self.step_s)
        self._priced.extend(pool_rising(row) for row in self.step_s)
        # rows for the batch sizes a step sees most, priced once; the rest when asked (a table whose top
        # bucket is a million costs a million rows no more)
        self._rows.extend(self._price(max(bs, 1)) for bs in range(min(self.buckets[-1], EAGER_ROWS) + 1))

    def _price(self, batch_size: int) -> list[float]:
        row = [math.inf] * (max(self.depths) + 1)
        for j, d in enumerate(self.depths):
            row[d] = self._interpolate(batch_size, j)
        return row

    def row(self, batch_size: int) -> list[float]:
        """Step seconds indexed by depth (``inf`` for a depth the table lacks)."""
        rows = self._rows
        if 0 <= batch_size < len(rows):
            return rows[batch_size]
        lazy = self._lazy
        row = lazy.get(batch_size)
        if row is None:
            if len(lazy) >= _LAZY_CACHE:
                lazy.clear()
            row = lazy[batch_size] = self._price(max(batch_size, 1))
        return row

    def _interpolate(self, bs: int, j: int) -> float:
        b, t = self.buckets, self._priced
        if len(b) == 1:
            return t[0][j]
        i = min(max(bisect.bisect_left(b, bs, 1, len(b) - 1), 1), len(b) - 1)
        lo, hi = b[i - 1], b[i]
        if bs <= lo:
            return t[i - 1][j]
        share = (bs - lo) / (hi - lo)
        return max(t[i - 1][j] + share * (t[i][j] - t[i - 1][j]), 1e-9)

    def as_dict(self) -> dict[str, Any]:
        """The JSON form :func:`costs_from_dict` reads (milliseconds, as people read step times)."""
        return {"source": self.source, "buckets": list(self.buckets), "depths": list(self.depths),
                "step_ms": [[round(s * 1e3, 6) for s in row] for row in self.step_s]}


def pool_rising(values: Sequence[float]) -> list[float]:
    """The closest non-decreasing sequence in least squares (pool adjacent violators).

    A run that falls is replaced by its mean, as often as it takes: [6, 8.02, 7.96]
    becomes [6, 7.99, 7.99]. A row that already rises comes back unchanged.
    """
    blocks: list[list[float]] = []  # [sum, count] of each pooled run
    for value in values:
        blocks.append([float(value), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    out: list[float] = []
    for total, count in blocks:
        out.extend([total / count] * int(count))
    return out


def _check_table(buckets: Sequence[int], depths: Sequence[int], step_s: Sequence[Sequence[float]]) -> None:
    if len(buckets) > MAX_BUCKETS:
        raise DepthCostsError(f"{len(buckets)} buckets; a table has at most {MAX_BUCKETS}")
    if len(depths) > MAX_DEPTH + 1:
        raise DepthCostsError(f"{len(depths)} depths; a table has at most {MAX_DEPTH + 1} (0..{MAX_DEPTH})")
    if not buckets or any(not _is_int(b) or not 1 <= b <= MAX_BATCH for b in buckets):
        raise DepthCostsError(f"buckets must be batch sizes 1..{MAX_BATCH}, got {_short(buckets)}")
    if list(buckets) != sorted(set(buckets)):
        raise DepthCostsError(f"buckets must be ascending positive batch sizes, got {_short(buckets)}")
    if not depths or any(not _is_int(d) or not 0 <= d <= MAX_DEPTH for d in depths) \
            or list(depths) != sorted(set(depths)):
        raise DepthCostsError(f"depths must be ascending step counts 0..{MAX_DEPTH}, got {_short(depths)}")
    if len(step_s) != len(buckets):
        raise DepthCostsError(f"step times need one row per bucket ({len(buckets)}), got {len(step_s)}")
    for bs, row in zip(buckets, step_s):
        if len(row) != len(depths):
            raise DepthCostsError(f"bucket {bs}: one step time per depth ({len(depths)}) needed, got {len(row)}")
        for value in row:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_STEP:
                raise DepthCostsError(f"bucket {bs}: step times must be positive numbers up to {MAX_STEP:g}, "
                                      f"got {_short([value])[1:-1]}")


def _short(values: Any) -> str:
    """A list as a message shows it: at most a few items, each at most 24 characters."""
    items = list(values) if isinstance(values, (list, tuple)) else [values]
    shown = [(r if len(r := repr(v)) <= 24 else r[:20] + "...") for v in items[:8]]
    return "[" + ", ".join(shown) + (", ...]" if len(items) > 8 else "]")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def costs_from_dict(raw: Mapping[str, Any]) -> DepthCosts:
    """A table from its JSON form: ``{"buckets": [...], "depths": [...], "step_ms": [[...], ...]}``."""
    if not isinstance(raw, Mapping):
        raise DepthCostsError(f"a cost table is a JSON object, got {type(raw).__name__}")
    missing = [k for k in ("buckets", "depths", "step_ms") if k not in raw]
    if missing:
        raise DepthCostsError(f"a cost table needs {', '.join(missing)}")
    rows = raw["step_ms"]
    if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
        raise DepthCostsError("step_ms must be a list of lists (one row per bucket)")
    buckets, depths = raw["buckets"], raw["depths"]
    if not isinstance(buckets, list) or not isinstance(depths, list):
        raise DepthCostsError("buckets and depths must be lists")
    _check_table(buckets, depths, rows)
    return DepthCosts(tuple(buckets), tuple(depths), tuple(tuple(v / 1e3 for v in r) for r in rows),
                      str(raw.get("source", "")))


def read_costs(path: str | os.PathLike[str]) -> DepthCosts:
    """Read a cost table file (a regular file of at most MAX_TABLE_BYTES, read without blocking);
    DepthCostsError names the file and the fault in one line."""
    try:
        raw = read_json(path, MAX_TABLE_BYTES, "cost table")
    except JsonFileError as exc:
        raise DepthCostsError(str(exc)) from None
    try:
        return costs_from_dict(raw)
    except DepthCostsError as exc:
        raise DepthCostsError(f"{path}: {exc}") from None


class AcceptStats:
    """Acceptance position by position, decayed over verifies (a deterministic moving window).

    For position k (the k-th draft token), ``tries[k]`` counts requests whose
    verify drafted position k and accepted every earlier one, ``hits[k]`` those
    that accepted position k too. Their ratio is the conditional acceptance
    c_k = P(L >= k | L >= k-1), which is the same whatever depth drafted it
    (deeper drafts do not change how the first ones are judged), so verifies
    at every depth add to one estimate. P(L >= d) is the product of c_1..c_d
    and E[min(L, d)] the sum of those products.

    Positions deeper than the current depth get no new evidence; theirs decays
    (``IDLE_MEMORY`` times slower than a drafted position's), and each is pulled
    toward the rate of the position before it (a geometric tail) with the weight
    of ``PRIOR_REQUESTS``. So after a long
    time shallow the estimate of deeper depths drifts to the geometric
    extrapolation of the shallow ones, which for drafts whose acceptance falls
    with position is optimistic: the policy tries the deeper depth again and
    corrects it. Evidence of ``window`` verifies weighs 1/e.
    """

    def __init__(self, window: int) -> None:
        self.decay = 1.0 - 1.0 / max(window, 1)
        self.idle_decay = 1.0 - 1.0 / (max(window, 1) * IDLE_MEMORY)
        self.tries = [0.0] * (MAX_DEPTH + 1)
        self.hits = [0.0] * (MAX_DEPTH + 1)
        self._top = 0  # deepest position with any evidence
        self._expected: list[float] | None = None
        self.verifies = 0  # verifies with drafts since the last reset (not decayed)

    def reset(self) -> None:
        for k in range(self._top + 1):
            self.tries[k] = self.hits[k] = 0.0
        self._top = 0
        self._expected = None
        self.verifies = 0

    def set_window(self, window: int) -> None:
        self.decay = 1.0 - 1.0 / max(window, 1)
        self.idle_decay = 1.0 - 1.0 / (max(window, 1) * IDLE_MEMORY)

    def add(self, accepted: Sequence[int | float], depth: int) -> None:
        """One verify's accepted drafts per request, drafted at ``depth`` (values 0..depth)."""
        n = len(accepted)
        if depth <= 0 or n == 0:
            return
        depth = min(depth, MAX_DEPTH)
        lam, tries, hits = self.decay, self.tries, self.hits
        count: Callable[[Any], int]
        try:  # one C pass to bytes, then memchr-fast counts: a batch of 256 costs about one sum()
            count = bytes(accepted).count  # type: ignore[arg-type]
        except (TypeError, ValueError):  # floats, or counts past 255
            count = accepted.count
        reached = float(n)  # requests that accepted every position before k
        for k in range(1, depth + 1):
            passed = reached - count(k - 1)
            tries[k] = tries[k] * lam + reached
            hits[k] = hits[k] * lam + passed
            reached = passed
        idle = self.idle_decay
        for k in range(depth + 1, self._top + 1):
            tries[k] *= idle
            hits[k] *= idle
        self._top = max(self._top, depth)
        self._expected = None
        self.verifies += 1

    def evidence(self) -> float:
        """Decayed requests behind the first position's estimate."""
        return self.tries[1]

    def expected(self, depth: int) -> list[float]:
        """E[min(L, d)] for d = 0..depth (cached until the next verify)."""
        cached = self._expected
        if cached is not None and len(cached) > depth:
            return cached
        tries, hits = self.tries, self.hits
        out = [0.0]
        survive = 1.0
        rate = hits[1] / tries[1] if tries[1] > 0 else 0.0
        for k in range(1, depth + 1):
            if k > 1:
                rate = (hits[k] + PRIOR_REQUESTS * rate) / (tries[k] + PRIOR_REQUESTS)
            survive *= rate
            out.append(out[-1] + survive)
        self._expected = out
        return out

    def rates(self, depth: int) -> list[float]:
        """The conditional acceptance per position 1..depth (for state(): what the estimate says)."""
        e = self.expected(depth)
        survive = [e[k] - e[k - 1] for k in range(1, depth + 1)]
        prev = [1.0, *survive[:-1]]
        return [round(s / p, 4) if p > 0 else 0.0 for s, p in zip(survive, prev)]


def expected_from_rates(rates: Iterable[float]) -> list[float]:
    """E[min(L, d)] for d = 0.. from conditional acceptance per position (the simulator's law)."""
    out = [0.0]
    survive = 1.0
    for rate in rates:
        survive *= rate
        out.append(out[-1] + survive)
    return out
