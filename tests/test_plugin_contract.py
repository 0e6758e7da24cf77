"""The plugin against each supported SGLang release's real source (read from its wheel).

Every name the plugin (fast_off included) hooks, calls or reads is checked in
the source with ``ast``; where SGLang's code needs only the standard library
(HookRegistry, the adaptive config loader, the AdaptiveController) it is
executed, with our params and hooks plugged in as SGLang would plug them.
"""

from __future__ import annotations

import ast
import inspect
import json
import logging
import sys
import tomllib
import types
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from specctl.runtime.core.adaptive_config import write_config
from specctl.runtime.core.settings import PolicySettings
from specctl.runtime.core.wire import WARMUP_ENV
from specctl.runtime.probes.server_info import PREFILL_GRAPH_ARGS
from specctl.runtime.sglang_plugin import (
    compat,
    draft_extend_graphs,
    draft_warmth,
    fast_off,
    plugin,
    server_args_check,
    server_info,
    sglang_access,
    switch_warmup,
    tree_switch,
)
from specctl.runtime.sglang_plugin.params import SpecctlParams
from specctl.runtime.sglang_plugin.release_types import HookSpec, Release
from specctl.runtime.sglang_plugin.sglang_access import SpecctlPluginError

from support.sglang_source import (
    SglangSource,
    attribute_names,
    class_fields,
    find_definition,
    module_name,
    parameter_names,
    required_parameter_names,
    run_module,
)
from support.sim_process import sim_process
from support.stand_in_modules import stand_in_modules

ROOT = Path(__file__).resolve().parents[1]
QUICK = PolicySettings(steps=3, off_at=8, on_at=4, dwell=0)


@pytest.fixture
def config(tmp_path: Path) -> str:
    return str(write_config(tmp_path / "adaptive.json", 3))


def exec_sglang_module(source: SglangSource, rel: str, inject: dict[str, Any], monkeypatch) -> types.ModuleType:
    """Run one SGLang module with its ``from sglang... import`` lines replaced by ``inject``."""
    module = types.ModuleType(module_name(rel))
    module.__dict__.update(inject)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    run_module(source, rel, module.__dict__)
    return module


# -- names and signatures in the source ----------------------------------------


def test_the_wheel_is_the_release(sglang_source: SglangSource) -> None:
    assert sglang_source.version == sglang_source.release.version


def all_hooks(release: Release) -> list[tuple[HookSpec, Any]]:
    """Every hook the plugin may register for ``release``, with its handler."""
    core, fast = plugin.core_handlers(release), fast_off.handlers(release)
    width, tree = draft_extend_graphs.around_resolve_num_tokens_per_req, tree_switch.handlers(release)
    return ([(s, core[s.handler]) for s in release.hooks] + [(s, fast[s.handler]) for s in release.fast_off_hooks]
            + [(s, width) for s in release.draft_extend_hooks] + [(s, tree[s.handler]) for s in release.tree_hooks]
            + [(s, switch_warmup.around_wait_and_warmup) for s in release.warmup_hooks]
            + [(s, server_info.after_args_dump) for s in release.redact_hooks])


def test_every_hook_target_exists_with_the_parameters_the_plugin_expects(sglang_source: SglangSource) -> None:
    for spec, _ in all_hooks(sglang_source.release):
        located = sglang_source.locate(spec.target)
        node = located.node
        if spec.hook_type == "REPLACE":
            assert isinstance(node, ast.ClassDef), spec.target
            node = find_definition(node, "__init__")
        else:  # undecorated, so that the start-up check's __wrapped__ can only be HookRegistry's
            assert isinstance(node, ast.FunctionDef) and not node.decorator_list, spec.target
        assert isinstance(node, ast.FunctionDef), spec.target
        assert parameter_names(node) == list(spec.params), spec.target


def fast_off_spec(release: Release, handler: str) -> HookSpec:
    return next(s for s in release.fast_off_hooks if s.handler == handler)


def test_fast_off_reads_its_hook_arguments_where_the_release_has_them(sglang_source: SglangSource) -> None:
    build = fast_off_spec(sglang_source.release, "build_adaptive_runtime_state").params
    assert (build.index("speculative_num_steps"), build.index("cuda_graph_bs")) == (0, 2)  # fast_off._arg's
    assert fast_off._PREPARE_NAMES == fast_off_spec(sglang_source.release, "eagle_prepare_for_verify").params


def test_every_handler_accepts_what_hookregistry_passes(sglang_source: SglangSource) -> None:
    for spec, handler in all_hooks(sglang_source.release):
        if spec.hook_type == "REPLACE":
            continue  # checked against the class protocol below
        is_method = sglang_source.locate(spec.target).owner is not None
        passed = [None] * (1 + int(is_method) + len(spec.params))  # original or result, self, args
        inspect.signature(handler).bind(*passed)


def test_what_fast_off_calls_takes_what_it_passes(sglang_source: SglangSource) -> None:
    for call in compat.FAST_OFF_CALLS:
        node = sglang_source.locate(call.target).node
        assert isinstance(node, ast.FunctionDef), call.target
        assert set(call.params) <= set(parameter_names(node)), call.target
        assert set(required_parameter_names(node)) <= set(call.params), call.target


def test_what_fast_off_imports_and_reads_exists(sglang_source: SglangSource) -> None:
    imported = []
    for module in ("fast_off.py", "draft_prefill.py", "spec_alloc.py"):
        tree = ast.parse((ROOT / "runtime" / "sglang_plugin" / module).read_text())
        imported += [f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                     and (n.module or "").startswith("sglang") for a in n.names]
    assert imported
    for name in [*imported, *compat.FAST_OFF_NAMES, f"sglang.srt.environ.Envs.{draft_warmth.SKIP_DRAFT_EXTEND_ENV}"]:
        assert sglang_source.locate(name).node is not None, name
    # SGLang's own switch, which fast_off sets, is read in the steps-0 step.
    assert f"envs.{draft_warmth.SKIP_DRAFT_EXTEND_ENV}.get()" in sglang_source.srt("speculative/eagle_worker_v2.py")


def test_the_step_hook_counts_the_batch_sglang_passes(sglang_source: SglangSource) -> None:
    # fast_off reads the step's batch size (for warm_below) from its first argument, or by name.
    spec = fast_off_spec(sglang_source.release, fast_off.STEP_HANDLER)
    assert spec.params[0] == "batch"
    assert "batch.seq_lens.shape[0]" in sglang_source.srt("speculative/eagle_worker_v2.py")


def test_sglang_prepares_its_verify_through_the_hooked_function(sglang_source: SglangSource) -> None:
    spec = fast_off_spec(sglang_source.release, "eagle_prepare_for_verify")
    name = spec.target.rsplit(".", 1)[1]
    calls = [node for node in ast.walk(sglang_source.tree("sglang/srt/speculative/eagle_worker_common.py"))
             if isinstance(node, ast.Call) and ast.unparse(node.func) == name]
    assert calls
    for call in calls:
        assert len(call.args) <= len(spec.params) and {k.arg for k in call.keywords} <= set(spec.params)


def test_the_war_barrier_reads_the_names_fast_off_hands_over(sglang_source: SglangSource) -> None:
    names = sglang_source.release.read_done
    worker = fast_off_spec(sglang_source.release, fast_off.STEP_HANDLER).target.rsplit(".", 1)[0]
    prop = sglang_source.locate(f"{worker}.{names.runner_property}").node
    assert isinstance(prop, ast.FunctionDef) and "property" in {ast.unparse(d) for d in prop.decorator_list}
    scheduler = sglang_source.tree("sglang/srt/managers/scheduler.py")
    assert {names.runner_property, names.event_attr} <= attribute_names(scheduler)
    runner_attrs = attribute_names(sglang_source.tree("sglang/srt/model_executor/model_runner.py"))
    graph_attrs = attribute_names(sglang_source.tree("sglang/srt/model_executor/runner/decode_cuda_graph_runner.py"))
    assert names.event_attr in runner_attrs and names.event_attr in graph_attrs  # the DECODE graph records it
    # No other release's event exists here, so looking up only this release's names
    # behaves as the try-every-release's-names lookup that ran on the GPU.
    others = {r.read_done.event_attr for r in compat.RELEASES.values()} - {names.event_attr}
    assert not others & runner_attrs


