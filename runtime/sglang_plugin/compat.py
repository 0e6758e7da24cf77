"""Everything that differs between the SGLang releases the plugin supports.

The hook targets, the server-args attributes read at start-up and the source
facts the adapter relies on are *data* here, so that the contract tests
(tests/test_plugin_contract.py) check the very list the plugin installs
against each release's real source. This module imports nothing from SGLang
at import time: the data must be readable on a machine without torch.
"""

from __future__ import annotations

import copy
import importlib.metadata
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable

from .adaptive_config import read_candidate_steps

PARAMS_CLASS = "sglang.srt.speculative.adaptive_spec_params.AdaptiveSpeculativeParams"
ADAPTIVE_UNSUPPORTED = "sglang.srt.speculative.adaptive_spec_params.adaptive_unsupported_reason"
HOOK_REGISTRY = "sglang.srt.plugins.hook_registry.HookRegistry"
HOOK_TYPE = "sglang.srt.plugins.hook_registry.HookType"
SET_STATE_OUTPUT = "sglang.srt.managers.io_struct.SetInternalStateReqOutput"
# prometheus_client reads this variable; SGLang sets it when --enable-metrics is on.
PROMETHEUS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
# SGLang's whitelist of general plugins (sglang/srt/plugins/__init__.py); unset = all load.
PLUGINS_ENV = "SGLANG_PLUGINS"


class SpecctlPluginError(SystemExit):
    """A start-up refusal.

    SGLang's ``load_plugins`` catches ``Exception`` around each plugin and only
    logs it, which would leave a server running stock adaptive speculation
    while the operator believes specctl is in charge. ``SystemExit`` passes
    through that handler and stops the launch with this message.
    """

    def __init__(self, message: str) -> None:
        super().__init__(f"specctl: {message}")


@dataclass(frozen=True)
class HookSpec:
    """One HookRegistry registration.

    ``handler`` names the plugin callable (see plugin.HANDLERS); ``params`` are
    the target's parameter names (after ``self``) that the handler relies on.
    For a class target they are the constructor's.
    """

    target: str
    hook_type: str  # a HookType member name: REPLACE, AROUND, AFTER
    handler: str
    params: tuple[str, ...]


@dataclass(frozen=True)
class Release:
    """One supported SGLang release and how the plugin reaches into it."""

    version: str
    hooks: tuple[HookSpec, ...]
    # The read-only view of resolved server args (resolution moved between releases).
    args_view: str
    # Attention DP is on when int(view.<dp_attr>) > dp_above.
    dp_attr: str
    dp_above: int
    # Source files (under sglang/srt/) whose annotated class fields make up ServerArgs.
    args_field_files: tuple[str, ...]
    # (file under sglang/srt/, text) pairs the adapter's assumptions rest on, e.g. that the
    # per-request counts SGLang passes to on_verify_complete already exclude the bonus token.
    source_facts: tuple[tuple[str, str], ...]


_PARAMS_HOOK = HookSpec(PARAMS_CLASS, "REPLACE", "params", ("initial_steps", "cfg_path"))

RELEASES: dict[str, Release] = {
    "0.5.17": Release(
        version="0.5.17",
        hooks=(
            _PARAMS_HOOK,
            # 0.5.17 checks a fixed allow-set inside this method: only AROUND can add keys.
            HookSpec("sglang.srt.managers.scheduler.Scheduler.set_internal_state", "AROUND",
                     "set_internal_state", ("recv_req",)),
            HookSpec("sglang.srt.managers.scheduler.Scheduler.get_internal_state", "AFTER",
                     "get_internal_state", ("recv_req",)),
            HookSpec("sglang.srt.server_args.ServerArgs.check_server_args", "AFTER",
                     "check_server_args", ()),
        ),
        args_view="sglang.srt.arg_groups.overrides.resolved_view",
        dp_attr="enable_dp_attention",
        dp_above=0,
        args_field_files=("server_args.py",),
        source_facts=(
            ("managers/scheduler_components/batch_result_processor.py",
             "num_correct_drafts_per_req_cpu = [x - 1 for x in accept_lens]"),
            ("speculative/adaptive_runtime_state.py", "self.params = AdaptiveSpeculativeParams("),
            ("managers/scheduler.py", "(SetInternalStateReq, self.set_internal_state)"),
            ("managers/scheduler.py", "(GetInternalStateReq, self.get_internal_state)"),
            ("entrypoints/engine.py", "server_args.check_server_args()"),
        ),
    ),
    "0.5.23": Release(
        version="0.5.23",
        hooks=(
            _PARAMS_HOOK,
            # 0.5.23 validates key by key through _update_handlers; an AROUND on the whole
            # request keeps a multi-key change (on_at and off_at together) all-or-nothing.
            HookSpec("sglang.srt.managers.scheduler_components.internal_state."
                     "SchedulerInternalStateController.set_internal_state", "AROUND",
                     "set_internal_state", ("recv_req",)),
            HookSpec("sglang.srt.managers.scheduler_components.internal_state."
                     "SchedulerInternalStateController.get_internal_state", "AFTER",
                     "get_internal_state", ("recv_req",)),
            # ServerArgs is a msgspec struct here; its method defers to this function.
            HookSpec("sglang.srt.arg_groups.validation_hook.check_server_args", "AFTER",
                     "check_server_args", ("server_args",)),
        ),
        args_view="sglang.srt.arg_groups.overrides.resolving_view",
        dp_attr="attn_dp_size",
        dp_above=1,
        args_field_files=(
            "server_args.py", "arg_groups/fields/spec.py", "arg_groups/fields/parallel.py",
            "arg_groups/fields/serving.py", "arg_groups/fields/model.py",
            "arg_groups/fields/observability.py", "arg_groups/fields/exec_.py",
        ),
        source_facts=(
            ("managers/scheduler_components/batch_result_processor.py",
             "length - num_non_draft for length in accept_lens"),
            ("managers/utils.py", "num_non_draft_tokens_per_req: int = 1"),
            ("speculative/eagle_worker_v2.py", "AdaptiveSpeculativeParams(\n"),
            ("managers/scheduler.py", "return self.internal_state.set_internal_state(recv_req)"),
            ("managers/scheduler.py", "return self.internal_state.get_internal_state(recv_req)"),
            ("entrypoints/engine.py", "server_args.check_server_args()"),
            ("server_args.py", "from sglang.srt.arg_groups.validation_hook import check_server_args"),
        ),
    ),
}

