"""Everything that differs between the SGLang releases the plugin supports.

The hook targets (the plugin's own and fast_off's), the server-args view and
fields that differ, and the source facts the adapter and fast_off rely on are
*data* here, so that the contract tests (tests/test_plugin_contract.py) check
the very list the plugin installs against each release's real source. This
module imports nothing from SGLang at import time: the data must be readable
on a machine without torch. The start-up check that reads the server args
is server_args_check.py; the shapes of this data are release_types.py, and
sglang_access.py resolves and registers what it names at run time.
"""

from __future__ import annotations

# SGLang's whitelist of general plugins (sglang/srt/plugins/__init__.py); unset = all load.
# Named in the shared wire module (the launcher sets it too), re-exported beside SGLang's other names.
from specctl.runtime.core.wire import PLUGINS_ENV as PLUGINS_ENV
from specctl.runtime.sglang_plugin.release_types import CallSpec, EarlyPublishNames, HookSpec, ReadDoneNames, Release

PARAMS_CLASS = "sglang.srt.speculative.adaptive_spec_params.AdaptiveSpeculativeParams"
ADAPTIVE_UNSUPPORTED = "sglang.srt.speculative.adaptive_spec_params.adaptive_unsupported_reason"
HOOK_REGISTRY = "sglang.srt.plugins.hook_registry.HookRegistry"
HOOK_TYPE = "sglang.srt.plugins.hook_registry.HookType"
SET_STATE_OUTPUT = "sglang.srt.managers.io_struct.SetInternalStateReqOutput"
# prometheus_client reads this variable; SGLang sets it when --enable-metrics is on.
PROMETHEUS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"

# The same in both releases (line numbers in docs/sglang-plugin.md, "Fast off").
_EARLY_FACTS = (
    # FlashInfer keeps the base class's True; the scheduler ORs the spec worker's backends.
    ("srt/layers/attention/base_attn_backend.py", "needs_cpu_seq_lens: bool = True"),
    ("srt/managers/overlap_utils.py", 'getattr(b, "needs_cpu_seq_lens", True) for b in attn_backends'),
    # ... kept on the future map that on_publish is bound to (early_publish's auto reads it).
    ("srt/managers/overlap_utils.py", "self.needs_cpu_seq_lens = needs_cpu_seq_lens"),
    ("srt/managers/overlap_utils.py", "if not self.needs_cpu_seq_lens:"),
    # The host wait: a private stream gated on the publish event, then synchronized.
    ("srt/managers/overlap_utils.py",
     "self.fwd_prepare_d2h_stream.wait_event(self.publish_ready)\n"
     "        with torch.get_device_module(self.device).stream(self.fwd_prepare_d2h_stream):\n"
     "            self.new_seq_lens_cpu_pinned.copy_(self.new_seq_lens_buf, non_blocking=True)\n"
     "        self.fwd_prepare_d2h_stream.synchronize()"),
    ("srt/managers/scheduler.py", 'fwd_kwargs["on_publish"] = partial(\n'
                              "                                self.future_map.publish, future_indices"),
    ("srt/managers/scheduler.py", "batch, **fwd_kwargs"),
    # What SGLang publishes: a prefill's lengths as they came, a verify's plus accept_lens,
    # which is the number of correct drafts + 1 (0 drafts in the 1-node tree while off).
    ("srt/speculative/eagle_worker_v2.py", "batch_output.new_seq_lens = batch.seq_lens\n"),
    ("srt/speculative/eagle_worker_v2.py", "on_publish(batch_output.new_seq_lens)"),
    ("srt/speculative/eagle_worker_common.py", "new_seq_lens = batch.seq_lens + accept_lens"),
    ("srt/speculative/eagle_worker_v2.py", "self.plan_stream, self.plan_stream_ctx = get_plan_stream(self.device)"),
    ("srt/speculative/eagle_worker_common.py", "with plan_stream_ctx:"),
    ("srt/speculative/spec_utils.py", "if envs.SGLANG_ENABLE_OVERLAP_PLAN_STREAM.get():"),
)



_PARAMS_HOOK = HookSpec(PARAMS_CLASS, "REPLACE", "params", ("initial_steps", "cfg_path"))

# Every argument dump the tokenizer manager answers with (/server_info in 0.5.17, its gRPC twin, crash dumps).
_DUMP_CONFIG = HookSpec("sglang.srt.managers.tokenizer_manager.TokenizerManager.resolved_config_dict", "AFTER",
                        "args_dump", ("base",))
# 0.5.23's /server_info (HTTP, gRPC and the Rust server's launch info) builds its answer here.
_DUMP_INFO = HookSpec("sglang.srt.utils.common.build_server_info", "AFTER", "args_dump",
                      ("server_args", "scheduler_info"))