def test_early_publish_source_facts_hold(sglang_source: SglangSource) -> None:
    for rel, text in sglang_source.release.early_publish.facts:
        assert text in sglang_source.text(f"sglang/{rel}"), (rel, text)


def test_early_publish_finds_on_publish_and_the_plan_stream_where_the_release_has_them(
        sglang_source: SglangSource) -> None:
    early = sglang_source.release.early_publish
    step = fast_off_spec(sglang_source.release, fast_off.STEP_HANDLER)
    assert early.publish_kwarg in step.params
    worker = sglang_source.locate(step.target.rsplit(".", 1)[0]).node
    assert early.plan_stream_attr in attribute_names(worker)
    verify = sglang_source.locate(f"{step.target.rsplit('.', 1)[0]}.verify").node
    assert f"plan_stream=self.{early.plan_stream_attr}" in ast.unparse(verify)


def test_early_publish_reads_the_host_wait_from_the_future_map_on_publish_is_bound_to(
        sglang_source: SglangSource) -> None:
    # auto: on_publish = partial(self.future_map.publish, ...); the FutureMap instance carries the
    # scheduler's start-up decision, and resolve_seq_lens_cpu reads the same attribute to wait.
    early = sglang_source.release.early_publish
    future_map = sglang_source.locate("sglang.srt.managers.overlap_utils.FutureMap").node
    assert early.host_wait_attr in attribute_names(future_map)
    resolve = find_definition(future_map, "resolve_seq_lens_cpu")
    assert f"self.{early.host_wait_attr}" in ast.unparse(resolve)
    assert "publish" in {n.name for n in future_map.body if isinstance(n, ast.FunctionDef)}


def test_the_hooked_prepare_runs_before_the_target_forward_and_sglangs_publish(sglang_source: SglangSource) -> None:
    # fast_off publishes an off step from inside eagle_prepare_for_verify: that must come
    # before the replay (the target forward) and SGLang's own publish (after verify()).
    fn = find_definition(sglang_source.tree("sglang/srt/speculative/eagle_worker_common.py"), "run_eagle_verify")
    body = ast.unparse(fn)
    prepare = body.index("eagle_prepare_for_verify(")
    assert "with plan_stream_ctx:" in body[:prepare]
    assert prepare < body.index("target_worker.forward_batch_generation(") < body.index("new_seq_lens")
    step = ast.unparse(sglang_source.locate(fast_off_spec(sglang_source.release, fast_off.STEP_HANDLER).target).node)
    assert step.index("self.verify(") < step.index("on_publish(batch_output.new_seq_lens)", step.index("self.verify("))


def test_the_scheduler_waits_for_the_publish_before_the_step_it_prepares(sglang_source: SglangSource) -> None:
    run_batch = ast.unparse(sglang_source.locate("sglang.srt.managers.scheduler.Scheduler.run_batch").node)
    resolve = run_batch.index("self.future_map.resolve_seq_lens_cpu(batch)")
    assert resolve < run_batch.index("self.model_worker.forward_batch_generation(batch, **fwd_kwargs)")
    # The decision covers the target backend, which is FlashInfer's in the slow case.
    worker = fast_off_spec(sglang_source.release, fast_off.STEP_HANDLER).target.rsplit(".", 1)[0]
    backends = ast.unparse(sglang_source.locate(f"{worker}.spec_v2_attn_backends").node)
    assert "self._target_worker.model_runner.attn_backend" in backends


def test_only_flashinfer_of_the_measured_backends_asks_for_host_lengths(sglang_source: SglangSource) -> None:
    # Why FlashInfer's off state was 7-9 % slow with arrivals and Triton's and FA3's were not.
    attention = "sglang/srt/layers/attention/"
    assert "needs_cpu_seq_lens" not in sglang_source.text(attention + "flashinfer_backend.py")  # the base's True
    for backend in ("triton_backend.py", "flashattention_backend.py"):
        assert "needs_cpu_seq_lens: bool = False" in sglang_source.text(attention + backend), backend


def test_the_replacement_has_sglangs_constructor_and_methods(sglang_source: SglangSource) -> None:
    cls = sglang_source.locate(compat.PARAMS_CLASS).node
    assert isinstance(cls, ast.ClassDef)
    public = [n for n in cls.body
              if isinstance(n, ast.FunctionDef) and (n.name == "__init__" or not n.name.startswith("_"))]
    assert {n.name for n in public} >= {"__init__", "candidate_steps", "get_steps_for_batch", "on_verify_complete"}
    for fn in public:
        ours = getattr(plugin.SglangParams, fn.name)
        decorators = {ast.unparse(d) for d in fn.decorator_list}
        if decorators & {"property", "cached_property"}:
            assert isinstance(ours, property), fn.name
            continue
        names = [p for p in inspect.signature(ours).parameters if p != "self"]
        assert names == parameter_names(fn), fn.name


def test_the_controller_uses_only_what_the_replacement_provides(sglang_source: SglangSource) -> None:
    tree = sglang_source.tree("sglang/srt/speculative/adaptive_runtime_state.py")
    used = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "params"
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "self"
    }
    assert used >= {"get_steps_for_batch", "on_verify_complete", "candidate_steps"}
    assert all(hasattr(SpecctlParams, name) for name in used), used


def test_sglang_builds_the_params_with_keywords_our_constructor_takes(sglang_source: SglangSource) -> None:
    calls = []
    for path in sglang_source.python_files("sglang/srt/"):
        if "AdaptiveSpeculativeParams(" not in sglang_source.text(path):
            continue
        for node in ast.walk(sglang_source.tree(path)):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("AdaptiveSpeculativeParams"):
                calls.append((path, node))
    assert calls
    for path, call in calls:
        assert not call.args, path
        assert {k.arg for k in call.keywords} <= {"initial_steps", "cfg_path"}, path


