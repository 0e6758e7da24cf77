"""The SGLang plugin: SpecPolicy decides, each decode batch, whether to draft.

SGLang discovers ``load`` through the entry point group
``sglang.srt.plugins`` and calls it in every process it starts (the launcher
process and each scheduler process, one per TP rank), then applies the hooks
registered here through its HookRegistry. Nothing in SGLang is edited or
copied. The plugin is inert unless ``SPECCTL_PLUGIN=1`` (set by
runtime/supervisor/launcher.py), so installing specctl beside SGLang changes nothing by
itself. What is hooked, per release, is data in compat.py.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from specctl.runtime.core.depth_model import DepthCosts, DepthCostsError, read_costs
from specctl.runtime.core.records import whole
from specctl.runtime.core.settings import PolicySettings, SettingsError
from specctl.runtime.core.wire import (
    COSTS_ENV,
    ENABLE_ENV,
    EXPERTS_KEY,
    SETTINGS_ENV,
    WARMUP_ENV,
    WARMUP_KEY,
    WIRE_PREFIX,
)
from specctl.runtime.sglang_plugin import (
    compat,
    draft_extend_graphs,
    fast_off,
    server_args_check,
    server_info,
    sglang_access,
    switch_warmup,
    tree_switch,
)
from specctl.runtime.sglang_plugin.gauges import metrics_observer
from specctl.runtime.sglang_plugin.params import SpecctlParams, active, observers
from specctl.runtime.sglang_plugin.release_types import HookSpec, Release
from specctl.runtime.sglang_plugin.sglang_access import SpecctlPluginError

logger = logging.getLogger("specctl.plugin")


def settings_from_env(environ: Mapping[str, str] = os.environ) -> PolicySettings:
    """The initial policy settings the launcher passed; refusing bad ones stops the launch."""
    text = environ.get(SETTINGS_ENV, "").strip()
    if not text:
        return PolicySettings()
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecctlPluginError(f"{SETTINGS_ENV} is not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise SpecctlPluginError(f"{SETTINGS_ENV} must be a JSON object, got {type(raw).__name__}")
    try:
        return PolicySettings().with_changes(raw)
    except SettingsError as exc:
        raise SpecctlPluginError(f"{SETTINGS_ENV}: {exc.field}: {exc.message}") from None


def costs_from_env(environ: Mapping[str, str] = os.environ) -> DepthCosts | None:
    """The step-time table per (batch, depth) the launcher named, or None (the on/off policy).

    Every rank reads the same file, so every rank prices the depths alike; a
    table that cannot be read stops the launch rather than leaving the policy
    choosing depths on nothing.
    """
    path = environ.get(COSTS_ENV, "").strip()
    if not path:
        return None
    try:
        return read_costs(path)
    except DepthCostsError as exc:
        raise SpecctlPluginError(f"{COSTS_ENV}: {exc}") from None


def log_switch(state: Mapping[str, Any]) -> None:
    """One line in the server's log per switch, with the scheduler step it acted at.

    Why: every tensor-parallel rank runs its own policy and must switch at
    the same step or the ranks' collectives hang; SGLang prefixes each
    rank's lines (``TP0``, ``TP1``, ...), so the log shows whether they did.
    With more than one depth to choose from, the line ends ``, depth F -> T``.
    The supervisor's journal sees switches only as often as it polls.
    """
    if not state["switches"]:
        return
    line = "specctl: switch %d at step %s: speculation %s (%s), batch %s"
    args = [state["switches"], state["last_switch_step"], "on" if state["on"] else "off", state["reason"],
            state["batch_size"]]
    if len(state.get("candidates") or ()) > 2:  # choosing among depths: which one, too
        recent = state.get("recent_switches") or [{}]
        line += ", depth %s -> %s"
        args += [recent[-1].get("from"), state["steps"]]
    logger.info(line, *args)


class SglangParams(SpecctlParams):
    """What SGLang builds in place of AdaptiveSpeculativeParams (same constructor)."""

    def __init__(self, initial_steps: int, cfg_path: str | None = None) -> None:
        costs = costs_from_env()
        super().__init__(initial_steps, cfg_path, settings=settings_from_env(),
                         observer=observers(metrics_observer(), log_switch), costs=costs)
        logger.info("specctl: policy in charge, candidate steps %s, settings %s, depth costs %s",
                    self.candidate_steps, self.policy.settings.as_dict(),
                    "none (on/off)" if costs is None else costs.source or "given")
        unpriced = [d for d in self.candidate_steps if costs is not None and d not in costs.depths]
        if unpriced:  # auto never chooses a depth it cannot price; forced on still can
            logger.warning("specctl: the depth cost table has no step times for depths %s: auto will not "
                           "choose them", unpriced)


def set_internal_state(original: Callable[..., Any], owner: Any, recv_req: Any) -> Any:
    """AROUND hook: take the ``specctl_*`` keys out, validate them as a whole, apply after SGLang's.

    The scheduler broadcasts each request to every TP rank and handles it
    between two batches, so every rank's policy validates the same keys
    against the same settings and takes them at the same step. A refusal
    answers ``updated: false`` and changes nothing, SGLang's keys included.
    A request with only specctl keys never reaches SGLang's handler (0.5.17's
    would reset its acceptance counters on success).
    """
    wire = dict(recv_req.server_args)
    ours = {k: v for k, v in wire.items() if k.startswith(WIRE_PREFIX)}
    if not ours:
        return original(owner, recv_req)
    params = active()
    if params is None:
        logger.warning("specctl: refused %s: no speculative worker in this process", sorted(ours))
        return sglang_access.set_state_output(False)
    if WARMUP_KEY in ours:
        return _hold(params, ours, rest_of_wire=len(wire) - len(ours))
    try:
        new = params.validate_wire(ours)
    except SettingsError as exc:
        logger.warning("specctl: refused /set_internal_state: %s%s: %s", WIRE_PREFIX, exc.field, exc.message)
        return sglang_access.set_state_output(False)
    rest = {k: v for k, v in wire.items() if k not in ours}
    result = original(owner, sglang_access.with_server_args(recv_req, rest)) if rest else None
    if result is not None and not result.updated:
        return result
    params.apply_settings(new)
    logger.info("specctl: settings updated: %s", ours)
    return result if result is not None else sglang_access.set_state_output(True)


def _hold(params: SpecctlParams, ours: dict[str, Any], rest_of_wire: int) -> Any:
    """The switch warm-up's key: alone in its request (it is no setting), a built depth or HAND_BACK."""
    if len(ours) > 1 or rest_of_wire:
        logger.warning("specctl: refused /set_internal_state: %s goes alone, got %s", WARMUP_KEY, sorted(ours))
        return sglang_access.set_state_output(False)
    try:
        params.hold(ours[WARMUP_KEY])
    except SettingsError as exc:
        logger.warning("specctl: refused /set_internal_state: %s%s: %s", WIRE_PREFIX, exc.field, exc.message)
        return sglang_access.set_state_output(False)
    return sglang_access.set_state_output(True)