_EAGLE_WORKER = "sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2"
# fast_off's hooks on building the steps-0 runtime state and on preparing a verify:
# the same targets and parameters in both releases. Handler names: fast_off.handlers.
_FAST_OFF_BUILD = HookSpec(f"{_EAGLE_WORKER}.build_adaptive_runtime_state", "AROUND", "build_adaptive_runtime_state",
                           ("speculative_num_steps", "speculative_num_draft_tokens", "cuda_graph_bs"))
_FAST_OFF_PREPARE = HookSpec("sglang.srt.speculative.eagle_utils.eagle_prepare_for_verify", "AROUND",
                             "eagle_prepare_for_verify",
                             ("verify_input", "req_to_token_pool", "batch", "target_worker"))
# The step hook passes every argument through; its parameters are listed so that a
# change of the step's signature is seen.
_FAST_OFF_STEP = f"{_EAGLE_WORKER}.forward_batch_generation"
# Skipping the draft's prefill while off and cold (draft_prefill.py). The same stand-in
# serves both releases: 0.5.23's prefill takes the target's KV location plan as well (passed
# by keyword; the stand-in writes no KV, so it needs none) and its EagleDraftInput gained
# fields whose defaults are what its prefill sets whenever the stand-in may stand in
# (tests/test_plugin_contract.py checks both against each wheel).
_COLD_PREFILL_TARGET = "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker._draft_extend_for_prefill"
_COLD_PREFILL_PARAMS = ("batch", "target_hidden_states", "next_token_ids", "mm_input_embeds")
_COLD_PREFILL = HookSpec(_COLD_PREFILL_TARGET, "AROUND", "draft_extend_for_prefill", _COLD_PREFILL_PARAMS)
_COLD_PREFILL_0523 = HookSpec(_COLD_PREFILL_TARGET, "AROUND", "draft_extend_for_prefill",
                              (*_COLD_PREFILL_PARAMS, "kv_loc_plan"))
# What the stand-in relies on, the same in both releases (under sglang/srt/): the scheduler
# undoes the draft prefill's edits of the batch (input_ids, spec_info) after every speculative
# forward, so skipping them changes nothing; the draft input becomes the batch's spec_info, and
# the future map stashes only these of its fields; the bonus tokens are the target's next token
# ids themselves (the stand-in passes the same object). The WAR barrier's side: the contract tests.
_COLD_PREFILL_FACTS = (
    ("managers/scheduler.py", "snapshot_v2_full = not batch.spec_algorithm.is_none()"),
    ("managers/scheduler.py", "batch.spec_info = batch_result.next_draft_input"),
    ("managers/overlap_utils.py",
     "            bonus_tokens=draft_input.bonus_tokens,\n"
     "            topk_p=draft_input.topk_p,\n"
     "            topk_index=draft_input.topk_index,\n"
     "            hidden_states=draft_input.hidden_states,\n"
     '            draft_probs=getattr(draft_input, "draft_probs", None),\n'
     "            dsa_topk_indices=draft_input.dsa_topk_indices,\n"
     "        )"),
    ("speculative/eagle_worker_v2.py", "bonus_tokens=next_token_ids,"),
)
# 0.5.17 only: 0.5.23's tolist loop in alloc_for_spec_decode, backported to 0.5.17.
_SPEC_ALLOC = HookSpec("sglang.srt.mem_cache.allocation.alloc_for_spec_decode", "AROUND", "alloc_for_spec_decode",
                       ("tree_cache", "req_to_token_pool", "reqs", "req_pool_indices", "cur_kv_lens",
                        "cur_kv_lens_cpu", "nxt_kv_lens", "nxt_kv_lens_cpu", "num_needed_tokens", "batch"))

# 0.5.17 only (draft_extend_graphs.py): the draft extend's graph width from get_spec(), which
# the adaptive capture override sets per state, as 0.5.23's resolve_num_tokens_per_req reads it.
_DRAFT_EXTEND_WIDTH = HookSpec("sglang.srt.speculative.spec_utils.resolve_num_tokens_per_req", "AROUND",
                               "resolve_num_tokens_per_req",
                               ("phase", "server_args", "spec_algorithm", "is_draft_worker", "num_draft_tokens"))

# tree_switch.py (opt-in): SGLang refuses adaptive speculation for topk > 1 and, when it runs,
# resizes the launch's draft tokens to steps + 1; 0.5.23 also bounds them by the candidates.
_TREE_REASON = HookSpec(ADAPTIVE_UNSUPPORTED, "AROUND", "adaptive_unsupported_reason", ("server_args",))
_TREE_TOKENS = HookSpec("sglang.srt.arg_groups.speculative_hook._init_adaptive_speculative_params", "AROUND",
                        "init_adaptive_speculative_params", ("server_args",))