def test_hookregistry_api(sglang_source: SglangSource) -> None:
    register = sglang_source.locate(compat.HOOK_REGISTRY + ".register").node
    assert parameter_names(register)[:3] == ["target", "hook", "hook_type"]
    hook_type = sglang_source.locate(compat.HOOK_TYPE).node
    members = {t.id for n in hook_type.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    assert {spec.hook_type for spec, _ in all_hooks(sglang_source.release)} <= members


def test_our_entry_point_is_in_the_group_sglang_loads(sglang_source: SglangSource) -> None:
    group = sglang_source.locate("sglang.srt.plugins.GENERAL_PLUGINS_GROUP").node
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    entry_points = pyproject["project"]["entry-points"][group.value.value]
    assert entry_points["specctl"] == "specctl.runtime.sglang_plugin.plugin:load"
    assert f"envs.{compat.PLUGINS_ENV}.get()" in sglang_source.srt("plugins/__init__.py")
    assert sglang_source.locate(f"sglang.srt.environ.Envs.{compat.PLUGINS_ENV}")


def test_server_args_the_plugin_reads_exist(sglang_source: SglangSource) -> None:
    release = sglang_source.release
    fields: set[str] = set()
    for rel in release.args_field_files:
        fields |= class_fields(sglang_source.tree(f"sglang/srt/{rel}"))
    assert {*server_args_check.ARGS_READ, release.dp_attr} <= fields


def test_server_info_says_whether_prefills_replay_from_graphs(sglang_source: SglangSource) -> None:
    """The supervisor's prefill_graphs reads these resolved arguments from /server_info."""
    fields: set[str] = set()
    for rel in sglang_source.release.args_field_files:
        fields |= class_fields(sglang_source.tree(f"sglang/srt/{rel}"))
    assert set(PREFILL_GRAPH_ARGS) <= fields
    config = sglang_source.srt("model_executor/cuda_graph_config.py")
    assert 'DISABLED = "disabled"' in config and "    prefill: PhaseConfig = field(" in config
    assert "    backend: str = Backend.DISABLED" in config


def test_server_info_says_the_release(sglang_source: SglangSource) -> None:
    """The supervisor's server.version (probes.server_info.sglang_version) reads /server_info's ``version``."""
    assert '"version": __version__,' in sglang_source.srt("entrypoints/http_server.py")


def test_helpers_the_plugin_calls_exist(sglang_source: SglangSource) -> None:
    assert sglang_source.locate(sglang_source.release.args_view).node is not None
    reason = sglang_source.locate(compat.ADAPTIVE_UNSUPPORTED).node
    assert parameter_names(reason) == ["server_args"]
    io = "sglang.srt.managers.io_struct."
    for cls, field in [("SetInternalStateReqOutput", "updated"), ("SetInternalStateReq", "server_args"),
                       ("GetInternalStateReqOutput", "internal_state")]:
        assert find_definition(sglang_source.locate(io + cls).node, field) is not None, cls
    assert sglang_source.locate(compat.SET_STATE_OUTPUT).module == "sglang.srt.managers.io_struct"


def test_source_facts_the_adapter_relies_on(sglang_source: SglangSource) -> None:
    for rel, text in sglang_source.release.source_facts:
        assert text in sglang_source.srt(rel), (rel, text)


def self_assigned(cls: ast.AST) -> set[str]:
    """Every ``self.name = ...`` in the methods of ``cls``."""
    return {t.attr for node in ast.walk(cls) if isinstance(node, ast.Assign) for t in node.targets
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}


def test_the_model_class_is_read_where_the_release_keeps_it(sglang_source: SglangSource) -> None:
    """get_internal_state's owner leads to the Scheduler, whose model config's text config counts the experts."""
    release = sglang_source.release
    spec = next(s for s in release.hooks if s.handler == "get_internal_state")
    owner = sglang_source.locate(spec.target).owner
    assert owner is not None
    if release.scheduler_attr is None:
        assert owner.name == "Scheduler"
    else:  # a controller that keeps the Scheduler that built it
        assert release.scheduler_attr in self_assigned(owner)
        assert f"self.internal_state = {owner.name}(\n            {release.scheduler_attr}=self," in \
            sglang_source.srt("managers/scheduler.py")
    config_attr, text_attr = compat.MODEL_CONFIG_PATH
    assert config_attr in self_assigned(sglang_source.locate("sglang.srt.managers.scheduler.Scheduler").node)
    assert text_attr in self_assigned(sglang_source.locate("sglang.srt.configs.model_config.ModelConfig").node)
    assert f"self.{config_attr} = ModelConfig.from_server_args(" in sglang_source.srt("managers/scheduler.py")
    # SGLang's own MoE check reads the same object for the same keys.
    check = ast.unparse(sglang_source.locate("sglang.srt.model_loader.utils._is_moe_model").node)
    assert f"model_config.{text_attr}" in check
    assert all(f"'{key}'" in check for key in compat.EXPERT_KEYS)


@pytest.mark.parametrize(("sub", "key"), compat.NESTED_EXPERT_KEYS)
def test_a_nested_expert_count_is_where_the_release_reads_it(sglang_source: SglangSource, sub: str,
                                                             key: str) -> None:
    """DBRX: its config class builds ``ffn_config`` (from a dict too) with the count, and its model reads it there."""
    configs = sglang_source.tree("sglang/srt/configs/dbrx.py")
    classes = {n.name: n for n in configs.body if isinstance(n, ast.ClassDef)}
    assert sub in self_assigned(classes["DbrxConfig"]) and key in self_assigned(classes["DbrxFFNConfig"])
    assert f"self.{sub} = DbrxFFNConfig(**{sub})" in ast.unparse(classes["DbrxConfig"])
    assert f"self.num_total_experts = config.{sub}.{key}" in sglang_source.srt("models/dbrx.py")
    named = self_assigned(classes["DbrxConfig"]) | self_assigned(classes["DbrxFFNConfig"])
    assert not named & set(compat.EXPERT_KEYS), "DBRX names no flat key: without the nested one it counts as dense"


# -- SGLang's own code, run with ours plugged in -------------------------------


def adaptive_spec_params(source: SglangSource, monkeypatch) -> types.ModuleType:
    return exec_sglang_module(source, "speculative/adaptive_spec_params.py",
                              {"log_info_on_rank0": lambda logger, msg: None}, monkeypatch)


def test_sglang_reads_the_generated_config(sglang_source: SglangSource, config: str, monkeypatch) -> None:
    module = adaptive_spec_params(sglang_source, monkeypatch)
    assert module.resolve_candidate_steps_from_config(cfg_path=config) == [0, 3]
    theirs = module.AdaptiveSpeculativeParams(initial_steps=3, cfg_path=config)
    theirs.set_cuda_graph_bs([1, 2, 4, 8, 160, 256])
    assert theirs.cuda_graph_bs_for_step(0) == [1, 2, 4, 8, 160, 256]
    assert theirs.get_steps_for_batch(200) == 3


class SpecWorker:
    """SGLang's AdaptiveSpecWorker protocol, without a GPU."""

    def __init__(self, steps: int) -> None:
        self.speculative_num_steps = steps
        self.built: dict[int, list[int] | None] = {}

    def build_adaptive_runtime_state(self, speculative_num_steps, speculative_num_draft_tokens, cuda_graph_bs=None):
        assert speculative_num_draft_tokens == speculative_num_steps + 1
        self.built[speculative_num_steps] = cuda_graph_bs
        return types.SimpleNamespace(speculative_num_steps=speculative_num_steps)

    def apply_runtime_state(self, state) -> None:
        self.speculative_num_steps = state.speculative_num_steps


def test_sglangs_controller_switches_states_as_the_policy_decides(sglang_source: SglangSource, config: str,
                                                                   monkeypatch) -> None:
    def ours(initial_steps: int, cfg_path: str | None = None) -> SpecctlParams:
        return SpecctlParams(initial_steps, cfg_path, settings=QUICK)

    # 0.5.17's controller builds the params itself from the name HookRegistry patches.
    module = exec_sglang_module(sglang_source, "speculative/adaptive_runtime_state.py",
                                {"AdaptiveSpeculativeParams": ours}, monkeypatch)
    worker = SpecWorker(3)
    if "policy" in inspect.signature(module.AdaptiveController).parameters:  # 0.5.23 hands it over
        controller = module.AdaptiveController(worker, ours(initial_steps=3, cfg_path=config))
    else:
        controller = module.AdaptiveController(worker, config_path=config)
    controller.register(types.SimpleNamespace(speculative_num_steps=3))
    controller.init_states(cuda_graph_bs=[1, 2, 4, 8, 16])
    assert worker.built == {0: [1, 2, 4, 8, 16]}
    seen = []
    for bs in (1, 2, 9, 9, 16, 3, 1):
        controller.activate_step_by_batch(bs)
        seen.append(worker.speculative_num_steps)
        controller.on_verify_complete([min(2, worker.speculative_num_steps)] * bs, batch_size=bs)
    assert seen == [3, 3, 0, 0, 0, 3, 3]
    assert controller.params.state()["accept_mean"] == 2.0


def test_sglang_builds_a_state_per_candidate_depth_and_switches_among_them(sglang_source: SglangSource,
                                                                          tmp_path: Path, monkeypatch) -> None:
    """Candidates 0-3: SGLang reads all four, builds every state at every graph size, follows the depth."""
    from specctl.runtime.core.depth_model import DepthCosts

    cfg = str(write_config(tmp_path / "adaptive.json", 3, candidates=[0, 1, 2, 3]))
    loader = adaptive_spec_params(sglang_source, monkeypatch)
    assert loader.resolve_candidate_steps_from_config(cfg_path=cfg) == [0, 1, 2, 3]
    costs = DepthCosts((1, 16, 48, 96), (0, 1, 2, 3),
                       ((6e-3, 7e-3, 8e-3, 8.6e-3), (8e-3, 10.5e-3, 12.5e-3, 15e-3),
                        (14e-3, 19e-3, 26e-3, 32e-3), (20e-3, 36e-3, 48e-3, 60e-3)))
    settings = PolicySettings(candidates=(0, 1, 2, 3), off_at=1000, on_at=999, dwell=2)

    def ours(initial_steps: int, cfg_path: str | None = None) -> SpecctlParams:
        return SpecctlParams(initial_steps, cfg_path, settings=settings, costs=costs)

    module = exec_sglang_module(sglang_source, "speculative/adaptive_runtime_state.py",
                                {"AdaptiveSpeculativeParams": ours}, monkeypatch)
    worker = SpecWorker(3)
    if "policy" in inspect.signature(module.AdaptiveController).parameters:
        controller = module.AdaptiveController(worker, ours(initial_steps=3, cfg_path=cfg))
    else:
        controller = module.AdaptiveController(worker, config_path=cfg)
    controller.register(types.SimpleNamespace(speculative_num_steps=3))
    controller.init_states(cuda_graph_bs=[1, 2, 4, 8, 16, 48, 96])
    assert worker.built == {d: [1, 2, 4, 8, 16, 48, 96] for d in (0, 1, 2)}
    seen = []
    pattern = [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]  # about 0.7 a position: 7 in 10 pass the first, 4 the second
    drawn = 0
    for bs in [1] * 100 + [16] * 100 + [48] * 100 + [96] * 50:
        controller.activate_step_by_batch(bs)
        depth = worker.speculative_num_steps
        seen.append(depth)
        accepted = [min(depth, pattern[(drawn + i) % 10]) for i in range(bs)]
        drawn += bs
        controller.on_verify_complete(accepted, batch_size=bs)
    assert set(seen) == {0, 1, 2, 3}
    assert [seen[i] for i in (99, 199, 299, 349)] == [3, 2, 1, 0]
    assert controller.params.state()["steps"] == 0


# -- the hooks, through SGLang's real HookRegistry -----------------------------


@dataclass
class Answer:
    """Stand-in for SGLang's SetInternalStateReqOutput."""

    updated: bool


@dataclass
class Request:
    """Stand-in for SGLang's SetInternalStateReq."""

    server_args: dict[str, Any]
    rid: str | None = None


class StandIns:
    """The SGLang modules the hooks touch, as tiny stand-ins, plus the real HookRegistry.

    The stand-in methods play SGLang's side: the scheduler's own
    set_internal_state records what reached it and accepts unless told to refuse;
    fast_off's targets record their calls, and the decode step counts as an off
    step (as the prepare hook counts one) when told to.
    """

    def __init__(self, source: SglangSource, monkeypatch) -> None:
        self.source = source
        self.monkeypatch = monkeypatch
        self.reached: list[dict[str, Any]] = []
        self.refuse = False
        self.unsupported_reason: str | None = None
        self.fast_off_calls: list[str] = []
        self.off_step = False
        self.owner_attrs: dict[str, Any] = {}  # what the hooked method's owner holds (its model config)
        self.registry = exec_sglang_module(source, "plugins/hook_registry.py", {}, monkeypatch).HookRegistry
        self._module("sglang.srt.plugins.hook_registry")
        self._set(compat.SET_STATE_OUTPUT, Answer)
        self._set(source.release.args_view, lambda server_args: server_args)
        self._set(compat.ADAPTIVE_UNSUPPORTED, lambda server_args: self.unsupported_reason)
        for spec in source.release.hooks:
            self._set(spec.target, self._original(spec))
        for spec in source.release.fast_off_hooks:
            self._set(spec.target, self._fast_off_original(spec))
        # SGLang's get_spec() bag, as a capture override leaves it (draft_extend_graphs reads it)
        self.spec_bag = types.SimpleNamespace(speculative_num_steps=3, speculative_num_draft_tokens=4)
        self._set("sglang.srt.runtime_context.get_spec", lambda: self.spec_bag)
        for spec in source.release.draft_extend_hooks:
            self._set(spec.target, self._launch_width())
        self.warmups: list[str] = []  # what SGLang's warm-up thread ran, in order
        for spec in source.release.warmup_hooks:
            self._set(spec.target, self._wait_and_warmup())
        for spec in source.release.redact_hooks:
            self._set(spec.target, self._args_dump(spec))

    def _module(self, name: str) -> types.ModuleType:
        """``name`` and its parent packages, created empty where missing."""
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if prefix not in sys.modules:
                self.monkeypatch.setitem(sys.modules, prefix, types.ModuleType(prefix))
        return sys.modules[name]

    def _set(self, dotted: str, value: Any) -> None:
        located = self.source.locate(dotted)
        module = self._module(located.module)
        path = dotted[len(located.module) + 1:].split(".")
        if len(path) == 2:  # Class.method
            cls = getattr(module, path[0], None) or type(path[0], (), {})
            setattr(cls, path[1], value)
            setattr(module, path[0], cls)
        else:
            setattr(module, path[0], value)

    def _original(self, spec: HookSpec) -> Any:
        if spec.hook_type == "REPLACE":
            return type("AdaptiveSpeculativeParams", (), {})

        def set_internal_state(owner, recv_req):
            self.reached.append(dict(recv_req.server_args))
            return Answer(updated=not self.refuse)

        def get_internal_state(owner, recv_req):
            return types.SimpleNamespace(internal_state={"max_running_requests": 256})

        def check_server_args(*args):
            return None

        return {"set_internal_state": set_internal_state, "get_internal_state": get_internal_state,
                "check_server_args": check_server_args}[spec.handler]

    def _fast_off_original(self, spec: HookSpec) -> Any:
        def original(*args: Any, **kwargs: Any) -> str:
            self.fast_off_calls.append(spec.handler)
            if self.off_step:
                fast_off._count(1, True)
            return "sglang's result"

        return original

    @staticmethod
    def _launch_width() -> Any:
        """SGLang 0.5.17's resolve_num_tokens_per_req: the launch's width from the server args.

        A fresh function each time: HookRegistry rebinds every module attribute that
        holds the original, a module-level stand-in included.
        """
        def resolve_num_tokens_per_req(*, phase: str, server_args: Any, spec_algorithm: Any = None,
                                       is_draft_worker: bool = False, num_draft_tokens: int | None = None) -> int:
            return server_args.speculative_num_draft_tokens if phase == "draft_extend" else -1

        return resolve_num_tokens_per_req

    def _wait_and_warmup(self) -> Any:
        """SGLang's warm-up thread's target: its warm-up function (its own request), then "ready to roll"."""
        def _wait_and_warmup(server_args: Any, launch_callback: Any = None, execute_warmup_func: Any = None,
                             post_warmup_callback: Any = None) -> None:
            if execute_warmup_func(server_args):
                self.warmups.append("ready to roll")

        return _wait_and_warmup

    def _args_dump(self, spec: HookSpec) -> Any:
        """SGLang's argument-dump builders, as each release writes them: every server argument, the keys too."""
        if spec.params == ("base",):  # TokenizerManager.resolved_config_dict(self, base)
            def resolved_config_dict(owner: Any, base: dict[str, Any]) -> dict[str, Any]:
                return {**base, "served_model_name": "m"}

            return resolved_config_dict

        def build_server_info(server_args: Any, scheduler_info: dict[str, Any]) -> dict[str, Any]:
            result = dict(vars(server_args))
            result["launch_command"] = "python -m sglang.launch_server --api-key s3cret-api --port 30000"
            result.update(scheduler_info)
            return result

        return build_server_info

    def resolve(self, dotted: str) -> Any:
        return sglang_access.resolve(dotted)

    def unhook(self, spec: HookSpec) -> None:
        """Put SGLang's original back, as if HookRegistry had failed on ``spec.target``."""
        self._set(spec.target, self.resolve(spec.target).__wrapped__)

    def call(self, handler: str, *args: Any) -> Any:
        """Call the (hooked) SGLang target behind ``handler`` as SGLang would."""
        spec = next(s for s in self.source.release.hooks if s.handler == handler)
        located = self.source.locate(spec.target)
        if located.owner is None:
            return self.resolve(spec.target)(*args)
        owner_path, method = spec.target.rsplit(".", 1)
        owner = self.resolve(owner_path)()
        owner.__dict__.update(self.owner_attrs)
        if handler == "check_server_args":  # ServerArgs.check_server_args(self): the args are self
            owner.__dict__.update(vars(args[0]))
            return getattr(owner, method)()
        return getattr(owner, method)(*args)


@pytest.fixture
def world(sglang_source: SglangSource, monkeypatch) -> StandIns:
    """Stand-ins and a fresh HookRegistry; nothing registered yet, fast off on by default."""
    monkeypatch.setenv("SPECCTL_SETTINGS", json.dumps(QUICK.as_dict()))
    for name in ("PROMETHEUS_MULTIPROC_DIR", fast_off.ENV_ENABLE, draft_warmth.SKIP_DRAFT_EXTEND_ENV,
                 draft_extend_graphs.ENV_ENABLE, tree_switch.ENV_ENABLE, WARMUP_ENV):
        monkeypatch.setenv(name, "")  # recorded, so that what fast_off.install sets is undone
        monkeypatch.delenv(name)
    monkeypatch.setattr(fast_off, "STATS", fast_off.FastOffStats())
    monkeypatch.setattr(draft_warmth, "_skip_written", None)
    return StandIns(sglang_source, monkeypatch)


def install_all(world: StandIns) -> None:
    """What load() does in an SGLang process, then SGLang's apply_hooks."""
    for install in plugin.INSTALLERS:
        install(world.source.release)
    world.registry.apply_hooks()


@pytest.fixture
def hooked(world: StandIns, config: str) -> tuple[StandIns, SpecctlParams]:
    install_all(world)
    cls = world.resolve(compat.PARAMS_CLASS)
    assert cls is plugin.SglangParams
    return world, cls(initial_steps=3, cfg_path=config)


def test_specctl_keys_alone_never_reach_sglangs_handler(hooked) -> None:
    world, params = hooked
    answer = world.call("set_internal_state", Request({"specctl_mode": 2}))
    assert answer.updated is True
    assert world.reached == []
    assert params.get_steps_for_batch(1) == 0


def test_mixed_keys_split_between_sglang_and_specctl(hooked) -> None:
    world, params = hooked
    request = Request({"specctl_off_at": 48, "pp_max_micro_batch_size": 4})
    assert world.call("set_internal_state", request).updated is True
    assert world.reached == [{"pp_max_micro_batch_size": 4}]
    assert request.server_args == {"specctl_off_at": 48, "pp_max_micro_batch_size": 4}
    assert params.state()["settings"]["off_at"] == 48


def test_a_refused_specctl_key_refuses_the_whole_request(hooked, caplog) -> None:
    world, params = hooked
    before = params.state()
    with caplog.at_level(logging.WARNING, logger="specctl.plugin"):
        answer = world.call("set_internal_state", Request({"specctl_on_at": 99, "pp_max_micro_batch_size": 4}))
    assert answer.updated is False
    assert world.reached == []
    assert params.state() == before
    assert "specctl_on_at" in caplog.text


def test_when_sglang_refuses_its_key_specctl_changes_nothing(hooked) -> None:
    world, params = hooked
    world.refuse = True
    answer = world.call("set_internal_state", Request({"specctl_mode": 2, "pp_max_micro_batch_size": 9999}))
    assert answer.updated is False
    assert params.get_steps_for_batch(1) == 3


def test_sglang_only_requests_pass_through(hooked) -> None:
    world, _ = hooked
    assert world.call("set_internal_state", Request({"pp_max_micro_batch_size": 4})).updated is True
    assert world.reached == [{"pp_max_micro_batch_size": 4}]


def test_the_warm_up_key_holds_a_built_depth_and_never_reaches_sglang(hooked) -> None:
    world, params = hooked
    assert world.call("set_internal_state", Request({"specctl_warmup": 0})).updated is True
    assert params.get_steps_for_batch(1) == 0 and params.state()["held"] == 0
    assert world.call("set_internal_state", Request({"specctl_warmup": -1})).updated is True
    assert params.get_steps_for_batch(1) == 3 and params.state()["held"] is None
    assert world.reached == []


@pytest.mark.parametrize("wire", [{"specctl_warmup": 2}, {"specctl_warmup": 0, "specctl_mode": 2},
                                  {"specctl_warmup": 0, "pp_max_micro_batch_size": 4}])
def test_the_warm_up_key_with_another_key_or_an_unbuilt_depth_is_refused(hooked, caplog, wire) -> None:
    world, params = hooked
    before = params.state()
    with caplog.at_level(logging.WARNING, logger="specctl.plugin"):
        assert world.call("set_internal_state", Request(wire)).updated is False
    assert params.state() == before and world.reached == []
    assert "specctl_warmup" in caplog.text


def test_sglangs_warm_up_thread_runs_specctls_warm_up_before_its_own_request(hooked, sglang_source: SglangSource,
                                                                           tmp_path: Path) -> None:
    """Through HookRegistry: SGLang's thread target calls its warm-up function, which now warms every state first."""
    world, _ = hooked
    target = world.resolve(sglang_source.release.warmup_hooks[0].target)
    assert hasattr(target, "__wrapped__")
    with sim_process(tmp_path, "--load", "idle", "--gpus", "1") as url:
        def sglang_request(server_args: Any) -> bool:  # SGLang's own warm-up: one request, then "up"
            with urllib.request.urlopen(url + "/server_info", timeout=10) as r:
                spec = json.loads(r.read())["internal_states"][0]["specctl"]
            world.warmups.append(f"sglang's request, held {spec['held']}, policy step {spec['step']}")
            return True

        server_args = types.SimpleNamespace(url=lambda: url, api_key=None, admin_api_key=None)
        target(server_args, None, sglang_request)
    assert world.warmups == ["sglang's request, held None, policy step 0", "ready to roll"]


def test_start_up_stops_when_sglang_did_not_apply_the_warm_up_hook(hooked, sglang_source: SglangSource,
                                                                   config: str) -> None:
    world, _ = hooked
    spec = sglang_source.release.warmup_hooks[0]
    world.unhook(spec)
    with pytest.raises(SpecctlPluginError) as err:
        world.call("check_server_args", types.SimpleNamespace(**good_args(sglang_source.release, config)))
    message = str(err.value.code)
    assert f"switch warm-up hook on {spec.target} " in message and "SPECCTL_WARMUP=0 runs without it" in message


def test_with_the_warm_up_skipped_nothing_is_hooked_and_the_start_up_check_passes(
        world: StandIns, sglang_source: SglangSource, config: str, monkeypatch) -> None:
    monkeypatch.setenv(WARMUP_ENV, "0")
    install_all(world)
    assert not hasattr(world.resolve(sglang_source.release.warmup_hooks[0].target), "__wrapped__")
    assert world.call("check_server_args", types.SimpleNamespace(**good_args(sglang_source.release, config))) is None


def test_internal_state_gains_the_policy_state(hooked) -> None:
    world, params = hooked
    params.get_steps_for_batch(12)
    state = world.call("get_internal_state", Request({})).internal_state
    assert state["max_running_requests"] == 256
    assert {k: v for k, v in state["specctl"].items() if k != "off_state"} == params.state()
    assert (state["specctl"]["on"], state["specctl"]["batch_size"]) == (False, 12)
    assert state["specctl"]["off_state"] == fast_off.summary()


def model_config(release: Release, **hf: Any) -> dict[str, Any]:
    """The get_internal_state owner's attributes for a target whose HF (text) config has ``hf``."""
    config = types.SimpleNamespace(hf_text_config=types.SimpleNamespace(**hf), hf_config=None)
    if release.scheduler_attr is None:
        return {"model_config": config}
    return {release.scheduler_attr: types.SimpleNamespace(model_config=config)}


@pytest.mark.parametrize(("hf", "experts"), [
    ({"num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768}, 128),  # Qwen3-30B-A3B
    ({"num_local_experts": 8, "num_experts_per_tok": 2}, 8),  # Mixtral-8x7B
    ({"n_routed_experts": 256, "n_shared_experts": 1}, 256),  # DeepSeek-V3
    ({"ffn_config": types.SimpleNamespace(moe_num_experts=16, moe_top_k=4)}, 16),  # DBRX: a DbrxFFNConfig
    ({"ffn_config": {"moe_num_experts": 16, "moe_top_k": 4}}, 16),  # DBRX, its sub-config kept a dict
    ({"num_experts": None, "hidden_size": 4096}, 0),  # a dense config class that names the field
    ({"hidden_size": 4096}, 0),  # Llama-3.1-8B
])
def test_internal_state_says_the_targets_experts(hooked, sglang_source: SglangSource, hf: dict[str, Any],
                                                 experts: int) -> None:
    world, _ = hooked
    world.owner_attrs = model_config(sglang_source.release, **hf)
    state = world.call("get_internal_state", Request({})).internal_state
    assert state["specctl"]["experts"] == experts
    assert state["max_running_requests"] == 256


def test_an_unreachable_model_config_leaves_experts_unsaid_and_the_state_answered(hooked, caplog) -> None:
    world, _ = hooked  # the stand-in owner holds no model config
    plugin._say_experts_unreported.cache_clear()
    with caplog.at_level(logging.WARNING, logger="specctl.plugin"):
        first = world.call("get_internal_state", Request({})).internal_state
        world.call("get_internal_state", Request({}))
    assert "experts" not in first["specctl"] and first["specctl"]["mode"] == "auto"
    assert caplog.text.count("the target's experts go unreported") == 1, "once, not every poll"


def good_args(release: Release, config: str) -> dict[str, Any]:
    return {"speculative_algorithm": "EAGLE3", "speculative_eagle_topk": 1, "speculative_adaptive": True,
            "speculative_adaptive_config": config, release.dp_attr: release.dp_above}


def test_start_up_check_accepts_what_the_launcher_starts(hooked, sglang_source: SglangSource, config: str) -> None:
    world, _ = hooked
    assert world.call("check_server_args", types.SimpleNamespace(**good_args(sglang_source.release, config))) is None


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"speculative_algorithm": "NGRAM"}, "--speculative-algorithm must be EAGLE or EAGLE3"),
        ({"speculative_eagle_topk": 4}, "--speculative-eagle-topk must be 1"),
        ({"dp": True}, "attention data parallelism"),
        ({"speculative_adaptive": False}, "--speculative-adaptive is required"),
        ({"speculative_adaptive_config": None}, "--speculative-adaptive-config is required"),
        ({"no_off_state": True}, "must list candidate step 0"),
        ({"sglang_reason": "enable_pdmux=True is not supported"},
         "SGLang refuses adaptive speculation here: enable_pdmux"),
        ({"settings_steps": 5}, "the settings' steps (5) must be a candidate of --speculative-adaptive-config [0, 3]"),
    ],
)
def test_start_up_check_names_the_flag(hooked, sglang_source: SglangSource, config: str, tmp_path: Path,
                                       monkeypatch, change: dict[str, Any], words: str) -> None:
    world, _ = hooked
    release = sglang_source.release
    args = good_args(release, config)
    change = dict(change)  # the parameter is shared by both releases' runs
    if change.pop("dp", False):
        args[release.dp_attr] = release.dp_above + 1
    if change.pop("no_off_state", False):
        path = tmp_path / "on-only.json"
        path.write_text(json.dumps({"1": {"candidate_steps": [3]}}))
        args["speculative_adaptive_config"] = str(path)
    world.unsupported_reason = change.pop("sglang_reason", None)
    if "settings_steps" in change:
        monkeypatch.setenv("SPECCTL_SETTINGS", json.dumps({"steps": change.pop("settings_steps")}))
    args.update(change)
    with pytest.raises(SpecctlPluginError) as err:
        world.call("check_server_args", types.SimpleNamespace(**args))
    assert words in str(err.value.code)