def get_internal_state(release: Release, result: Any, owner: Any, recv_req: Any) -> Any:
    """AFTER hook: add ``specctl`` to the scheduler's internal state (so to /server_info).

    The policy's state, the off state's, and the target's routed experts
    (``EXPERTS_KEY``), by which the supervisor picks the thresholds row of the
    target's model class: a MoE's where one was measured, never a dense model's
    (runtime/core/thresholds.py).
    """
    params = active()
    if params is not None:
        block = {**params.state(), "off_state": fast_off.summary()}
        experts = target_experts(release, owner)
        if experts is not None:
            block[EXPERTS_KEY] = experts
        result.internal_state["specctl"] = block
    return result


def target_experts(release: Release, owner: Any) -> int | None:
    """The target's routed experts from the model config the scheduler loaded (0: dense).

    Read where SGLang keeps the HF config it built the model from, rather than
    guessed from an architecture name (DeepseekV3ForCausalLM says nothing of
    experts). None, with a warning, where the config is not where compat says:
    the key is then left out, and /get_internal_state still answers.
    """
    scheduler = getattr(owner, release.scheduler_attr, None) if release.scheduler_attr else owner
    config: Any = scheduler
    for name in compat.MODEL_CONFIG_PATH:
        config = getattr(config, name, None)
    if config is None:
        _say_experts_unreported()
        return None
    return routed_experts(config)


@functools.cache
def _say_experts_unreported() -> None:
    """Once a process: every poll of /server_info would say it again."""
    logger.warning("specctl: the scheduler's %s is not there: the target's experts go unreported, and the "
                   "supervisor applies thresholds measured on a dense model", ".".join(compat.MODEL_CONFIG_PATH))


def routed_experts(config: Any) -> int:
    """The first count of routed experts the HF config holds; 0 where none.

    The flat keys first (``compat.EXPERT_KEYS``), in SGLang's order, then those a
    sub-config holds (``compat.NESTED_EXPERT_KEYS``: DBRX's ``ffn_config``).
    """
    flat = (_field(config, key) for key in compat.EXPERT_KEYS)
    nested = (_field(_field(config, sub), key) for sub, key in compat.NESTED_EXPERT_KEYS)
    counts = (whole(value, least=1) for value in itertools.chain(flat, nested))
    return next((n for n in counts if n is not None), 0)


