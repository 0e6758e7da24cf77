"""Thresholds rows at a server's start: the one measured for its backend, model class and GPUs.

runtime/core/thresholds.py holds the rows and says why one set does not fit all; this module
is what the supervisor does with them once per server start. A server specctl launched gets
the row for the groups of settings nobody chose; one it attached to is only told, once, when
its launch line runs a dense model's row on a MoE, with the command that fixes it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from specctl.runtime.core import records
from specctl.runtime.core.settings import PolicySettings, SettingsError
from specctl.runtime.core.thresholds import (
    GROUPS,
    MEASURED_WITH,
    attention_backend,
    for_backend,
    for_server,
    for_tree_server,
    is_moe,
    unset_groups,
)
from specctl.runtime.probes.server_info import draft_topk, spec_state, target_experts
from specctl.runtime.probes.sglang_client import ServerUnreachable
from specctl.runtime.supervisor.port import SupervisorPort


async def adopt_backend_thresholds(sup: SupervisorPort, desired: dict[str, Any], info: dict[str, Any] | None,
                                   gpu_names: list[str | None],
                                   apply: bool = True) -> tuple[bool, dict[str, Any] | None]:
    """Once per server start: thresholds measured for its attention backend on its GPUs.

    Only for a server specctl launched, and only for the groups of settings the
    operator left alone (runtime/core/thresholds.py says why one set does not fit all).
    The row is the one measured for the target's model class (the expert count the plugin
    puts in /server_info): a MoE on Triton gets the MoE row; one measured on another GPU, or
    only on a dense model for a MoE target (FA3, FlashInfer), is not applied, and the
    journal says so once.
    ``apply`` False (the simulator): only that is said; nothing is sent.
    Returns whether it was applied, and the row that fits the server (None: none), applied or not (the
    groups people or calibration set keep theirs): calibration starts its floor's slope from it.
    """
    backend, experts = attention_backend(info), target_experts(info)
    rows = for_tree_server if (draft_topk(info) or 1) > 1 else for_server  # a tree's crossover is its own
    row, why_not = rows(backend, gpu_names, desired, experts=experts)
    if why_not is not None:
        sup.emit(records.event(records.BACKEND_THRESHOLDS_SKIPPED, backend=backend, experts=experts,
                               gpus=sorted({n for n in gpu_names if n}), why=why_not))
    pair = unset_groups(row or {}, desired)  # config, calibration and people: a row fills only the rest
    client = sup.server_client
    if not apply or not pair or client is None:
        return False, row
    try:
        wire = PolicySettings().with_changes({**desired, **pair}).to_wire(pair.keys())
        ok = await client.set_internal_state(wire)
    except (SettingsError, ServerUnreachable) as exc:
        sup.emit(records.event(records.BACKEND_THRESHOLDS_FAILED, backend=backend, error=str(exc)))
        return False, row
    applied = bool(ok) and all(ok)
    sup.emit(records.event(records.BACKEND_THRESHOLDS, backend=backend, experts=experts, changes=pair,
                           ok=applied))
    return applied, row


def note_row_in_effect(sup: SupervisorPort, desired: dict[str, Any], info: dict[str, Any] | None,
                       gpu_names: Sequence[str | None] = ()) -> None:
    """Once at attach: a MoE whose plugin runs a thresholds row measured on a dense model, and the fix.

    An attached server starts with its launch line's settings (SPECCTL_SETTINGS), and
    ``specctl sglang-args`` without ``--experts`` prints the dense row there, which a
    server specctl launches never runs on a MoE (adopt_backend_thresholds: the MoE row
    where one was measured for its backend and GPU, else the defaults). The supervisor
    does not tune a server it did not launch, so it only tells, with the settings that
    fit (``gpu_names`` as NVML reads them pick between the MoE row and the defaults): a
    row the operator chose on purpose (their own --set here, kept in ``desired``) is not said.
    """
    experts, backend = target_experts(info), attention_backend(info)
    row, spec = for_backend(backend), spec_state(info) or {}
    settings = spec.get("settings")
    if not is_moe(experts) or row is None or not isinstance(settings, dict):
        return
    running = _row_running(row, settings, desired)
    if running:
        fits, _ = for_server(backend, list(gpu_names), desired, experts=experts)
        sup.emit(records.event(records.DENSE_THRESHOLDS_ON_MOE, backend=backend, experts=experts,
                               settings=running,
                               why=dense_row_on_moe(backend, experts, running, settings, fits)))


def _row_running(row: Mapping[str, float], settings: Mapping[str, Any], chosen: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of each group that the server runs at the row's values, where the operator left it alone.

    Group by group: an operator who printed sglang-args with their own off_at and on_at still runs
    the row's acceptance floor, and only that is worth a word.
    """
    left = unset_groups(dict(row), dict(chosen))
    running: dict[str, Any] = {}
    for group in GROUPS:
        values = {k: settings.get(k) for k in group if k in left}
        if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isclose(v, left[k])
                          for k, v in values.items()):
            running.update(values)
    return running


def dense_row_on_moe(backend: str | None, experts: int, running: Mapping[str, Any],
                     settings: Mapping[str, Any] | None = None, fits: Mapping[str, float] | None = None) -> str:
    """The one line for a MoE running a dense model's row: what it runs, and both fixes.

    The relaunch fixes it for good (sglang-args with --experts prints the MoE row where one
    was measured for the backend and GPU, else the policy's defaults); ``specctl set`` fixes it
    now, until that server restarts without this supervisor. ``fits``: that MoE row, where it
    applies to this server (None: the defaults are what fits).
    """
    shown = ", ".join(f"{k} {_number(v)}" for k, v in running.items())
    return (f"this server's target is a MoE ({experts} experts) and its plugin runs the {backend} thresholds "
            f"measured on a {MEASURED_WITH} model ({shown}), as `specctl sglang-args` prints them without "
            f"--experts; a MoE's verify cost over the batch is not a {MEASURED_WITH} model's (docs/benchmarks.md): "
            f"relaunch with the environment `specctl sglang-args --experts {experts}` prints (with your other "
            f"flags), or {_to_fitting(running, settings or {}, backend, fits)}")


def _to_fitting(running: Mapping[str, Any], settings: Mapping[str, Any], backend: str | None,
                fits: Mapping[str, float] | None) -> str:
    """The `specctl set` that puts these settings to what fits a MoE, where the server would take it.

    That is the backend's MoE row where ``fits`` gives one, else the policy's defaults. At one
    draft step the default acceptance floor (1.3) is more than a verify can accept, so the
    server's other settings decide whether the plain values are a command that works.
    """
    source = fits if fits else PolicySettings().as_dict()
    back = {k: source[k] for k in running}
    try:
        PolicySettings().with_changes(dict(settings)).with_changes(back)
    except SettingsError:
        return f"set {' and '.join(running)} now with specctl set (docs/policy.md)"
    what = f"the {backend} thresholds measured on a MoE" if fits else "the policy's defaults"
    return f"run {what} now with `specctl set {' '.join(f'{k}={_number(v)}' for k, v in back.items())}`"


def _number(value: Any) -> str:
    """56 rather than 56.0, 1048576 rather than 1.04858e+06: as an operator types it."""
    return str(int(value)) if isinstance(value, (int, float)) and float(value).is_integer() else str(value)