def test_a_tree_server_is_told_in_one_line_what_specctl_can_do_and_what_to_change(
        hooked, sglang_source: SglangSource, config: str) -> None:
    world, _ = hooked
    args = {**good_args(sglang_source.release, config), "speculative_eagle_topk": 4}
    with pytest.raises(SpecctlPluginError) as err:
        world.call("check_server_args", types.SimpleNamespace(**args))
    message = str(err.value.code)
    assert "\n" not in message and message.startswith("specctl: --speculative-eagle-topk must be 1, got 4")
    assert "a topk-4 server it can only watch (specctl tui --attach URL)" in message
    assert ("launch with --speculative-eagle-topk 1 --speculative-num-steps 3 "
            "--speculative-num-draft-tokens 4") in message
    assert "docs/sglang-plugin.md" in message


def test_start_up_stops_when_sglang_did_not_apply_a_hook(hooked, sglang_source: SglangSource, config: str) -> None:
    world, _ = hooked
    spec = next(s for s in sglang_source.release.hooks if s.handler == "get_internal_state")
    world.unhook(spec)
    with pytest.raises(SpecctlPluginError) as err:
        world.call("check_server_args", types.SimpleNamespace(**good_args(sglang_source.release, config)))
    assert spec.target in str(err.value.code)


@pytest.mark.parametrize("handler", ["build_adaptive_runtime_state", "eagle_prepare_for_verify",
                                     fast_off.STEP_HANDLER])
