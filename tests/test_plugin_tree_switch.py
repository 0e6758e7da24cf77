"""A tree draft under specctl's switch (tree_switch.py), against each release's real source.

SGLang's own functions run here, read from its wheel (the start-up path of
``handle_speculative_decoding``: ``_maybe_disable_adaptive``, then
``_init_adaptive_speculative_params``, and the draft-token bound that sizes KV),
with specctl's hooks applied by SGLang's own HookRegistry. What each test
checks is what SGLang would decide for the report's launch line (topk 4,
2 steps, 16 draft tokens, candidates {0, 2}): without the hooks a static
3-token tree, with them an adaptive 16-token one. No GPU: whether the tree
then runs correctly under the switch is the GPU proof docs/sglang-plugin.md lists.
"""

from __future__ import annotations

import ast
import functools
import json
import logging
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from specctl.runtime.core.settings import PolicySettings
from specctl.runtime.sglang_plugin import compat, server_args_check, sglang_access, tree_switch
from specctl.runtime.sglang_plugin.release_types import Release

from support.sglang_source import SglangSource, find_definition, module_name, run_module
from support.stand_in_modules import stand_in_modules

TREE = {"speculative_algorithm": "EAGLE3", "speculative_eagle_topk": 4, "speculative_num_steps": 2,
        "speculative_num_draft_tokens": 16, "speculative_adaptive": True}


def exec_definitions(source: SglangSource, rel: str, names: tuple[str, ...], inject: dict[str, Any],
                     owner: str | None = None) -> dict[str, Any]:
    """The named top-level functions (or ``owner`` class's methods) of one SGLang file, run with ``inject``.

    Only the definitions run, so a module's own imports (torch, the GPU stack) never do; decorators are dropped.
    """
    scope: ast.AST = source.tree(f"sglang/srt/{rel}")
    if owner:
        scope = find_definition(scope, owner)
    nodes = []
    for name in names:
        node = find_definition(scope, name)
        assert isinstance(node, ast.FunctionDef), (rel, name)
        node.decorator_list = []
        nodes.append(node)
    namespace: dict[str, Any] = {"__name__": module_name(rel), **inject}
    exec(compile(ast.Module(body=nodes, type_ignores=[]), f"sglang/srt/{rel}", "exec"), namespace)
    return {name: namespace[name] for name in names}


def exec_module(source: SglangSource, rel: str, inject: dict[str, Any]) -> dict[str, Any]:
    """One SGLang file run whole, its ``from sglang...`` imports replaced by ``inject``."""
    namespace: dict[str, Any] = {"__name__": module_name(rel), **inject}
    run_module(source, rel, namespace)
    return namespace