# The off step of a tree server still runs SGLang's tree compaction, an identity at one draft token a request.
_TREE_FINALIZE = HookSpec("sglang.srt.speculative.eagle_worker_common._finalize_accept_tree_path", "AROUND",
                          "finalize_accept_tree_path", ("batch", "accept_index", "accept_lens", "predict",
                                                        "logits_output", "bs", "token_to_kv_pool_allocator",
                                                        "num_draft_tokens"))
_TREE_BOUND = HookSpec("sglang.srt.speculative.spec_info.SpeculativeAlgorithm.resolve_max_speculative_num_draft_tokens",
                       "AROUND", "resolve_max_speculative_num_draft_tokens", ("server_args",))

# switch_warmup.py: the warm-up thread's target, looked up by name when the thread starts (a source fact).
_WARMUP_TARGET = "sglang.srt.entrypoints.http_server._wait_and_warmup"
_WARMUP_PARAMS = ("server_args", "launch_callback", "execute_warmup_func")
_WARMUP_FACTS = (
    ("entrypoints/http_server.py", "target=_wait_and_warmup,"),
    ("entrypoints/http_server.py", "if not execute_warmup_func(server_args):"),
    ("server_args.py", "    def url(self"),
)

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
            # /server_info's argument dump is built by the hooked resolved_config_dict (server_info.py)
            ("entrypoints/http_server.py", "**_global_state.tokenizer_manager.resolved_config_dict(\n"
             "                dataclasses.asdict(server_args)"),
            *_COLD_PREFILL_FACTS,
            *_WARMUP_FACTS,
        ),
        fast_off_hooks=(
            _FAST_OFF_BUILD,
            _FAST_OFF_PREPARE,
            HookSpec(_FAST_OFF_STEP, "AROUND", "forward_batch_generation",
                     ("batch", "on_publish", "grammar_barrier")),
            _COLD_PREFILL,
            _SPEC_ALLOC,
        ),
        read_done=ReadDoneNames("war_fastpath_runner", "war_fastpath_read_done_event"),
        early_publish=EarlyPublishNames("on_publish", "plan_stream", "needs_cpu_seq_lens", _EARLY_FACTS + (
            ("srt/speculative/eagle_utils.py", "return predict, num_correct_drafts + 1, accept_index"),
        )),
        scheduler_attr=None,
        draft_extend_hooks=(_DRAFT_EXTEND_WIDTH,),
        tree_hooks=(_TREE_REASON, _TREE_TOKENS, _TREE_FINALIZE),
        warmup_hooks=(HookSpec(_WARMUP_TARGET, "AROUND", "wait_and_warmup", _WARMUP_PARAMS),),
        redact_hooks=(_DUMP_CONFIG,),
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
            "arg_groups/fields/observability.py", "arg_groups/fields/exec_.py", "arg_groups/fields/schedule.py",
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
            # /server_info's argument dump is built by the hooked build_server_info (server_info.py)
            ("entrypoints/http_server.py", "**build_server_info(server_args, _global_state.scheduler_info)"),
            ("utils/common.py", "    result = server_args.resolved_dict()\n"
             "    result[\"launch_command\"] = server_args.launch_command"),
            *_COLD_PREFILL_FACTS,
            *_WARMUP_FACTS,
            # The cold prefill: the target's prefill publishes no read-done event for EAGLE
            # (drafted or not, the barrier after a prefill is the whole-forward one) ...
            ("speculative/spec_info.py", "return self.is_none() or self.is_dflash_family()"),
            ("model_executor/runner_utils/shared_read_event.py",
             "if not model_runner.spec_algorithm.supports_prefill_shared_read_done():\n        return"),
            # ... and the draft's QSA index sharing, which reuses the draft prefill's selection,
            # is off under adaptive speculation (which specctl requires).
            ("speculative/eagle_worker_v2.py", '"index_share_for_mtp_iteration is disabled under adaptive "'),
        ),
        fast_off_hooks=(
            _FAST_OFF_BUILD,
            _FAST_OFF_PREPARE,
            HookSpec(_FAST_OFF_STEP, "AROUND", "forward_batch_generation",
                     ("batch", "on_publish", "grammar_barrier", "pp_proxy_tensors")),
            _COLD_PREFILL_0523,
        ),
        read_done=ReadDoneNames("last_shared_read_runner", "shared_read_done_event"),
        early_publish=EarlyPublishNames("on_publish", "plan_stream", "needs_cpu_seq_lens", _EARLY_FACTS + (
            ("srt/speculative/eagle_utils.py", "accept_lens = num_correct_drafts + 1"),
            # The fused commit kernel (topk 1) stores the same sum.
            ("kernels/ops/speculative/eagle.py", "tl.store(new_seq_lens + row, length + accepted, valid)"),
            # The prefill path moved into a method of its own; the scheduler's prefill
            # call reaches it with on_publish.
            ("srt/speculative/eagle_worker_v2.py",
             "return self._forward_prefill_batch(batch, on_publish, pp_proxy_tensors)"),
        )),
        scheduler_attr="scheduler",
        tree_hooks=(_TREE_REASON, _TREE_TOKENS, _TREE_BOUND, _TREE_FINALIZE),
        tree_declare="sglang.srt.arg_groups.overrides.declare_resolution",
        tree_page_one=True,
        warmup_hooks=(HookSpec(_WARMUP_TARGET, "AROUND", "wait_and_warmup",
                               (*_WARMUP_PARAMS, "post_warmup_callback")),),
        redact_hooks=(_DUMP_CONFIG, _DUMP_INFO),
    ),
}