def test_start_up_stops_when_sglang_did_not_apply_a_fast_off_hook(hooked, sglang_source: SglangSource, config: str,
                                                                   handler: str) -> None:
    world, _ = hooked
    spec = fast_off_spec(sglang_source.release, handler)
    world.unhook(spec)
    with pytest.raises(SpecctlPluginError) as err:
        world.call("check_server_args", types.SimpleNamespace(**good_args(sglang_source.release, config)))
    message = str(err.value.code)
    assert f"fast-off hooks on {spec.target} " in message
    assert "SPECCTL_FAST_OFF=0" in message


@pytest.mark.parametrize(("env", "all_hooked"), [({"SPECCTL_FAST_OFF": "0"}, False), ({"SPECCTL_FAST_OFF": "1"}, True)])
def test_start_up_checks_only_the_fast_off_hooks_in_use(world: StandIns, sglang_source: SglangSource, config: str,
                                                        monkeypatch, env: dict[str, str],
                                                        all_hooked: bool) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    install_all(world)
    applied = {s.handler for s in sglang_source.release.fast_off_hooks
               if hasattr(world.resolve(s.target), "__wrapped__")}
    assert applied == ({s.handler for s in sglang_source.release.fast_off_hooks} if all_hooked else set())
    assert world.call("check_server_args", types.SimpleNamespace(**good_args(sglang_source.release, config))) is None