class Record:
    """Server args as SGLang's start-up passes hold them (0.5.17 assigns fields; 0.5.23 declares over them)."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


class Sglang:
    """SGLang's start-up functions of one release, hooked as a launch with the plugin would hook them."""

    def __init__(self, source: SglangSource, monkeypatch: pytest.MonkeyPatch, config: str) -> None:
        self.release: Release = source.release
        self.config = config
        self.newer = self.release.tree_declare is not None  # 0.5.23's resolution by declarations
        views = self._views(source)
        algorithm = self._algorithm(source, views)
        params = exec_module(source, "speculative/adaptive_spec_params.py", {
            "log_info_on_rank0": lambda logger, msg: None, "attn_dp_enabled_of": lambda view: False,
            "SpeculativeAlgorithm": algorithm, **views})
        hook = exec_definitions(source, "arg_groups/speculative_hook.py",
                                ("_maybe_disable_adaptive", "_init_adaptive_speculative_params"),
                                {"logger": logging.getLogger("sglang.speculative_hook"), **views})
        registry = exec_module(source, "plugins/hook_registry.py", {})
        self.moved: list[int] = []  # the tree compaction's KV moves: SGLang's function runs, its torch work stood in
        common = exec_definitions(source, "speculative/eagle_worker_common.py", ("_finalize_accept_tree_path",), {
            "torch": types.SimpleNamespace(Tensor=object), "ScheduleBatch": object, "Any": Any,
            "move_accept_tokens_to_target_kvcache": lambda batch, index, drafts, pool: self.moved.append(len(index)),
            "_compact_accept_to_front": lambda x, index, bs, *, num_draft_tokens: ("compacted", x)})
        stand_in_modules(monkeypatch, {
            "sglang.srt.speculative.eagle_worker_common": common,
            "sglang.srt.plugins.hook_registry": registry,
            "sglang.srt.arg_groups.overrides": views,
            "sglang.srt.arg_groups.speculative_hook": hook,
            "sglang.srt.speculative.adaptive_spec_params": params,
            "sglang.srt.speculative.spec_info": {"SpeculativeAlgorithm": algorithm},
        })
        self.registry = registry["HookRegistry"]
        self.record = self._record_class(source)

    def _views(self, source: SglangSource) -> dict[str, Any]:
        """The args views the functions read (0.5.17: the record itself; 0.5.23: SGLang's own, run here)."""
        if self.release.tree_declare is None:
            return {"resolved_view": lambda server_args: server_args}
        base = exec_module(source, "arg_groups/model_override_base.py", {
            "current_platform": None, "get_platform": None, "is_mps": lambda: False,
            "is_no_spec_infer_or_topk_one": lambda *a: True})

        def no_context() -> Any:
            raise ValueError("no context")  # nothing is published at start-up

        declare = exec_definitions(source, "arg_groups/overrides.py", ("declare_resolution",),
                                   {"is_record": lambda args: False, "get_context": no_context})
        return {"resolving_view": base["resolving_view"], "resolved_view": base["resolved_view"], **declare}

    def _algorithm(self, source: SglangSource, views: dict[str, Any]) -> type:
        """SpeculativeAlgorithm as the functions use it; 0.5.23's bound resolver is SGLang's own."""
        methods: dict[str, Any] = {
            "from_string": classmethod(lambda cls, name: cls()),
            "get_platform_worker_cls": lambda self: None,
        }
        if self.release.tree_declare is not None:
            resolver = ("resolve_max_speculative_num_draft_tokens",)
            owner = "SpeculativeAlgorithm"
            methods.update(exec_definitions(source, "speculative/spec_info.py", resolver, {}, owner=owner))
        return type("SpeculativeAlgorithm", (), methods)

    def _record_class(self, source: SglangSource) -> type:
        """0.5.17's ServerArgs carries the bound as a cached_property of its own (SGLang's, run here)."""
        if self.release.tree_declare is not None:
            return Record
        prop = exec_definitions(source, "server_args.py", ("max_speculative_num_draft_tokens",), {},
                                owner="ServerArgs")["max_speculative_num_draft_tokens"]
        cached = functools.cached_property(prop)
        cls = type("ServerArgs", (Record,), {"max_speculative_num_draft_tokens": cached})
        cached.__set_name__(cls, "max_speculative_num_draft_tokens")
        return cls

    def hook(self) -> None:
        """What load() and apply_hooks do in an SGLang process (tree_switch's installer alone)."""
        tree_switch.install(self.release)
        self.registry.apply_hooks()

    def start(self, **fields: Any) -> Any:
        """The adaptive part of SGLang's start-up for these args; the args afterwards."""
        args = self.record(**{**TREE, "speculative_adaptive_config": self.config, "enable_dp_attention": False,
                              "enable_multi_layer_eagle": False, "enable_two_batch_overlap": False,
                              "enable_pdmux": False, **fields})
        hook = sys.modules["sglang.srt.arg_groups.speculative_hook"]
        hook._maybe_disable_adaptive(args)
        if self.read(args, "speculative_adaptive"):
            hook._init_adaptive_speculative_params(args)
        return args

    def read(self, args: Any, name: str) -> Any:
        """A field as resolution decided it."""
        return getattr(sglang_access.resolve(self.release.args_view)(args), name) if self.newer else getattr(args, name)

    def bound(self, args: Any) -> int | None:
        """The draft-token bound that sizes KV and buffers in every state."""
        if self.newer:
            return sglang_access.resolve("sglang.srt.speculative.spec_info.SpeculativeAlgorithm")() \
                .resolve_max_speculative_num_draft_tokens(args)
        return args.max_speculative_num_draft_tokens

    def reason(self, args: Any) -> str | None:
        return sglang_access.resolve(compat.ADAPTIVE_UNSUPPORTED)(args)


