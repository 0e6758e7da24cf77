"""Say-it-once detectors: they turn what every sample repeats into one event at the edge.

A sample says a GPU is failed, or that the server's "off" is slow, every half
second; the journal and the event log want it said once when it begins (and,
for a GPU, once when it ends). Each detector remembers what it has said; the
supervisor resets the per-server ones when a server starts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from specctl.runtime.core import records, view_only
from specctl.runtime.core.wire import COSTS_ENV, SETTINGS_ENV
from specctl.runtime.probes.server_info import EAGER_PREFILL_WHY, prefill_graphs


class Once:
    """True the first time it is asked after a reset, False after that."""

    def __init__(self) -> None:
        self._said = False

    def first(self) -> bool:
        said, self._said = self._said, True
        return not said

    def reset(self) -> None:
        self._said = False


class GpuFaults:
    """``gpu_failed`` when a GPU's state becomes ``failed``, ``gpu_recovered`` when it reads ``ok`` again.

    "unread" (the simulator is down) is neither: nothing is known about the GPU.
    """

    def __init__(self) -> None:
        self._failed: set[Any] = set()  # indexes said failed

    def changes(self, gpus: Iterable[records.Gpu]) -> list[records.Event]:
        said: list[records.Event] = []
        for gpu in gpus:
            index, state = gpu.get("index"), gpu.get("state")
            if state == "failed" and index not in self._failed:
                self._failed.add(index)
                said.append(records.event(records.GPU_FAILED, index=index, error=gpu.get("error")))
            elif state == "ok" and index in self._failed:
                self._failed.discard(index)
                said.append(records.event(records.GPU_RECOVERED, index=index))
        return said

    def forget(self) -> None:
        """Another GPU source's GPU 0 is not the one that failed."""
        self._failed.clear()


class SwitchCursor:
    """The policy's switches (each with a rising ``seq``) that have not been said yet.

    The server keeps its recent switches; a supervisor that attached late (or a
    server that restarted, its ``seq`` back at 0) starts from the newest, so old
    switches are not told as new.
    """

    def __init__(self) -> None:
        self._last: int | None = None

    def start(self, owns_process: bool) -> None:
        """A server we launched has made no switch yet; one we attached to may have made many."""
        self._last = 0 if owns_process else None

    def new(self, switches: list[dict[str, Any]]) -> list[records.Event]:
        newest = max((s.get("seq", 0) for s in switches), default=0)
        if self._last is None or newest < self._last:  # attached late, or the server restarted
            self._last = newest
            return []
        last, self._last = self._last, newest
        # "from" and "to" are the draft depths either side of the switch (0 = off)
        return [records.event(records.SPEC_SWITCH, on=sw.get("on"), reason=sw.get("reason"),
                              batch_size=sw.get("batch_size"), step=sw.get("step"),
                              **{"from": sw.get("from"), "to": sw.get("to")})
                for sw in switches if sw.get("seq", 0) > last]


class ServerNotes:
    """What a server is, said once per server start: a slow "off", eager prefills, view only.

    Each answers with the event to journal the first time its condition holds, None after
    that (and None while it does not hold); :meth:`reset` when a server starts.
    """

    def __init__(self) -> None:
        self._slow_off, self._eager_prefill, self._view_only = Once(), Once(), Once()
        self._no_depth_costs = Once()

    def reset(self) -> None:
        for once in (self._slow_off, self._eager_prefill, self._view_only, self._no_depth_costs):
            once.reset()

    def off_state(self, spec: dict[str, Any]) -> records.Event | None:
        """Its "off" is SGLang's slow steps-0 state rather than fast off."""
        off = spec.get("off_state")
        if isinstance(off, dict) and off.get("fast") is False and self._slow_off.first():
            return records.event(records.SLOW_OFF_STATE, why=off.get("why_not"))
        return None

    def eager_prefill(self, info: dict[str, Any] | None) -> records.Event | None:
        """It runs its prefills eagerly: there the off state costs more.

        Why: eager prefills put the scheduler's CPU on the critical path while prompts arrive, and the
        speculative server's ops run slower there (docs/sglang-plugin.md, "Fast off").
        """
        if prefill_graphs(info) is False and self._eager_prefill.first():
            return records.event(records.EAGER_PREFILL, why=EAGER_PREFILL_WHY)
        return None

    def view_only(self, sample: records.Sample) -> records.Event | None:
        """It can be watched but not steered, and why (runtime/core/view_only.py): no plugin, no
        speculation, or a tree draft. The samples go on; steering commands are refused."""
        why = view_only.reason(sample)
        if why is not None and self._view_only.first():
            return records.event(records.VIEW_ONLY, reason=why, why=view_only.refusal(why, sample["server"].get("tp")))
        return None

    def depth_costs(self, spec: dict[str, Any], launched: bool) -> records.Event | None:
        """Built for a middle depth, but with no cost table to price it: auto will never choose it.

        Why say it: an operator who asked for depths 0,1,2,3 expects auto to use 1 and 2; without
        a table the policy stays on/off at ``steps`` (docs/policy.md, "Draft depth"), and nothing else
        shows it. ``depth_model`` is the server's own word, so a simulator (which prices depths
        with its own model) or an attached server given SPECCTL_DEPTH_COSTS is not told so.
        """
        depths = spec.get("candidates")  # the depths auto may use now: the built ones up to steps
        raw = spec.get("settings")
        settings: dict[str, Any] = raw if isinstance(raw, dict) else {}
        deepest = settings.get("steps")
        if spec.get("depth_model") is not False or not isinstance(depths, list) or not isinstance(deepest, int):
            return None
        if not any(isinstance(d, int) and 0 < d < deepest for d in depths) or not self._no_depth_costs.first():
            return None
        built = [d for d in settings.get("candidates") or depths if isinstance(d, int) and d > 0]
        return records.event(records.DEPTH_COSTS_MISSING, steps=deepest, depths=built,
                             why=no_depth_costs_line(deepest, built, launched))

    def launched_without_costs(self, env: Mapping[str, str] | None) -> records.Event | None:
        """The same note at the launch, from the environment the server is started with, not minutes
        later when a loaded server first answers: its settings (SPECCTL_SETTINGS) and no SPECCTL_DEPTH_COSTS."""
        if not env or SETTINGS_ENV not in env or COSTS_ENV in env:
            return None
        try:
            settings = json.loads(env[SETTINGS_ENV])
        except ValueError:
            return None
        if not isinstance(settings, dict) or not isinstance(steps := settings.get("steps"), int):
            return None
        built = [d for d in settings.get("candidates") or [] if isinstance(d, int)]
        spec = {"depth_model": False, "candidates": [d for d in built if d <= steps], "settings": settings}
        return self.depth_costs(spec, launched=True)


def no_depth_costs_line(steps: int, depths: list[int], launched: bool) -> str:
    """The words `specctl sglang-args` prints for the same case, for a server this supervisor runs or watches."""
    given = ("without --depth-costs FILE" if launched
             else "without a cost table (SPECCTL_DEPTH_COSTS in its environment)")
    return (f"{given} auto chooses between 0 and {steps} steps only; `specctl force-on --steps N` still pins "
            f"any of {depths} (docs/policy.md)")