def test_an_off_step_hands_the_read_done_event_to_the_releases_war_barrier(hooked, sglang_source: SglangSource) -> None:
    world, _ = hooked
    names = sglang_source.release.read_done
    owner_path, method = fast_off_spec(sglang_source.release, fast_off.STEP_HANDLER).target.rsplit(".", 1)
    worker = world.resolve(owner_path)()
    target = types.SimpleNamespace(**{names.event_attr: "read-done event"})
    reader = types.SimpleNamespace(**{names.event_attr: None})
    worker._target_worker = types.SimpleNamespace(model_runner=target)
    setattr(worker, names.runner_property, reader)
    assert getattr(worker, method)("batch") == "sglang's result"
    assert getattr(reader, names.event_attr) is None  # an on step moves nothing
    world.off_step = True
    assert getattr(worker, method)("batch") == "sglang's result"
    assert (getattr(reader, names.event_attr), getattr(target, names.event_attr)) == ("read-done event", None)
    assert world.fast_off_calls == [fast_off.STEP_HANDLER] * 2


# -- the 0.5.17-only hooks: the draft's prefill while off, alloc_for_spec_decode's loop --


def hooked_here(release: Release, handler: str) -> bool:
    return any(s.handler == handler for s in release.fast_off_hooks)


def compile_definition(node: ast.AST | None, filename: str, inject: dict[str, Any]) -> Any:
    """A function definition of the wheel's source, compiled without its annotations over ``inject``.

    Annotations go because they name SGLang's types, which are not importable here.
    """
    assert isinstance(node, ast.FunctionDef), filename
    node = ast.parse(ast.unparse(node)).body[0]
    assert isinstance(node, ast.FunctionDef)
    for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
        arg.annotation = None
    node.returns = None
    namespace = dict(inject)
    exec(compile(ast.Module(body=[node], type_ignores=[]), filename, "exec"), namespace)
    return namespace[node.name]


def function_from_source(source: SglangSource, rel: str, name: str, inject: dict[str, Any]) -> Any:
    """One top-level function of the wheel's source, compiled over ``inject``."""
    return compile_definition(find_definition(source.tree(f"sglang/srt/{rel}"), name), f"sglang/srt/{rel}", inject)


class CpuInts(list):
    """A 1-D int CPU tensor, as far as alloc_for_spec_decode reads one: ``[i]`` and ``tolist()``."""

    def tolist(self) -> list[int]:
        return list(self)


def test_alloc_for_spec_decode_uses_reqs_only_as_the_hook_expects(sglang_source: SglangSource) -> None:
    if not hooked_here(sglang_source.release, "alloc_for_spec_decode"):
        # This release already runs the loop over a list: nothing to backport.
        assert "nxt_kv_lens_cpu.tolist()" in sglang_source.srt("mem_cache/allocation.py")
        return
    fn = sglang_source.locate("sglang.srt.mem_cache.allocation.alloc_for_spec_decode").node
    parents = {child: parent for parent in ast.walk(fn) for child in ast.iter_child_nodes(parent)}
    uses = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == "reqs"]
    assert len(uses) == 2
    for use in uses:
        call = parents[use]
        assert isinstance(call, ast.Call) and ast.unparse(call.func) in ("len", "enumerate"), ast.unparse(call)
        if ast.unparse(call.func) == "enumerate":
            loop = parents[call]
            assert isinstance(loop, ast.For) and loop.iter is call
            assert [ast.unparse(s) for s in loop.body] == [
                "req.kv.kv_allocated_len = max(req.kv.kv_allocated_len, int(nxt_kv_lens_cpu[i]))"]