# The model class (plugin.target_experts): the Scheduler's model config, then its text config
# (a multimodal model's language part), the object SGLang's own MoE check reads
# (model_loader/utils.py, _is_moe_model), the same in both releases.
MODEL_CONFIG_PATH = ("model_config", "hf_text_config")
# The HF config keys that count a MoE's routed experts, in the order SGLang's LoRA pool reads
# them (lora/mem_pool.py, _get_num_experts): Qwen2/3-MoE, Mixtral, DeepSeek (and Kimi, GLM).
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
# Read after them: counts a model keeps in a sub-config, (sub-config, key). DBRX keeps its
# routed experts in ``ffn_config.moe_num_experts`` (SGLang's configs/dbrx.py makes ffn_config a
# DbrxFFNConfig, from a dict where it is given one; models/dbrx.py reads the count there), and
# names none of the flat keys, so without it DBRX would count as dense.
NESTED_EXPERT_KEYS = (("ffn_config", "moe_num_experts"),)

_DECODE_GRAPHS = "sglang.srt.model_executor.runner.decode_cuda_graph_runner.DecodeCudaGraphRunner"
_FORWARD_BATCH = "sglang.srt.model_executor.forward_batch_info.ForwardBatch"

# What fast_off calls besides its hook targets, the same in every release. capture and
# get_spec_info are overridden by fast_off's decode graph runner, so their parameters matter too.
FAST_OFF_CALLS = (
    CallSpec(f"{_EAGLE_WORKER}._override_worker_state",
             ("speculative_num_steps", "speculative_num_draft_tokens", "cuda_graph_bs")),
    CallSpec("sglang.srt.model_executor.model_runner.ModelRunner._get_attention_backend", ("init_new_workspace",)),
    CallSpec(f"{_DECODE_GRAPHS}.__init__",
             ("model_runner", "attn_backend", "speculative_num_steps", "speculative_num_draft_tokens")),
    CallSpec(f"{_DECODE_GRAPHS}.capture", ()),
    CallSpec(f"{_DECODE_GRAPHS}.get_spec_info", ("num_tokens",)),
    CallSpec(f"{_DECODE_GRAPHS}.can_run_graph", ("forward_batch",)),
    CallSpec(f"{_DECODE_GRAPHS}.load_batch", ("forward_batch",)),
    CallSpec(f"{_FORWARD_BATCH}.init_new",
             ("batch", "model_runner", "capture_hidden_mode", "return_hidden_states_before_norm")),
    CallSpec(f"{_FORWARD_BATCH}.mark_forward_metadata_ready", ()),
    CallSpec("sglang.kernels.ops.speculative.cache_locs.assign_extend_cache_locs_uniform_func",
             ("req_pool_indices", "req_to_token", "start_offset", "batch_size", "draft_token_num", "device")),
    CallSpec("sglang.srt.utils.common.get_available_gpu_memory", ("device", "gpu_id")),
    # Reached through the scheduler's partial(publish, future_indices) (early publish).
    CallSpec("sglang.srt.managers.overlap_utils.FutureMap.publish", ("future_indices", "new_seq_lens")),
)
# Class fields and enum members fast_off reads or sets, the same in every release.
FAST_OFF_NAMES = (
    "sglang.srt.speculative.adaptive_runtime_state.SpecRuntimeState.target_attn_backend",
    "sglang.srt.speculative.adaptive_runtime_state.SpecRuntimeState.target_graph_runner",
    "sglang.srt.model_executor.forward_batch_info.ForwardMode.DECODE",
    "sglang.srt.model_executor.forward_batch_info.CaptureHiddenMode.FULL",
)
