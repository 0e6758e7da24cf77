"""What each decode step cost, per batch-size bucket and depth: the readings calibration fits.

The policy holds one :class:`StepMeter` and publishes it in its state
(``meter``). The caller that runs the steps tells it how long each one took
(the plugin from the time between two decisions, the simulator from its cost
model); the policy feeds it acceptance from each verify. The meter never
reads a clock and never takes part in a decision: a tensor-parallel rank's
readings may differ from another's without changing what any rank decides.

Counters are cumulative, so a reader that polls takes differences and loses
nothing between polls. Each cell is a list of six numbers (JSON-friendly):
``[steps, seconds, seconds², verifies, accepted, accepted²]``, where
``accepted`` sums each verify's mean accepted draft tokens per request.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

# Lower edges of the batch-size buckets: about sqrt(2) apart, so a bucket's step time varies little
# inside it, and few enough (19) that each fills with readings quickly.
BUCKET_EDGES: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768)
# A step slower than this is an idle gap or a stall, not a decode step's cost (the plugin times
# steps as the interval between two decisions, which also spans a server that had nothing to run).
MAX_STEP_S = 2.0
# A step more than OUTLIER times the fastest step of its cell is left out: a few such steps (an idle gap
# between loads, a stall, a cold first step after a start, a long prompt's prefill) among thousands of
# decode steps would swamp the variance every call is judged by (seen on the GPU: a 4.5 ms cell scattered
# by 14 %). The fastest, not the mean: a cold start's slow first steps would raise a mean's bar for all.
OUTLIER = 4.0
CELL_FIELDS = ("steps", "seconds", "seconds_sq", "verifies", "accepted", "accepted_sq")


def bucket(batch_size: int) -> int:
    """The lower edge of the bucket that holds ``batch_size`` (0 for an empty batch)."""
    if batch_size < 1:
        return 0
    return BUCKET_EDGES[bisect_right(BUCKET_EDGES, batch_size) - 1]


def bucket_upper(lower: int) -> int:
    """The largest batch size in the bucket whose lower edge is ``lower`` (a large number for the last)."""
    i = BUCKET_EDGES.index(lower)
    return BUCKET_EDGES[i + 1] - 1 if i + 1 < len(BUCKET_EDGES) else 1 << 20


class StepMeter:
    """Cumulative step time and acceptance per (bucket, depth)."""

    def __init__(self) -> None:
        self._cells: dict[int, dict[int, list[float]]] = {}
        self._least: dict[tuple[int, int], float] = {}  # the fastest step seen per (bucket, depth)
        self._first: dict[tuple[int, int], float] = {}  # a cell's first step, until a second one judges it
        self._skip = False

    def skip_next(self) -> None:
        """The next timed step is a switch's: its time is the switch's, not the state's."""
        self._skip = True

    def step(self, batch_size: int, depth: int, seconds: float) -> None:
        """One decode step of ``batch_size`` at ``depth`` took ``seconds`` (the step after a switch is left out)."""
        skip, self._skip = self._skip, False
        if not skip:
            self.timed(batch_size, depth, seconds)

    def timed(self, batch_size: int, depth: int, seconds: float) -> None:
        """One decode step's time, from a caller that leaves out switch steps itself (the plugin)."""
        if batch_size < 1 or not 0.0 < seconds <= MAX_STEP_S:
            return
        key = (bucket(batch_size), depth)
        if key not in self._least:  # a cell's first step waits for the second: it is often a cold one
            self._least[key] = seconds
            self._first[key] = seconds
            return
        cell = self._cell(batch_size, depth)
        least = self._least[key] = min(self._least[key], seconds)
        for t in (self._first.pop(key, None), seconds):
            if t is not None and t <= OUTLIER * least:  # else a stall, an idle gap, a cold step or a long prefill
                cell[0] += 1
                cell[1] += t
                cell[2] += t * t

    def verify(self, batch_size: int, depth: int, mean_accepted: float) -> None:
        """One verify of ``batch_size`` requests at ``depth`` accepted ``mean_accepted`` drafts a request."""
        if batch_size < 1 or depth < 1:
            return
        cell = self._cell(batch_size, depth)
        cell[3] += 1
        cell[4] += mean_accepted
        cell[5] += mean_accepted * mean_accepted

    def _cell(self, batch_size: int, depth: int) -> list[float]:
        by_depth = self._cells.setdefault(bucket(batch_size), {})
        return by_depth.setdefault(depth, [0.0] * len(CELL_FIELDS))

    def as_dict(self) -> dict[str, Any]:
        """``{"4": {"0": [...], "3": [...]}, ...}``: buckets by lower edge, depths, the six counters."""
        return {str(b): {str(d): [round(v, 9) for v in cell] for d, cell in sorted(depths.items())}
                for b, depths in sorted(self._cells.items())}