@pytest.mark.parametrize("needed", [0, 5])
def test_the_alloc_hook_leaves_what_sglangs_function_does(sglang_source: SglangSource, needed: int) -> None:
    """Hooked (0.5.17): the same as the plain function. Not hooked (0.5.23): its own loop gives the same."""
    assigned: list[tuple[Any, ...]] = []
    fn = function_from_source(sglang_source, "mem_cache/allocation.py", "alloc_for_spec_decode", {
        "alloc_token_slots": lambda tree_cache, n: f"slots:{n}",
        "assign_req_to_token_pool_func": lambda *a: assigned.append(a),
    })

    def run(call: Any) -> list[int]:
        reqs = [types.SimpleNamespace(kv=types.SimpleNamespace(kv_allocated_len=n)) for n in (3, 10, 7)]
        tree_cache = types.SimpleNamespace(token_to_kv_pool_allocator=types.SimpleNamespace(page_size=1))
        call(tree_cache, types.SimpleNamespace(req_to_token="to_token"), reqs=reqs, req_pool_indices="idx",
             cur_kv_lens="cur",
             cur_kv_lens_cpu=CpuInts([3, 10, 7]), nxt_kv_lens="nxt", nxt_kv_lens_cpu=CpuInts([8, 9, 12]),
             num_needed_tokens=needed, batch=None)
        return [r.kv.kv_allocated_len for r in reqs]

    plain = run(fn)
    if hooked_here(sglang_source.release, "alloc_for_spec_decode"):
        hook = fast_off.handlers(sglang_source.release)["alloc_for_spec_decode"]
        assert run(lambda *a, **kw: hook(fn, *a, **kw)) == plain
    assert plain == [8, 10, 12]
    calls = 2 if hooked_here(sglang_source.release, "alloc_for_spec_decode") else 1
    assert assigned == ([("idx", "to_token", "cur", "nxt", "slots:5", 3)] * calls if needed else [])


# -- the cold prefill (draft_prefill.py), in both releases ---------------------------


def prefill_method(source: SglangSource) -> ast.FunctionDef:
    node = source.locate(fast_off_spec(source.release, "draft_extend_for_prefill").target).node
    assert isinstance(node, ast.FunctionDef)
    return node


def test_sglang_calls_the_draft_prefill_as_the_cold_prefill_hook_reads_it(sglang_source: SglangSource) -> None:
    spec = fast_off_spec(sglang_source.release, "draft_extend_for_prefill")
    # The hook names batch and reads next_token_ids at args[1] (after batch), else by name.
    assert spec.params[:3] == ("batch", "target_hidden_states", "next_token_ids")
    worker = sglang_source.tree("sglang/srt/speculative/eagle_worker_v2.py")
    calls = [n for n in ast.walk(worker) if isinstance(n, ast.Call)
             and ast.unparse(n.func).endswith("._draft_extend_for_prefill")]
    # (batch, hidden states, next token ids, mm embeds) by position; 0.5.23's plan by keyword.
    assert calls and all(len(c.args) == 4 for c in calls)
    assert {k.arg for c in calls for k in c.keywords} == set(spec.params[4:])


def stand_in_keywords() -> dict[str, str]:
    """The keywords draft_prefill.cold_draft_input passes to EagleDraftInput, as source text."""
    tree = ast.parse((ROOT / "runtime" / "sglang_plugin" / "draft_prefill.py").read_text())
    fn = find_definition(tree, "cold_draft_input")
    calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and ast.unparse(n.func) == "EagleDraftInput"]
    assert len(calls) == 1
    return {k.arg: ast.unparse(k.value) for k in calls[0].keywords if k.arg}


def class_defaults(tree: ast.Module, name: str) -> dict[str, str]:
    """A dataclass's fields with their defaults, as source text ("" where it has none)."""
    cls = find_definition(tree, name)
    assert isinstance(cls, ast.ClassDef), name
    return {n.target.id: ast.unparse(n.value) if n.value is not None else "" for n in cls.body
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}


# What SGLang's draft prefill passes for the fields the stand-in leaves out, and the value
# that comes to wherever the stand-in may stand in (draft_prefill.stub_fits: no rejection
# sampling, no DSA seed), which must be the field's default.
LEFT_TO_THE_DEFAULT = {
    "draft_probs": ("probs if use_rejection_sampling else None", "None"),
    "dsa_topk_indices": ("prefill_dsa_topk", "None"),
    "cuda_graph_compatible": ("not (seed_from_extend and prefill_dsa_topk is None)", "True"),  # 0.5.23
}


def test_the_stand_in_is_what_sglangs_draft_prefill_returns_wherever_it_stands_in(sglang_source: SglangSource) -> None:
    prefill = prefill_method(sglang_source)
    returns = [n.value for n in ast.walk(prefill) if isinstance(n, ast.Return) and isinstance(n.value, ast.Call)]
    assert [ast.unparse(r.func) for r in returns] == ["EagleDraftInput"]
    real = {k.arg: ast.unparse(k.value) for k in returns[0].keywords}
    ours = stand_in_keywords()
    # The same values where the stand-in sets a field (the tensors aside: zeros of their shapes).
    assert set(ours) <= set(real)
    assert real["bonus_tokens"] == ours["bonus_tokens"] == "next_token_ids"
    assert real["num_tokens_per_req"] == ours["num_tokens_per_req"] == "1"
    assert real["num_tokens_for_logprob_per_req"] == ours["num_tokens_for_logprob_per_req"] == "1"
    # The rest come to their defaults wherever stub_fits holds.
    defaults = class_defaults(sglang_source.tree("sglang/srt/speculative/eagle_info.py"), "EagleDraftInput")
    assert set(real) - set(ours) <= set(LEFT_TO_THE_DEFAULT)
    for name in set(real) - set(ours):
        expression, value = LEFT_TO_THE_DEFAULT[name]
        assert (real[name], defaults[name]) == (expression, value), name
    # ... because those are what stub_fits rules out: the switches, read where stub_fits reads them.
    body = ast.unparse(prefill)
    assert "use_rejection_sampling = get_spec().speculative_use_rejection_sampling" in body
    assert "seed_from_extend = self.seed_dsa_topk_from_draft_extend and (not forward_batch.forward_mode.is_idle())" \
        in body
    seeded = {id(n) for i in ast.walk(prefill) if isinstance(i, ast.If) and ast.unparse(i.test) == "seed_from_extend"
              for n in ast.walk(i)}
    unseeded = [ast.unparse(n) for n in ast.walk(prefill) if isinstance(n, ast.Assign) and id(n) not in seeded
                and "prefill_dsa_topk" in {ast.unparse(t) for t in n.targets}]
    assert unseeded == ["prefill_dsa_topk = None"]
    # The proposals are (bs, topk), as the stand-in shapes them.
    assert "topk_p, topk_index = fast_topk(probs, self.topk, dim=-1)" in body


def compiled_method(source: SglangSource, dotted: str, inject: dict[str, Any]) -> Any:
    """One method of the wheel's source, compiled as a plain function (self first) over ``inject``."""
    return compile_definition(source.locate(dotted).node, dotted, inject)


class Ids(list):
    """next_token_ids / seq_lens: a shape and a device, as both stubs read them."""

    shape = property(lambda self: (len(self),))
    device = "cuda:0"