def _field(config: Any, key: str) -> Any:
    """A config's field, None where it has none; a sub-config may be a config object or a plain dict.

    A PretrainedConfig's sub-config is an object once its class has built it (DbrxConfig
    does), but a dict where it was kept as given (a config class that does not convert it).
    """
    if isinstance(config, dict):
        return config.get(key)
    return getattr(config, key, None)


def check_server_args(release: Release, result: Any, server_args: Any) -> Any:
    """AFTER hook on SGLang's own check: stop the launch where specctl cannot work."""
    check_hooks_applied(release)
    settings = settings_from_env()
    problem = server_args_check.server_args_problem(release, server_args, settings.steps, settings.candidates)
    if problem is not None:
        raise SpecctlPluginError(problem)
    return result


def check_hooks_applied(release: Release) -> None:
    """Stop the launch if SGLang left one of specctl's hooks unapplied, naming it.

    HookRegistry.apply_hooks logs a target it cannot patch and carries on,
    which would leave, say, SGLang's own params class in charge, or fast off
    half installed (a DECODE state that no verify uses, or off steps whose
    read-done event the WAR barrier never sees and whose draft ignores
    ``warm_below``); checked in the launcher
    process, where the same targets are patched as in the scheduler processes.
    """
    why = "its log says why: 'Failed to apply hooks to ...'"
    groups = (  # (which hooks, those in use, how to run without them)
        ("hooks", release.hooks, ""),
        ("fast-off hooks", fast_off.hooks_for(release),
         f"; {fast_off.ENV_ENABLE}=0 runs SGLang's own steps-0 path instead"),
        ("draft-extend graph hook", draft_extend_graphs.hooks_for(release),
         f"; unset {draft_extend_graphs.ENV_ENABLE} to run without it"),
        ("tree-draft hooks", tree_switch.hooks_for(release), f"; unset {tree_switch.ENV_ENABLE} to run without them"),
        ("switch warm-up hook", switch_warmup.hooks_for(release), f"; {WARMUP_ENV}=0 runs without it"),
        ("key-redaction hooks", server_info.hooks_for(release),
         "; without them /server_info would give the admin key away (docs/security.md)"),
    )
    for what, specs, remedy in groups:
        missing = unapplied_hooks(specs)
        if missing:
            raise SpecctlPluginError(f"SGLang did not apply specctl's {what} on {', '.join(missing)} ({why}{remedy})")


def unapplied_hooks(specs: tuple[HookSpec, ...]) -> list[str]:
    """The targets of ``specs`` still unhooked after SGLang applied the hooks."""
    missing = []
    for spec in specs:
        current = sglang_access.resolve(spec.target)
        if spec.hook_type == "REPLACE":
            applied = current is SglangParams
        else:
            applied = hasattr(current, "__wrapped__")
        if not applied:
            missing.append(spec.target)
    return missing


def core_handlers(release: Release) -> dict[str, Any]:
    """The callables behind compat's ``HookSpec.handler`` names."""
    return {
        "params": SglangParams,
        "set_internal_state": set_internal_state,
        "get_internal_state": functools.partial(get_internal_state, release),
        "check_server_args": functools.partial(check_server_args, release),
    }


def install_core_hooks(release: Release) -> None:
    """Register the hooks listed for this release in compat.RELEASES."""
    handlers = core_handlers(release)
    for spec in release.hooks:
        sglang_access.register_hook(spec, handlers[spec.handler])


# Hook installers, run in order by load() in every SGLang process, before
# SGLang applies the registered hooks. To add hooks, append a callable that
# takes the Release here, keep its SGLang-specific targets as data in
# compat.py (as fast_off's are) and cover them in check_hooks_applied.
INSTALLERS: list[Callable[[Release], object]] = [install_core_hooks, fast_off.install, draft_extend_graphs.install,
                                                  tree_switch.install, switch_warmup.install, server_info.install]


def load() -> None:
    """Entry point of the ``sglang.srt.plugins`` group."""
    if os.environ.get(ENABLE_ENV) != "1":
        return
    release = sglang_access.release_for(sglang_access.installed_version())
    settings = settings_from_env()  # refuse bad settings in the launcher process, before any GPU work
    costs_from_env()  # and an unreadable cost table
    switch_warmup.cap_from_env()  # and a warm-up cap that is no count
    for install in INSTALLERS:
        install(release)
    logger.info("specctl: plugin loaded for SGLang %s, settings %s", release.version, settings.as_dict())
