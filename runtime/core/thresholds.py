"""Load thresholds that suit the server's attention backend, from measurement.

Where speculation stops paying depends less on the model than on how fast the
attention backend serves a verify: on one H200 (docs/results/, SGLang
0.5.17, Llama-8B shapes, acceptance length 2.8) static EAGLE-3 and no
speculation are level at 32 requests with Triton, whose verify runs its extend
kernel, while with FA3 static EAGLE-3 was ahead at every concurrency measured
(1.1-1.2x at 256), and FlashInfer lies between (static ahead 1.04x at 32,
behind 0.94x at 64). One threshold cannot serve them all, so when specctl
launches a server, the supervisor reads the backend SGLang chose from
/server_info and applies the matching settings below, each one the operator did
not set. Each row comes from one GPU sweep on one H200 through the simulator
(a preset calibrated to it), and applies only where NVML names the server's
GPUs as that GPU (:func:`for_server`): a FlashInfer server on other hardware
(SGLang's default below Hopper) keeps the defaults, and the journal says why.
Rows are keyed by model class too, by the target's routed experts as the plugin
reports them: ``BY_BACKEND`` was measured with a dense target (Llama-3.1-8B) and
applies only to a dense one, ``MOE_BY_BACKEND`` with a mixture of experts
(Qwen3-30B-A3B's shapes, 128 experts), Triton and FA3 so far: on Triton static
EAGLE-3 paid up to 128 requests with real tokens, the crossover between 128 and
256, not near 32 as on Llama (docs/results/moe.md, "Eighth sitting"); on FA3 it
paid at every load measured, as on Llama (docs/results/moe-fa3.md). A MoE on a
backend without a MoE row (FlashInfer) keeps the defaults, and the journal says why.
Backends not listed (trtllm, ...) keep the policy's defaults: they were not
measured.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from specctl.runtime.core.settings import MAX_BATCH

# The acceptance floor (min_accept + accept_slope * batch size) follows the
# break-even of bench/accept_breakeven.py's closed loop (the simulator calibrated
# to each sweep), bisected over the accept length, in accepted draft tokens a
# verify (docs/policy.md):
#   Triton: 0.46 at 1 request, 0.86 at 8, 1.25 at 16, 1.64 at 24, 2.0 at 32, 2.56 at 48;
#   FA3:    0.21-0.26 up to 48 requests, 0.38 at 64, 0.86 at 128, 1.04 at 192, 1.17 at 256;
#   FlashInfer: 0.68 at 1, 0.74 at 4, 1.02 at 16, 1.33 at 32, 1.57 at 48, 1.97 at 64, 2.61 at 96,
#           2.91 at 112, 3.0 at 120 (python bench/accept_breakeven.py --breakeven).
# The lines sit about 0.1 under those points at small batches: at one request a
# 64-verify mean scatters by about 0.1, and a dip under the floor costs
# probe_after steps off where drafting pays (bench/policy_envelope.py
# --accept-lens found the misses there with the floor on the curve).
# Triton's floor passes 3 accepted drafts (all of steps) at 54 requests, so off_at 56 loses nothing
# and spares the window a probe costs.
# off_at above any max-running-requests means "never off for load": with FA3
# static EAGLE-3 was ahead at every measured concurrency, and only the floor
# turns it off.
# FlashInfer (preset h200-llama8b-flashinfer, one sweep of 2026-12-01): the curve is
# nearly a line, 0.66 + 0.0195 x. The floor 0.5 + 0.022 x sits 0.13-0.18 under it up to
# 32 requests, meets it at 48 and 96 and passes 3 at 114 requests (0.05 over the curve
# at 112, where on and off are level within 2 %), so off_at 114 turns off for load only
# where no acceptance pays (the curve reaches 3 at 120). It is steeper than the curve
# because the GPU crossed over earlier than the model: at the sweep's acceptance (2.8,
# 1.8 accepted drafts) the measured static / none was 1.04 at 32 and 0.94 at 64 (the
# model: 1.15 and 0.96), and this floor turns speculation off from 60 requests, with
# 0.11 to spare at 64 (a line under the curve everywhere, 0.5 + 0.021 x, had 0.04).
# A floor 0.05 higher at one request (0.55 + 0.02 x) missed there at accept length
# 1.8 (0.93: a window's dip under it at 0.8 accepted drafts, where drafting pays only
# 7 %). on_at 48: after a switch for load speculation comes back at 48 requests (on /
# off 1.06 there in the model; measured 1.04 at 32, 0.94 at 64), not at 24, where it
# wins 1.2x; the floor takes over from there.
# The rows are keyed by backend and model class, and apply only on the GPU they were
# measured on (MEASURED_ON, below).
NEVER = MAX_BATCH  # the largest off_at the policy takes
BY_BACKEND: dict[str, dict[str, float]] = {  # dense targets (MEASURED_WITH)
    "triton": {"off_at": 56, "on_at": 24, "min_accept": 0.3, "accept_slope": 0.05},
    "fa3": {"off_at": NEVER, "on_at": NEVER - 1, "min_accept": 0.15, "accept_slope": 0.0042},
    "flashinfer": {"off_at": 114, "on_at": 48, "min_accept": 0.5, "accept_slope": 0.022},
}
# A MoE target on Triton (preset h200-qwen3moe, calibrated to three sittings of 2026-12-02/03, docs/results/
# moe.md eighth to tenth: Qwen3-30B-A3B's shapes with random weights, one H200, SGLang 0.5.17, SGLang's
# simulated acceptance 2.8 emitting real tokens; static / forced off over the sittings 1.49 at 1 request,
# 1.56 at 4, 1.27 at 16, 1.16 at 64, 1.14 at 96, 0.91 at 128, 0.77 at 192). Its break-even
# (bench/accept_breakeven.py --preset h200-qwen3moe --breakeven), in accepted draft tokens a verify:
# 0.78 at 1 request, 1.02 at 2, 1.16 at 4, 1.09 at 8, 0.94 at 16, 0.97 at 24, 1.07 at 32, 1.24 at 48,
# 1.43 at 64, 2.06 at 128, 2.49 at 192, 2.75 at 256: a hump at 4-8 (a verify's extra tokens reach more
# experts than a decode of few requests), a dip at 16-24 (a decode of the batch already reads most
# experts), then a rise, under 3 to 256. So no load turns it off whatever the acceptance, and the row is
# FA3's kind: never off for load, the floor decides. The floor 0.62 + 0.0105 x sits 0.10-0.16 under the
# curve at 1 and 16-64 requests (a 64-verify mean scatters by about 0.1 at one request), under it to about
# 150 and over it from about 170, so accept length 2.8 (1.8 accepted drafts) turns speculation off from 112
# requests (simulated crossover 94; measured between 96 and 128), 2.0 from 36. It cannot follow the hump:
# at 2.0 and 4-8 requests it stays on where off pays 6-8 %. In the simulator (policy_envelope.py, 10 s +
# 30 s, the geometric law and SGLang's) auto >= 0.98x max(static, off) at c = 1-256 and accept lengths
# 1.5, 2.0, 2.8 and 3.3 but for 0.92-0.95 at 2.0 and 4-8 requests. The row before it (the same floor at
# 0.0065 x, from the eighth sitting alone) turned 2.8 off from 182 requests: on the GPU auto served
# 0.79-0.90 of forced off at 128-192 (tenth sitting), 0.93 at 128 in the refitted simulator.
# This row on the GPU (eleventh sitting): auto on at 64-128 (at 128 its 64-verify window had not filled
# inside the 6 s windows), off at 192, 1.045-1.066 of the better forced state's mean at each load; on
# and off within about 10 % of each other from 64 to 192.
# A MoE target on FA3 (seventh sitting, 2026-12-02; docs/results/moe-fa3.md): static EAGLE-3
# (forced on) read 1.88x forced off at 1 request, 1.47x at 4, 1.02-1.04 at 16-32 (level),
# 1.18-1.53x at 64-256, at accept length 2.8: never off for load, as the dense FA3 row. With the
# defaults (off_at 32) auto ran off from 32 and served 0.66-0.82x static at 64-256. The floor:
# the preset h200-qwen3moe-fa3 (calibrated to that sitting, within 19 %) breaks even at 0.69
# accepted drafts at 1 request, 1.22 at 16, 0.90 at 64-128, 1.05 at 256 (accept_breakeven.py
# --breakeven): a hump a line cannot follow, so the floor stays under its low ends, 0.6 + 0.0016 x
# (0.60-1.01). In the envelope (policy_envelope.py, accept 1.5 / 2.0 / 2.8 / 3.3): >= 0.95x
# max(static, off) everywhere but 2.0 at 8-32 requests (0.90-0.94: on with 1 accepted draft where
# 1.15-1.22 break even); the defaults 0.62-0.80 at 2.8-3.3 from 32. Not yet run on the GPU.
# Measured with real tokens (tenth sitting, 2026-12-03, docs/results/moe-fa3.md "Real tokens"):
# static read 1.50-1.88x no speculation at 1-256 requests and auto with this row stayed on in
# every window; the row holds (its first sweeps had run with SGLang's fixed token id 100).
MOE_BY_BACKEND: dict[str, dict[str, float]] = {
    "triton": {"off_at": NEVER, "on_at": NEVER - 1, "min_accept": 0.62, "accept_slope": 0.0105},
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


# Every row above was measured on one NVIDIA H200 (docs/results/). Where speculation stops
# paying moves with the GPU as much as with the backend: the report's 8x RTX PRO 6000 with
# FlashInfer loses drafting at 2-16 requests, where this FlashInfer row keeps it on (the
# simulator: 0.84-0.94 of the better state at accept length 2.02). So a row applies only on
# the GPU it was measured on; elsewhere the policy's defaults stay, and the operator is told.
MEASURED_ON = "H200"
# ... and BY_BACKEND with a dense target (Llama-3.1-8B). Where speculation stops paying moves
# with the model class too: a MoE's verify reads more experts' weights the more tokens it
# checks, while a decode of many requests reads most experts anyway; on Triton the GPU put the
# crossover between 128 and 256 requests with real tokens (Llama: about 32), where the dense
# row's floor turns speculation off from 30 requests at accept length 2.8 (docs/results/moe.md).
# So a MoE gets MOE_BY_BACKEND's row where one was measured (Triton, FA3), and the defaults on the
# other backends, with the reason.
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


# A tree under specctl's switch (topk 4, 2 steps, 16 draft tokens: the report's launch line; SPECCTL_TREE_SWITCH=1)
# has rows of its own: the chain's were measured with a chain's verify, and a tree's checks 16 tokens a request, so it
# stops paying at fewer requests. Measured on Triton only (docs/results/topk.md, "Measured: the tree under the switch",
# one H200, Llama-3.1-8B shapes, tree accept 2.7): the static tree read 1.76x / 1.51x no speculation at 1 / 4 requests
# and 0.86x at 16; auto with off_at 16 / on_at 8 ran the tree at 1-4 and off from 16 (1.00-1.03x the better static
# at 1-4, 1.03-1.05 at 128-256), and the off state is at no speculation's speed from 64 to 256 (thirteenth sitting).
# The load pair only: that sitting kept the policy's floor, and a tree's acceptance break-even was not measured.
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
                  "(set off_at and on_at with specctl set; docs/topk.md)")


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
    # carried before the MoE row, word for word (docs/topk.md quotes it).
    return (f"the {backend} thresholds were measured on a {MEASURED_WITH} model and this server's target is a MoE "
            f"({experts} experts), whose verify cost over the batch is not a {MEASURED_WITH} model's "
            "(docs/results/moe.md)")


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
