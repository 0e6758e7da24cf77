"""Load thresholds that suit the server's attention backend, from measurement.

Where speculation stops paying depends less on the model than on how fast the
attention backend serves a verify: on one H200 (SGLang 0.5.17, Llama-8B shapes,
acceptance length 2.8) static EAGLE-3 and no speculation are level at 32
requests with Triton, whose verify runs its extend kernel; with FA3 static
EAGLE-3 is ahead at every concurrency measured (1.1-1.2x at 256); FlashInfer
lies between (1.04x at 32, 0.94x at 64). One threshold cannot serve them all,
so when specctl launches a server, the supervisor reads the backend SGLang chose
from /server_info and applies the matching row below to every group of settings
the operator did not set. Each row comes from one GPU sweep on one H200 through
the simulator (a preset calibrated to it), and applies only where NVML names the
server's GPUs as that GPU (:func:`for_server`): elsewhere the defaults stay, and
the journal says why. Rows are keyed by model class too, by the target's routed
experts as the plugin reports them: ``BY_BACKEND`` holds dense targets
(Llama-3.1-8B), ``MOE_BY_BACKEND`` a mixture of experts (Qwen3-30B-A3B's shapes,
128 experts), whose crossover on Triton lies between 128 and 256 requests rather
than near 32. A MoE on a backend without a MoE row keeps the defaults. Backends
not listed (trtllm, ...) keep the policy's defaults: they were not measured.
How each floor follows the simulated break-even: docs/policy.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from specctl.runtime.core.settings import MAX_BATCH

# The acceptance floor (min_accept + accept_slope * batch size) sits about 0.1 accepted drafts
# under the simulated break-even (bench/accept_breakeven.py --breakeven) at small batches: at one
# request a 64-verify mean scatters by about 0.1, and a dip under the floor costs probe_after steps
# off where drafting pays. off_at is where the floor passes 3 accepted drafts (all of steps), so it
# turns off for load only where no acceptance could pay. off_at NEVER: no load turns speculation
# off, the floor decides. Curves and envelopes: docs/policy.md.
NEVER = MAX_BATCH  # the largest off_at the policy takes
BY_BACKEND: dict[str, dict[str, float]] = {  # dense targets (MEASURED_WITH)
    # fitted on bench/gpu/results/anchor/anchor-2026-11-29.csv (preset h200-llama8b)
    "triton": {"off_at": 56, "on_at": 24, "min_accept": 0.3, "accept_slope": 0.05},
    # fitted on bench/gpu/results/fa3/sweep-single-windows.csv (preset h200-llama8b-fa3)
    "fa3": {"off_at": NEVER, "on_at": NEVER - 1, "min_accept": 0.15, "accept_slope": 0.0042},
    # fitted on bench/gpu/results/flashinfer/sweep-*-earlypub.csv (preset h200-llama8b-flashinfer);
    # on_at 48: speculation still wins there at the sweep's acceptance
    "flashinfer": {"off_at": 114, "on_at": 48, "min_accept": 0.5, "accept_slope": 0.022},
}
# A MoE's break-even is a hump (a verify's extra tokens reach more experts than a decode of few
# requests does) that stays under 3 accepted drafts to 256 requests: no load turns it off, the floor
# decides, and a line cannot follow the hump (at accept length 2.0 and 4-8 requests it stays on where
# off pays 6-8 %).
MOE_BY_BACKEND: dict[str, dict[str, float]] = {
    # fitted on bench/gpu/results/moe/triton-realtok-sweep2.csv, triton-newrow-{a,b,c}.csv (preset h200-qwen3moe)
    "triton": {"off_at": NEVER, "on_at": NEVER - 1, "min_accept": 0.62, "accept_slope": 0.0105},
    # fitted on bench/gpu/results/moe/fa3-sweep2.csv, fa3-sweep2-r2.csv (preset h200-qwen3moe-fa3);
    # held with real tokens in bench/gpu/results/moe/fa3-realtok-sweep2.csv
    "fa3": {"off_at": NEVER, "on_at": NEVER - 1, "min_accept": 0.6, "accept_slope": 0.0016},
}


# Settings that only make sense together: an operator who sets one of a group
# keeps the policy's value for the others rather than a mix of two designs.
GROUPS: tuple[tuple[str, ...], ...] = (("off_at", "on_at"), ("min_accept", "accept_slope"))


def set_together(field: str | None, changes: Iterable[str]) -> str:
    """A hint for a refused setting that is half of a pair the operator changed only the other half of.

    ``set off_at=8`` against the default on_at 24 is refused for on_at, which the operator never
    typed: say which pair to set, and how.
    """
    changed = set(changes)
    for group in GROUPS:
        if field in group and not set(group) <= changed and changed & set(group):
            given = " ".join(f"{k}=..." for k in group)
            return f"; {' and '.join(group)} go together: set both in one command (specctl set {given})"
    return ""


def groups_touched(changes: Iterable[str]) -> set[str]:
    """Every setting of each group that ``changes`` touches.

    ``specctl set off_at=100`` on a server running FlashInfer's row (114 / 48) runs 100 / 48: the
    supervisor keeps that on_at along, so a restart, which leaves the row's pair out once the operator
    owns half of it, brings back 100 / 48 and not the policy's 24.
    """
    changed = set(changes)
    return changed.union(*(group for group in GROUPS if changed & set(group)))


def unset_groups(measured: dict[str, float], chosen: dict[str, Any]) -> dict[str, float]:
    """The measured settings whose whole group the operator left alone."""
    keep: dict[str, float] = {}
    for group in GROUPS:
        if not any(key in chosen for key in group):
            keep.update({key: measured[key] for key in group if key in measured})
    return keep


def attention_backend(info: dict[str, Any] | None) -> str | None:
    """The backend SGLang resolved, as /server_info reports it."""
    value = (info or {}).get("attention_backend")
    return value.lower() if isinstance(value, str) and value else None


def model_class(experts: int | None) -> str:
    """"moe" for a target of more than one routed expert, else "dense" (None: not known, taken as dense)."""
    return "moe" if is_moe(experts) else MEASURED_WITH


def for_backend(backend: str | None, experts: int | None = None) -> dict[str, float] | None:
    """The measured thresholds for ``backend`` and the target's model class, or None where none were measured.

    ``experts`` None or 0-1: the dense row (``BY_BACKEND``); more: the MoE row (``MOE_BY_BACKEND``).
    """
    if backend is None:
        return None
    pair = (MOE_BY_BACKEND if is_moe(experts) else BY_BACKEND).get(backend)
    return dict(pair) if pair else None


# Every row above was measured on one NVIDIA H200. Where speculation stops paying moves with the
# GPU as much as with the backend (the report's 8x RTX PRO 6000 with FlashInfer loses drafting at
# 2-16 requests, where the H200's FlashInfer row keeps it on), so a row applies only on that GPU.
MEASURED_ON = "H200"
# ... and BY_BACKEND with a dense target (Llama-3.1-8B): a MoE's verify reads more experts' weights
# the more tokens it checks, so its crossover moves (Triton: between 128 and 256 requests, not 32).
MEASURED_WITH = "dense"


def for_server(backend: str | None, gpu_names: Sequence[str | None], chosen: dict[str, Any] | None = None,
               experts: int | None = None) -> tuple[dict[str, float] | None, str | None]:
    """The row for a server on these GPUs with this target, and why not where a row exists but does not apply.

    ``gpu_names`` as NVML reports them (``NVIDIA H200``); an empty list or a None
    name means they could not be read, and then no row is applied either.
    ``experts``: the target's routed experts as the plugin reads them from its HF
    config (0 or 1: dense; more: a MoE, which gets ``MOE_BY_BACKEND``'s row, where
    one was measured for its backend). None means the server did not say (a plugin
    older than the count, or a block without it): the dense row then applies as it
    did before specctl could tell. Every server specctl
    launches runs the plugin of the same install, which says, so None is an old
    plugin in another environment, not the common case; refusing every row there
    would take the measured thresholds from dense servers that were fine, while a
    MoE behind an old plugin is one upgrade away from being told.
    ``chosen``: the operator's own settings. Where they cover every group of the
    row, a row that stays out changes nothing, and there is no why to say.
    """
    row = for_backend(backend, experts)
    if row is not None:  # measured for this backend and model class: only the GPU can keep it out
        gpu = _why_not(backend, gpu_names, model_class(experts))
        if gpu is None:
            return row, None
        left = unset_groups(row, chosen or {})
        return None, _said([gpu], list(left)) if left else None
    dense = for_backend(backend)
    if dense is None:
        return None, None
    # a MoE on a backend measured for dense targets only: both reasons the dense row stays out
    reasons = [why for why in (_why_not(backend, gpu_names), _why_not_model(backend, experts)) if why]
    left = unset_groups(dense, chosen or {})
    return None, _said(reasons, list(left)) if left else None


# A tree under specctl's switch (topk 4, 2 steps, 16 draft tokens; SPECCTL_TREE_SWITCH=1) has rows
# of its own: its verify checks 16 tokens a request, so it stops paying at fewer requests (the static
# tree fell below no speculation at 16 on the H200 with Triton). The load pair only: the tree's
# acceptance break-even is not measured. Fitted on bench/gpu/results/topk/treesw-triton-s7.csv.
TREE_BY_BACKEND: dict[str, dict[str, float]] = {"triton": {"off_at": 16, "on_at": 8}}
TREE_ROWS = ("the thresholds measured per backend are a chain's; a tree's verify costs more, so it stops paying at "
             "fewer requests (on one H200 with Triton the static topk-4 tree fell below no speculation at 16)")


def for_tree_server(backend: str | None, gpu_names: Sequence[str | None], chosen: dict[str, Any] | None = None,
                    experts: int | None = None) -> tuple[dict[str, float] | None, str | None]:
    """:func:`for_server` for a tree under the switch: the tree's row where it was measured, else why not.

    A chain's row never applies to a tree (its crossover is later). The tree's row applies on
    the backend, model class and GPU it was measured with (Triton, dense, H200); elsewhere the
    policy's defaults stay, and the why says so unless the operator set the load pair.
    """
    if {"off_at", "on_at"} & (chosen or {}).keys():
        return None, None  # the operator's own pair: nothing measured to add, nothing to say
    row = TREE_BY_BACKEND.get(backend or "")
    if row is not None and not is_moe(experts) and _why_not(backend, gpu_names) is None:
        return row, None
    where = f"a tree's were measured on Triton with a dense target on an {MEASURED_ON} only"
    return None, (f"{TREE_ROWS}; {where}: the policy's defaults stay "
                  "(set off_at and on_at with specctl set; docs/sglang-plugin.md)")


def _said(reasons: Sequence[str], left: Sequence[str]) -> str:
    """Every reason a row stays out, then what happens instead, once.

    A server on another GPU that also runs a MoE is told both: an operator told only
    the first would fix it (move to an H200) and find the row still out for the second.
    ``left``: the settings still at the policy's defaults; where the operator set a group,
    only the others are said to stay (their own values are not the defaults).
    """
    if len(left) == sum(map(len, GROUPS)):
        return f"{'; also, '.join(reasons)}: {_DEFAULTS_STAY}"
    return (f"{'; also, '.join(reasons)}: the policy's defaults stay for {' and '.join(left)} "
            "(set them with specctl set; docs/policy.md)")


def is_moe(experts: int | None) -> bool:
    """Whether a target with this many routed experts is a MoE (one "expert" is a dense MLP; None: not known to be)."""
    return experts is not None and experts > 1


def _why_not_model(backend: str | None, experts: int | None) -> str | None:
    """Why a row measured on a dense model does not apply to this target; None where it does."""
    if not is_moe(experts):
        return None
    # Said where no MoE row was measured for ``backend`` (FA3, FlashInfer); the text is the one the journal
    # has always carried, word for word.
    return (f"the {backend} thresholds were measured on a {MEASURED_WITH} model and this server's target is a MoE "
            f"({experts} experts), whose verify cost over the batch is not a {MEASURED_WITH} model's "
            "(docs/benchmarks.md)")


def _why_not(backend: str | None, gpu_names: Sequence[str | None], cls: str = MEASURED_WITH) -> str | None:
    """Why a measured row (of model class ``cls``) does not apply on these GPUs; None where it does."""
    what = f"the {backend} thresholds" if cls == MEASURED_WITH else f"the {backend} thresholds for a MoE"
    known = [name for name in gpu_names if name]
    if not known or len(known) != len(gpu_names):
        return f"{what} were measured on an {MEASURED_ON} and this server's GPUs could not be read"
    others = sorted({name for name in known if not _is_measured_gpu(name)})
    if others:
        return f"{what} were measured on an {MEASURED_ON}, this server runs on {', '.join(others)}"
    return None


def _is_measured_gpu(name: str) -> bool:
    """Whether NVML's ``name`` is the GPU the rows were measured on: the model as a word, in any case.

    "NVIDIA H200" and "NVIDIA H200 NVL" are; "NVIDIA GH200 480GB" is not, though it holds the
    letters: Grace Hopper's GPU has its own memory (96 GB HBM3 or 144 GB HBM3e) and was not measured.
    """
    return re.search(rf"(?<![A-Z0-9]){MEASURED_ON}(?![A-Z0-9])", name.upper()) is not None


_DEFAULTS_STAY = ("the policy's defaults stay (set off_at, on_at, min_accept and accept_slope with specctl set; "
                  "docs/policy.md)")
