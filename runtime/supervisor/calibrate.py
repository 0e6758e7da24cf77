"""The calibration loop: after each poll, the server's step meter to the Calibrator, its plan to the server.

Learned thresholds reach the server the way an operator's ``set`` does
(/set_internal_state, taken by every tensor-parallel rank at the same step
boundary), through ONE function, ``publish``, which never touches a setting
the operator owns. Probes are a forced mode for a few dozen steps, through
``probe``; a probe the operator overtook (any command in the meantime) is
dropped without a word to the server. The fit itself is pure:
runtime/core/calibration.py.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from specctl.runtime.core import records
from specctl.runtime.core.calibration import Calibrator, Plan
from specctl.runtime.core.thresholds import groups_touched

log = logging.getLogger(__name__)

Publish = Callable[[dict[str, Any], str], Awaitable[bool]]  # (values, provenance): False where refused
Probe = Callable[[str], Awaitable[bool]]


class CalibrationLoop:
    """Runs :class:`Calibrator` on each poll's policy state; see the module's docstring.

    ``publish(values, provenance)``: send learned settings (False where the server refused); the
    provenance (how many steps they were learned from) is kept beside them in the desired state.
    ``probe(mode)``: force ``on``/``off`` for a probe, ``auto`` to end it.
    ``owned()``: the settings an operator set (every ``set`` and the config's [policy]).
    ``epoch()``: a count that grows with every operator command; ``wake(seconds)``: poll again that soon.
    """

    def __init__(self, publish: Publish, probe: Probe, emit: Callable[[records.Record], None],
                 owned: Callable[[], Iterable[str]], epoch: Callable[[], int],
                 wake: Callable[[float], None], enabled: bool = True) -> None:
        self.calibrator = Calibrator()
        self.enabled = enabled
        self._publish, self._probe, self._emit = publish, probe, emit
        self._owned, self._epoch, self._wake = owned, epoch, wake
        self._probe_epoch: int | None = None
        self._baseline: dict[str, Any] = {}  # each learned key's value before calibration first set it
        self._since: float | None = None  # when the first learned value was published (unix seconds)
        self._settings: dict[str, Any] = {}

    def row_in_force(self, row: dict[str, Any] | None) -> None:
        """The thresholds row measured for this server (None: none), at each start: the floor's slope never goes
        under the row's. Not the slope in force: after a restart that is one calibration learned and restored."""
        self.calibrator.least_slope = float((row or {}).get("accept_slope", 0.0))

    def owned(self) -> set[str]:
        return groups_touched(self._owned())

    async def after_poll(self, spec: dict[str, Any] | None, now: float) -> None:
        """One poll's policy state (None: no server state this time)."""
        if spec is None:
            return
        if isinstance(spec.get("settings"), dict):
            self._settings = dict(spec["settings"])
        was_probing = self.calibrator.probing
        plan = self.calibrator.observe(spec, self.owned(), frozen=not self.enabled)
        if plan.probe is not None:
            await self._carry_probe(plan, was_probing)
        elif plan.probe_s is not None:
            self._wake(plan.probe_s)
        if plan.publish:
            await self._carry_publish(plan, now)

    async def _carry_probe(self, plan: Plan, was_probing: str | None) -> None:
        if plan.probe == "auto":
            overtaken = self._probe_epoch is not None and self._epoch() != self._probe_epoch
            self._probe_epoch = None
            ok = overtaken or await self._probe("auto")
            self._emit(records.event(records.CALIBRATION_PROBE, state=was_probing, bucket=plan.probe_bucket,
                                     phase="end", ok=ok, overtaken=overtaken,
                                     probe_steps=self.calibrator.probe_steps, steps_seen=self.calibrator.steps_seen))
            return
        assert plan.probe is not None
        self._probe_epoch = self._epoch()
        ok = await self._probe(plan.probe)
        self._emit(records.event(records.CALIBRATION_PROBE, state=plan.probe, bucket=plan.probe_bucket,
                                 phase="begin", ok=ok))
        if ok and plan.probe_s is not None:
            self._wake(plan.probe_s)

    async def _carry_publish(self, plan: Plan, now: float) -> None:
        values = {k: v for k, v in plan.publish.items() if k not in self.owned()}
        if not values:
            return
        for key in values:
            self._baseline.setdefault(key, self._settings.get(key))
        ok = await self._publish(values, f"from {self.calibrator.steps_seen:,} steps")
        if ok and self._since is None:
            self._since = now
        fit = plan.fit
        self._emit(records.event(
            records.CALIBRATED, changes=values, ok=ok,
            accept=None if fit is None else fit.accept,
            table=[] if fit is None else [bf.as_dict() for bf in fit.buckets if bf.verdict != "unmeasured"],
            readings={str(b): int(c.steps) for (b, d), c in sorted(self.calibrator.cells.items())
                      if c.steps >= 1 and d == 0} if fit else {},
            probes=self.calibrator.probes, probe_steps=self.calibrator.probe_steps,
            steps_seen=self.calibrator.steps_seen))

    def show(self) -> dict[str, Any]:
        """What ``specctl calibration show`` prints: state, learned values since when, the table."""
        table = self.calibrator.show(self._settings, self.owned())
        return {"enabled": self.enabled, "since": self._since, "owned": sorted(self.owned()),
                "probing": self.calibrator.probing, **table}

    async def reset(self) -> dict[str, Any]:
        """Forget the readings and put back what the learned values replaced (where the operator did not since)."""
        back = {k: v for k, v in self._baseline.items() if v is not None and k not in self.owned()}
        ok = await self._publish(back, "calibration reset") if back else True
        if self.calibrator.probing is not None:
            await self._probe("auto")
        self.calibrator.reset()
        self._baseline.clear()
        self._since = None
        self._emit(records.event(records.CALIBRATION_RESET, restored=back, ok=ok))
        return {"restored": back, "ok": ok}