# Server-args attributes the start-up check reads, in every release (plus Release.dp_attr).
ARGS_READ = (
    "speculative_algorithm",
    "speculative_eagle_topk",
    "speculative_adaptive",
    "speculative_adaptive_config",
)


def installed_version() -> str:
    """The installed SGLang's version, from its distribution metadata."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        raise SpecctlPluginError("SGLang's package metadata was not found; cannot check its version") from None


def release_for(version: str) -> Release:
    """The release data for ``version``; anything unverified is refused, not guessed."""
    release = RELEASES.get(version)
    if release is None:
        supported = ", ".join(RELEASES)
        raise SpecctlPluginError(
            f"SGLang {version} is not supported (supported: {supported}); "
            "unset SPECCTL_PLUGIN to run SGLang without specctl"
        )
    return release


def resolve(dotted: str) -> Any:
    """Import ``module.attr`` (the same resolution HookRegistry uses)."""
    return pkgutil.resolve_name(dotted)


def register_hook(spec: HookSpec, hook: Callable[..., Any] | type) -> None:
    registry = resolve(HOOK_REGISTRY)
    hook_type = getattr(resolve(HOOK_TYPE), spec.hook_type)
    registry.register(spec.target, hook, hook_type)


def server_args_problem(release: Release, server_args: Any, steps: int) -> str | None:
    """Why specctl cannot run under these (resolved) server args, naming the flag; None if it can.

    ``steps`` is the policy's draft step count, which must have a runtime state.
    """
    view = resolve(release.args_view)(server_args)
    algorithm = view.speculative_algorithm
    if algorithm not in ("EAGLE", "EAGLE3"):
        return f"--speculative-algorithm must be EAGLE or EAGLE3, got {algorithm!r}"
    if view.speculative_eagle_topk not in (None, 1):
        return f"--speculative-eagle-topk must be 1, got {view.speculative_eagle_topk}"
    if int(getattr(view, release.dp_attr) or 0) > release.dp_above:
        return "attention data parallelism (--enable-dp-attention / --dp-size) is not supported"
    reason = resolve(ADAPTIVE_UNSUPPORTED)(server_args)
    if reason is not None:
        return f"SGLang refuses adaptive speculation here: {reason}"
    if not view.speculative_adaptive:
        return "--speculative-adaptive is required (specctl drives SGLang's adaptive controller)"
    if not view.speculative_adaptive_config:
        return "--speculative-adaptive-config is required (the file specctl's launcher writes)"
    candidates = read_candidate_steps(view.speculative_adaptive_config)
    if 0 not in candidates:
        return "--speculative-adaptive-config must list candidate step 0 (speculation off)"
    if steps not in candidates:
        return f"the settings' steps ({steps}) must be a candidate of --speculative-adaptive-config {candidates}"
    return None


def set_state_output(updated: bool) -> Any:
    """SGLang's answer object for /set_internal_state."""
    return resolve(SET_STATE_OUTPUT)(updated=updated)


def with_server_args(recv_req: Any, server_args: dict[str, Any]) -> Any:
    """A copy of a SetInternalStateReq (a mutable msgspec struct in both releases) with other keys.

    A copy, not an edit: the scheduler still holds the original request to
    route the answer back to the HTTP worker.
    """
    clone = copy.copy(recv_req)
    clone.server_args = server_args
    return clone