@pytest.mark.parametrize("hidden_size", [4096, None])
def test_the_stand_in_fills_what_sglangs_own_stub_fills(sglang_source: SglangSource, monkeypatch,
                                                         hidden_size: int | None) -> None:
    """SGLang's ``_stub_skipped_draft_extend`` and draft_prefill.cold_draft_input, run side by side."""
    from specctl.runtime.sglang_plugin import draft_prefill

    fake_torch = types.SimpleNamespace(zeros=lambda shape, dtype, device: ("zeros", shape, dtype, device),
                                       float32="f32", int64="i64")
    spec_of = lambda runner: (runner.hidden_size, None if runner.hidden_size is None else "bf16")  # noqa: E731
    stub = compiled_method(sglang_source, f"{compat._EAGLE_WORKER}._stub_skipped_draft_extend",
                           {"torch": fake_torch, "get_draft_recurrent_hidden_state_spec": spec_of})
    # The stub's assignments are all the fields it fills.
    filled = {t.attr for n in ast.walk(sglang_source.locate(f"{compat._EAGLE_WORKER}._stub_skipped_draft_extend").node)
              if isinstance(n, ast.Assign) for t in n.targets
              if isinstance(t, ast.Attribute) and ast.unparse(t.value) == "next_draft_input"}
    assert filled == {"topk_p", "topk_index", "hidden_states"}
    runner = types.SimpleNamespace(hidden_size=hidden_size)
    ids = Ids([7, 8, 9])
    sglangs = types.SimpleNamespace(hidden_states=None)  # as verify leaves it: EagleDraftInput(bonus_tokens=...)
    stub(types.SimpleNamespace(topk=1, device=ids.device, draft_worker=types.SimpleNamespace(draft_runner=runner)),
         types.SimpleNamespace(seq_lens=ids), types.SimpleNamespace(next_draft_input=sglangs))

    fakes = {"torch": vars(fake_torch),
             "sglang.srt.speculative.eagle_info": {"EagleDraftInput": types.SimpleNamespace},
             "sglang.srt.speculative.eagle_utils": {"get_draft_recurrent_hidden_state_spec": spec_of}}
    stand_in_modules(monkeypatch, fakes)
    ours = draft_prefill.cold_draft_input(types.SimpleNamespace(topk=1, draft_runner=runner), ids)
    assert {f: getattr(ours, f) for f in filled} == {f: getattr(sglangs, f) for f in filled}
    assert ours.topk_p == ("zeros", (3, 1), "f32", "cuda:0")
    assert ours.bonus_tokens is ids  # the target's next token ids themselves, as SGLang's prefill hands them on


def test_the_stub_fits_check_reads_what_sglangs_prefill_branches_on(sglang_source: SglangSource) -> None:
    worker = sglang_source.tree("sglang/srt/speculative/eagle_worker_v2.py")
    assert "seed_dsa_topk_from_draft_extend" in attribute_names(worker)
    assert "speculative_use_rejection_sampling" in attribute_names(prefill_method(sglang_source))
    args_fields = set().union(*(class_fields(sglang_source.tree(f"sglang/srt/{f}"))
                                for f in sglang_source.release.args_field_files))
    assert "speculative_use_rejection_sampling" in args_fields


def test_a_skipped_draft_prefill_leaves_the_war_barrier_no_stale_event(sglang_source: SglangSource) -> None:
    """The barrier after a prefill takes the draft runner's event of this step, or none (then the
    whole-forward wait): it clears the event every step, so a skipped phase leaves none behind."""
    names = sglang_source.release.read_done
    worker = fast_off_spec(sglang_source.release, fast_off.STEP_HANDLER).target.rsplit(".", 1)[0]
    prop = ast.unparse(sglang_source.locate(f"{worker}.{names.runner_property}").node)
    assert prop.rstrip().endswith("return self._draft_worker.draft_runner")
    barrier = ast.unparse(sglang_source.locate("sglang.srt.managers.scheduler.Scheduler._apply_war_barrier").node)
    assert (f"runner = self.model_worker.{names.runner_property}\n    ev = runner.{names.event_attr}\n"
            f"    runner.{names.event_attr} = None\n") in barrier
    assert "self.schedule_stream.wait_stream(self.forward_stream)" in barrier


# -- draft-extend graphs at every built depth (0.5.17, opt-in) -----------------


LAUNCH = types.SimpleNamespace(speculative_num_draft_tokens=4)  # server args of a launch at three steps


@pytest.mark.parametrize("opted_in", [True, False])
def test_the_draft_extend_graph_takes_the_width_of_the_state_being_captured(
        world: StandIns, sglang_source: SglangSource, monkeypatch, opted_in: bool) -> None:
    """docs/benchmarks.md, fourth sitting: 0.5.17 captured every built depth's draft extend at the launch's width."""
    specs = sglang_source.release.draft_extend_hooks
    if opted_in:
        monkeypatch.setenv(draft_extend_graphs.ENV_ENABLE, "1")
    if not specs:  # 0.5.23 reads get_spec() itself (tests/test_bench_models.py): nothing to register
        assert draft_extend_graphs.install(sglang_source.release, lambda spec, hook: pytest.fail(spec.target)) is False
        return
    # the runner module binds the function at import (from spec_utils import ...), before the hooks apply
    runner = world._module("sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner")
    monkeypatch.setattr(runner, "resolve_num_tokens_per_req", world.resolve(specs[0].target), raising=False)
    install_all(world)
    width = runner.resolve_num_tokens_per_req
    assert hasattr(width, "__wrapped__") is opted_in
    world.spec_bag = types.SimpleNamespace(speculative_num_steps=2, speculative_num_draft_tokens=3)
    assert width(phase="draft_extend", server_args=LAUNCH) == (3 if opted_in else 4)
    world.spec_bag = types.SimpleNamespace(speculative_num_steps=1, speculative_num_draft_tokens=2)
    assert width(phase="draft_extend", server_args=LAUNCH) == (2 if opted_in else 4)
    world.spec_bag = types.SimpleNamespace(speculative_num_steps=0, speculative_num_draft_tokens=1)
    assert width(phase="draft_extend", server_args=LAUNCH) == 4, "the steps-0 state keeps the launch's width"
    world.spec_bag = types.SimpleNamespace(speculative_num_steps=3, speculative_num_draft_tokens=4)
    assert width(phase="draft_extend", server_args=LAUNCH) == 4, "the launch state as before"
    world.spec_bag = types.SimpleNamespace(speculative_num_steps=2, speculative_num_draft_tokens=3)
    assert width(phase="target_verify", server_args=LAUNCH) == -1, "other phases are SGLang's"


def test_start_up_stops_when_sglang_did_not_apply_the_draft_extend_hook(world: StandIns, sglang_source: SglangSource,
                                                                        config: str, monkeypatch) -> None:
    monkeypatch.setenv(draft_extend_graphs.ENV_ENABLE, "1")
    install_all(world)
    specs = sglang_source.release.draft_extend_hooks
    assert world.call("check_server_args", types.SimpleNamespace(**good_args(sglang_source.release, config))) is None
    if not specs:
        return
    world.unhook(specs[0])
    with pytest.raises(SpecctlPluginError) as err:
        world.call("check_server_args", types.SimpleNamespace(**good_args(sglang_source.release, config)))
    message = str(err.value.code)
    assert f"draft-extend graph hook on {specs[0].target} " in message
    assert "unset SPECCTL_DRAFT_EXTEND_GRAPHS" in message


def test_server_info_dumps_lose_every_key(hooked, sglang_source: SglangSource) -> None:
    """The admin key read back as any local user would, through what /server_info builds its answer with on
    this release: SGLang's real HookRegistry applied the plugin's hooks, and no ``*api_key*`` is left."""
    world, _ = hooked
    args = types.SimpleNamespace(model_path="m", admin_api_key="s3cret-admin", api_key="s3cret-api", port=30000)
    for spec in sglang_source.release.redact_hooks:
        target = world.resolve(spec.target)
        assert hasattr(target, "__wrapped__"), spec.target
        if spec.params == ("base",):
            owner = world.resolve(spec.target.rsplit(".", 1)[0])()
            answer = owner.resolved_config_dict(dict(vars(args)))
        else:
            answer = target(args, {"status": "ready"})
        text = json.dumps(answer)
        assert "s3cret" not in text and "api_key" not in text, (spec.target, text)
        assert answer["model_path"] == "m" and answer["port"] == 30000
    assert args.admin_api_key == "s3cret-admin"  # the server keeps its own key: the dump was a copy


def test_server_info_is_built_by_the_hooked_functions(sglang_source: SglangSource) -> None:
    """Both routes that dump the arguments (/server_info, /get_server_info) run server_info(), whose body goes
    through one of the hooked builders, on this release."""
    http = sglang_source.srt("entrypoints/http_server.py")
    body = http.split("async def server_info():", 1)[1].split("\n@app.", 1)[0]
    names = {spec.target.rsplit(".", 1)[1] for spec in sglang_source.release.redact_hooks}
    assert any(f"{name}(" in body for name in names), body
    assert "dataclasses.asdict(server_args)\n" not in body.replace("resolved_config_dict(\n                "
                                                                   "dataclasses.asdict(server_args)\n", "")
    tail = http.split('@app.get("/get_server_info")', 1)[1].split("\n@app.", 1)[0]
    assert "return await server_info()" in tail