@pytest.fixture
def sglang(sglang_source: SglangSource, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sglang:
    config = tmp_path / "adaptive.json"
    config.write_text(json.dumps({"1": {"candidate_steps": [0, 2]}}))
    monkeypatch.setenv(tree_switch.ENV_ENABLE, "")
    monkeypatch.delenv(tree_switch.ENV_ENABLE)
    return Sglang(sglang_source, monkeypatch, str(config))


def test_unhooked_sglang_turns_a_trees_adaptive_off(sglang: Sglang, caplog) -> None:
    # the premise: what SGLang does with the report's tree and an adaptive config, without specctl's hooks
    sglang.hook()  # not opted in: nothing registered
    with caplog.at_level(logging.WARNING):
        args = sglang.start()
    assert "(only topk=1 is supported)" in sglang.reason(args)
    assert sglang.read(args, "speculative_adaptive") is False
    assert "speculative_adaptive disabled" in caplog.text


def test_unhooked_adaptive_set_up_would_shrink_the_tree_to_steps_plus_one(sglang: Sglang) -> None:
    # the second premise, past the refusal: SGLang's own set-up rewrites the draft tokens and bounds them by
    # the candidates, so a 16-token tree at 2 steps would run as a 3-token one
    args = sglang.record(**TREE, speculative_adaptive_config=sglang.config)
    sys.modules["sglang.srt.arg_groups.speculative_hook"]._init_adaptive_speculative_params(args)
    assert sglang.read(args, "speculative_num_draft_tokens") == 3
    assert sglang.bound(args) == 3


def test_opted_in_the_tree_keeps_adaptive_and_its_sixteen_draft_tokens(sglang: Sglang, monkeypatch) -> None:
    monkeypatch.setenv(tree_switch.ENV_ENABLE, "1")
    sglang.hook()
    args = sglang.start()
    assert sglang.reason(args) is None
    assert sglang.read(args, "speculative_adaptive") is True
    assert sglang.read(args, "speculative_num_draft_tokens") == 16
    assert sglang.read(args, "speculative_eagle_topk") == 4
    assert sglang.bound(args) == 16  # KV and buffers sized for the tree in every state, the off state's too


@pytest.mark.parametrize("field", ["enable_pdmux", "enable_two_batch_overlap", "enable_multi_layer_eagle"])
def test_every_other_reason_sglang_knows_still_refuses_a_tree(sglang: Sglang, monkeypatch, field: str) -> None:
    monkeypatch.setenv(tree_switch.ENV_ENABLE, "1")
    sglang.hook()
    args = sglang.start(**{field: True})
    assert f"{field}=True is not supported" in sglang.reason(args)
    assert sglang.read(args, "speculative_adaptive") is False


def test_a_chain_starts_as_before_with_the_tree_hooks_on(sglang: Sglang, monkeypatch) -> None:
    monkeypatch.setenv(tree_switch.ENV_ENABLE, "1")
    sglang.hook()
    args = sglang.start(speculative_eagle_topk=1, speculative_num_draft_tokens=None)
    assert sglang.reason(args) is None
    assert sglang.read(args, "speculative_num_draft_tokens") == 3
    assert sglang.bound(args) == 3


# -- the start-up check ---------------------------------------------------------


def tree_args(release: Release, config: str, **change: Any) -> types.SimpleNamespace:
    return types.SimpleNamespace(**{**TREE, "speculative_adaptive_config": config, release.dp_attr: release.dp_above,
                                    "page_size": 1, **change})


def check(release: Release, args: Any, monkeypatch, steps: int = 2) -> str | None:
    monkeypatch.setenv("SPECCTL_SETTINGS", json.dumps(PolicySettings(steps=steps).as_dict()))
    return server_args_check.server_args_problem(release, args, steps)


@pytest.fixture
def reasons(sglang_source: SglangSource, monkeypatch) -> None:
    """SGLang's reasons as the hooked function gives them for a tree (none), and the args read as they are."""
    stand_in_modules(monkeypatch, {
        "sglang.srt.speculative.adaptive_spec_params": {"adaptive_unsupported_reason": lambda args: None},
        ".".join(sglang_source.release.args_view.split(".")[:-1]): {
            sglang_source.release.args_view.rsplit(".", 1)[1]: lambda args: args},
    })


def test_the_start_up_check_refuses_a_tree_unless_opted_in(sglang_source: SglangSource, sglang: Sglang, reasons,
                                                          monkeypatch) -> None:
    release = sglang_source.release
    problem = check(release, tree_args(release, sglang.config), monkeypatch)
    assert problem and problem.startswith("--speculative-eagle-topk must be 1, got 4")
    monkeypatch.setenv(tree_switch.ENV_ENABLE, "1")
    assert check(release, tree_args(release, sglang.config), monkeypatch) is None


def test_the_start_up_check_allows_only_the_launch_depth_and_off(sglang_source: SglangSource, sglang: Sglang,
                                                                 reasons, tmp_path: Path, monkeypatch) -> None:
    release = sglang_source.release
    monkeypatch.setenv(tree_switch.ENV_ENABLE, "1")
    three = tmp_path / "three.json"
    three.write_text(json.dumps({"1": {"candidate_steps": [0, 1, 2]}}))
    problem = check(release, tree_args(release, str(three)), monkeypatch)
    assert problem and "must list candidate steps 0 and 2 (--speculative-num-steps), got [0, 1, 2]" in problem
    assert "\n" not in problem


def test_the_start_up_check_asks_for_page_size_one_where_the_release_needs_it(
        sglang_source: SglangSource, sglang: Sglang, reasons, monkeypatch) -> None:
    release = sglang_source.release
    monkeypatch.setenv(tree_switch.ENV_ENABLE, "1")
    problem = check(release, tree_args(release, sglang.config, page_size=16), monkeypatch)
    if release.tree_page_one:
        assert problem and "needs --page-size 1 on SGLang 0.5.23" in problem and problem.endswith("got 16")
    else:
        assert problem is None  # 0.5.17 reserves from the launch's steps, not the live ones


def test_the_start_up_check_sees_a_bound_below_the_trees_tokens(sglang_source: SglangSource, sglang: Sglang,
                                                                reasons, monkeypatch) -> None:
    # 0.5.17: server args built without the hook (its bound then answers steps + 1) would size KV short
    release = sglang_source.release
    monkeypatch.setenv(tree_switch.ENV_ENABLE, "1")
    args = tree_args(release, sglang.config, max_speculative_num_draft_tokens=3)
    problem = check(release, args, monkeypatch)
    if release.tree_declare is None:
        assert problem and problem.startswith("SGLang sized this tree's KV for 3 draft tokens, below its 16")
    else:
        assert problem is None  # 0.5.23 refuses it itself at start-up (its own check of the bound)


def test_the_start_up_check_finds_a_tree_hook_sglang_did_not_apply(sglang_source: SglangSource, sglang: Sglang,
                                                                   monkeypatch) -> None:
    from specctl.runtime.sglang_plugin import plugin

    monkeypatch.setenv(tree_switch.ENV_ENABLE, "1")
    sglang.hook()
    specs = tree_switch.hooks_for(sglang_source.release)
    assert specs and plugin.unapplied_hooks(specs) == []
    owner, name = specs[1].target.rsplit(".", 1)  # the draft tokens' hook, as if HookRegistry had failed on it
    setattr(sglang_access.resolve(owner), name, sglang_access.resolve(specs[1].target).__wrapped__)
    assert plugin.unapplied_hooks(specs) == [specs[1].target]


def test_the_off_step_skips_the_tree_compaction_that_is_an_identity_at_one_draft_token(sglang: Sglang,
                                                                                       monkeypatch) -> None:
    # every verify of a tree server, off steps included, ends in SGLang's _finalize_accept_tree_path; at one
    # draft token a request its KV move and gathers give back what they were given (SGLang's chain skips it)
    monkeypatch.setenv(tree_switch.ENV_ENABLE, "1")
    sglang.hook()
    finalize = sglang_access.resolve("sglang.srt.speculative.eagle_worker_common._finalize_accept_tree_path")
    predict, logits = object(), types.SimpleNamespace(hidden_states="hidden")
    off = finalize("batch", [[0]] * 4, 1, predict, logits, 4, token_to_kv_pool_allocator="pool", num_draft_tokens=1)
    assert off is predict and logits.hidden_states == "hidden" and sglang.moved == []
    on = finalize("batch", [[0, 1, 2]] * 4, 3, predict, logits, 4, token_to_kv_pool_allocator="pool",
                  num_draft_tokens=16)
    assert on == ("compacted", predict) and logits.hidden_states == ("compacted", "hidden") and sglang.moved == [4]


# -- what `specctl sglang-args --topk` prints, started by SGLang's own start-up ----------------------------


def printed_launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """`specctl sglang-args` for the report's tree (a real process), its environment set here as a unit would.

    Returns the speculative fields its flags give SGLang's args, the adaptive config among them.
    """
    out = subprocess.run([sys.executable, "-m", "specctl.console.cli.main", "sglang-args", "--steps", "2",
                          "--topk", "4", "--draft-tokens", "16", "--format", "json",
                          "--config", str(tmp_path / "printed.json")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)
    for name, value in printed["env"].items():
        monkeypatch.setenv(name, value)
    args = printed["args"]
    value = {flag: args[args.index(flag) + 1] for flag in ("--speculative-eagle-topk", "--speculative-num-steps",
                                                          "--speculative-num-draft-tokens")}
    return {"speculative_eagle_topk": int(value["--speculative-eagle-topk"]),
            "speculative_num_steps": int(value["--speculative-num-steps"]),
            "speculative_num_draft_tokens": int(value["--speculative-num-draft-tokens"]),
            "speculative_adaptive": "--speculative-adaptive" in args,
            "speculative_adaptive_config": printed["adaptive_config"]}


def test_the_printed_tree_launch_keeps_adaptive_and_sixteen_tokens(sglang: Sglang, tmp_path: Path,
                                                                   monkeypatch) -> None:
    fields = printed_launch(tmp_path, monkeypatch)
    assert os.environ[tree_switch.ENV_ENABLE] == "1", "the opt-in is in the printed environment"
    sglang.hook()
    args = sglang.start(**fields)
    assert sglang.reason(args) is None
    assert sglang.read(args, "speculative_adaptive") is True
    assert sglang.read(args, "speculative_num_draft_tokens") == 16
    assert sglang.bound(args) == 16


def test_the_printed_tree_launch_passes_the_start_up_check(sglang_source: SglangSource, sglang: Sglang, reasons,
                                                           tmp_path: Path, monkeypatch) -> None:
    release = sglang_source.release
    fields = printed_launch(tmp_path, monkeypatch)  # SPECCTL_SETTINGS as printed: steps 2, no other depth
    args = tree_args(release, fields["speculative_adaptive_config"], **fields)
    assert server_args_check.server_args_problem(release, args, 2) is None
    monkeypatch.delenv(tree_switch.ENV_ENABLE)  # the same line without the opt-in: refused, the tree kept in words
    problem = server_args_check.server_args_problem(release, args, 2)
    assert problem and "specctl sglang-args --steps 2 --topk 4 --draft-tokens 16" in problem
