"""fast_off's hooks against stand-ins for the SGLang pieces they touch, without a GPU.

Why: the logic that needs no GPU (which hooks are registered, the hooks'
argument handling, the decode view of the batch and its restoration, the
DECODE capture switch of the graph runner, the fallback on a failed build,
the per-step draft warmth from ``warm_below``, the WAR-barrier hand-over, the
early publish, its default and its check) is checked here; that the names and parameters
exist in each release is test_plugin_contract.py's job, and the kernels the
GPU run's.
"""

from __future__ import annotations

import enum
import functools
import os
from types import SimpleNamespace
from typing import Any

import pytest

from specctl.runtime.core.adaptive_config import write_config
from specctl.runtime.core.settings import PolicySettings
from specctl.runtime.sglang_plugin import draft_prefill, draft_warmth, early_publish, fast_off
from specctl.runtime.sglang_plugin import params as params_module
from specctl.runtime.sglang_plugin.compat import RELEASES
from specctl.runtime.sglang_plugin.params import SpecctlParams
from specctl.runtime.sglang_plugin.release_types import HookSpec, Release

from support.stand_in_modules import stand_in_modules

RELEASE = RELEASES["0.5.17"]
SPEC = SimpleNamespace(speculative_use_rejection_sampling=False)  # SGLang's get_spec() bag


class Vec(list):
    """A list that adds like a tensor (enough for seq_lens)."""

    def __add__(self, k):  # type: ignore[override]
        return Vec(x + k for x in self)

    def sum(self) -> int:
        return sum(self)

    def tolist(self) -> list[int]:
        return list(self)


class ForwardMode(enum.Enum):
    DECODE = 1
    TARGET_VERIFY = 2
    IDLE = 3
    EXTEND = 4

    def is_idle(self) -> bool:
        return self is ForwardMode.IDLE

    def is_extend(self) -> bool:
        return self is ForwardMode.EXTEND


class CaptureHiddenMode(enum.IntEnum):
    NULL = 0
    LAST = 1
    FULL = 2


class ForwardBatch(SimpleNamespace):
    """Records what the batch looked like when SGLang's init_new would have read it."""

    @classmethod
    def init_new(cls, batch, runner, *, capture_hidden_mode, return_hidden_states_before_norm):
        return cls(mode=batch.forward_mode, seq_lens=batch.seq_lens, seq_lens_cpu=batch.seq_lens_cpu,
                   seq_lens_sum=batch.seq_lens_sum, orig=batch.orig_seq_lens, spec_info=batch.spec_info,
                   input_ids=batch.input_ids, out_cache_loc=batch.out_cache_loc,
                   capture_hidden_mode=capture_hidden_mode, ready=False)

    def mark_forward_metadata_ready(self) -> None:
        self.ready = True


class DecodeCudaGraphRunner:
    """Captures in its constructor, as SGLang's does; records the capture mode."""

    def __init__(self, model_runner, *, attn_backend=None, speculative_num_steps=None,
                 speculative_num_draft_tokens=None):
        self.captured_req_width = speculative_num_draft_tokens
        self.capture_forward_mode = ForwardMode.TARGET_VERIFY
        self.capture_hidden_mode = CaptureHiddenMode.NULL
        self.capture_bs = [1, 2, 4]
        self.loaded: list[Any] = []
        self.capture()

    def capture(self) -> None:
        self.captured = (self.capture_forward_mode, self.capture_hidden_mode, self.get_spec_info(4))

    def get_spec_info(self, num_tokens: int) -> Any:
        return "verify-input"

    def can_run_graph(self, forward_batch) -> bool:
        return True

    def load_batch(self, forward_batch) -> None:
        self.loaded.append(forward_batch)


@pytest.fixture(autouse=True)
def fake_sglang(monkeypatch) -> None:
    """The SGLang modules fast_off imports lazily, as stand-ins; fresh fast_off state."""
    modules = {
        "sglang.kernels.ops.speculative.cache_locs": {"assign_extend_cache_locs_uniform_func":
            lambda **kw: ("locs", tuple(kw["start_offset"]), kw["draft_token_num"])},
        "sglang.srt.model_executor.forward_batch_info": {"ForwardMode": ForwardMode,
            "CaptureHiddenMode": CaptureHiddenMode, "ForwardBatch": ForwardBatch},
        "sglang.srt.model_executor.runner": {"DecodeCudaGraphRunner": DecodeCudaGraphRunner},
        "sglang.srt.utils.common": {"get_available_gpu_memory": lambda device, gpu: 10.0},
        "sglang.srt.runtime_context": {"get_spec": lambda: SPEC},
        "sglang.srt.speculative.eagle_info": {"EagleDraftInput": SimpleNamespace},
        "sglang.srt.speculative.eagle_utils": {"get_draft_recurrent_hidden_state_spec":
            lambda runner: (runner.hidden_size, "bf16")},
        "torch": {"zeros": lambda shape, dtype, device: ("zeros", shape, dtype, device),
                  "float32": "f32", "int64": "i64"},
    }
    stand_in_modules(monkeypatch, modules)
    monkeypatch.setattr(fast_off, "STATS", fast_off.FastOffStats())
    monkeypatch.setattr(draft_prefill, "STATS", draft_prefill.DraftPrefillStats())
    monkeypatch.setattr(fast_off, "_RUNNER_CLASS", None)
    monkeypatch.setattr(early_publish, "STATS", early_publish.EarlyPublishStats())
    monkeypatch.setattr(early_publish, "_PENDING", None)
    monkeypatch.setattr(draft_warmth, "_skip_written", None)
    monkeypatch.setattr(params_module, "_active", None)
    monkeypatch.setattr(SPEC, "speculative_use_rejection_sampling", False)
    for name in (fast_off.ENV_ENABLE, draft_warmth.SKIP_DRAFT_EXTEND_ENV, early_publish.ENV_EARLY,
                 early_publish.ENV_EARLY_CHECK):
        monkeypatch.setenv(name, "")  # recorded, so that what fast_off.install sets is undone
        monkeypatch.delenv(name)


# -- install -------------------------------------------------------------------


def installed(release: Release = RELEASE) -> list[str]:
    seen: list[str] = []
    fast_off.install(release, lambda spec, hook: seen.append(spec.handler))
    return seen


@pytest.mark.parametrize("version", sorted(RELEASES))
def test_install_registers_the_releases_hooks_and_skips_the_draft_extend(version: str) -> None:
    assert installed(RELEASES[version]) == [s.handler for s in RELEASES[version].fast_off_hooks]
    only_0517 = ["alloc_for_spec_decode"] if version == "0.5.17" else []
    assert [s.handler for s in RELEASES[version].fast_off_hooks] == [
        "build_adaptive_runtime_state", "eagle_prepare_for_verify", fast_off.STEP_HANDLER,
        "draft_extend_for_prefill", *only_0517]
    assert os.environ[draft_warmth.SKIP_DRAFT_EXTEND_ENV] == "1"


def test_install_leaves_a_skip_value_set_by_the_operator(monkeypatch) -> None:
    monkeypatch.setenv(draft_warmth.SKIP_DRAFT_EXTEND_ENV, "0")
    assert installed() == [s.handler for s in RELEASE.fast_off_hooks]
    assert os.environ[draft_warmth.SKIP_DRAFT_EXTEND_ENV] == "0"


def test_disabled_fast_off_registers_nothing(monkeypatch) -> None:
    monkeypatch.setenv(fast_off.ENV_ENABLE, "0")
    assert installed() == []
    assert fast_off.hooks_for(RELEASE) == ()
    assert not fast_off.STATS.installed


# -- verify preparation while off ----------------------------------------------


def make_batch() -> SimpleNamespace:
    return SimpleNamespace(
        forward_mode=ForwardMode.TARGET_VERIFY, seq_lens=Vec([5, 9]), seq_lens_cpu=Vec([5, 9]),
        seq_lens_sum=None, orig_seq_lens=Vec([5, 9]), spec_info="verify", req_pool_indices=[0, 1],
        input_ids=None, out_cache_loc=None, device="cpu")


@pytest.fixture
def off_target() -> SimpleNamespace:
    """A target worker whose active backend is one fast_off built, with DECODE graphs."""
    backend = SimpleNamespace(**{fast_off.MARK: True})
    graph = DecodeCudaGraphRunner(None, speculative_num_draft_tokens=1)
    return SimpleNamespace(model_runner=SimpleNamespace(attn_backend=backend, decode_cuda_graph_runner=graph))


def test_an_off_verify_becomes_a_decode_forward_over_the_same_slot(off_target) -> None:
    verify = SimpleNamespace(draft_token=[7, 8], draft_token_num=1, seq_lens_cpu=None, seq_lens_sum=None)
    pool, batch, called = SimpleNamespace(req_to_token="r2t"), make_batch(), []
    fb, can = fast_off.around_eagle_prepare_for_verify(lambda *a, **k: called.append(1), verify, pool, batch,
                                                       off_target)
    assert not called and can and fb.ready
    assert fb.mode is ForwardMode.DECODE and fb.spec_info is None
    assert list(fb.seq_lens) == [6, 10] and list(fb.seq_lens_cpu) == [6, 10] and list(fb.orig) == [6, 10]
    assert fb.out_cache_loc == ("locs", (5, 9), 1) and fb.input_ids == [7, 8]
    assert fb.capture_hidden_mode == CaptureHiddenMode.FULL
    assert off_target.model_runner.decode_cuda_graph_runner.loaded == [fb]
    assert fast_off.STATS.decode_steps == fast_off.STATS.graph_steps == 1


def test_the_batch_is_left_as_sglangs_later_steps_expect(off_target) -> None:
    verify = SimpleNamespace(draft_token=[7, 8], draft_token_num=1, seq_lens_cpu=None, seq_lens_sum=None)
    batch = make_batch()
    fast_off.around_eagle_prepare_for_verify(None, verify, SimpleNamespace(req_to_token="r2t"), batch, off_target)
    assert batch.forward_mode is ForwardMode.TARGET_VERIFY and list(batch.seq_lens) == [5, 9]
    assert batch.spec_info == "verify" and batch.seq_lens_sum is None and verify.seq_lens_sum == 14


def test_other_verifies_reach_sglang_with_the_arguments_as_given(off_target) -> None:
    verify = SimpleNamespace(draft_token=[7, 8], draft_token_num=1)
    pool, batch = SimpleNamespace(req_to_token="r2t"), make_batch()
    off_target.model_runner.attn_backend = SimpleNamespace()  # not ours: speculation is on
    out = fast_off.around_eagle_prepare_for_verify(lambda *a, **k: ("sglang", len(a), sorted(k)), verify, pool,
                                                   batch=batch, target_worker=off_target)
    assert out == ("sglang", 2, ["batch", "target_worker"])
    off_target.model_runner.attn_backend = SimpleNamespace(**{fast_off.MARK: True})
    verify.draft_token_num = 4  # a real verify
    assert fast_off.around_eagle_prepare_for_verify(lambda *a, **k: "sglang", verify, pool, batch,
                                                    off_target) == "sglang"


# -- building the steps-0 state -------------------------------------------------


class Worker:
    """EAGLEWorkerV2's side of the state build: the capture override and the target runner."""

    def __init__(self) -> None:
        self.device, self.gpu_id = "cuda", 0
        self.overrides: list[tuple[str, tuple[Any, ...]]] = []
        runner = SimpleNamespace(init_new_workspace=False)

        def get_backend(init_new_workspace: bool) -> SimpleNamespace:
            runner.init_new_workspace = True
            return SimpleNamespace(kind="fresh")

        runner._get_attention_backend = get_backend
        self._target_worker = SimpleNamespace(model_runner=runner)

    def _override_worker_state(self, steps: int, tokens: int, cuda_graph_bs: list[int] | None = None):
        log, args = self.overrides, (steps, tokens, cuda_graph_bs)

        class Override:
            def __enter__(self) -> None:
                log.append(("enter", args))

            def __exit__(self, *exc: object) -> None:
                log.append(("exit", args))

        return Override()


def sglang_state() -> SimpleNamespace:
    return SimpleNamespace(target_attn_backend="verify-backend", target_graph_runner="verify-graphs")


def test_only_the_steps_0_state_is_changed() -> None:
    state = sglang_state()
    out = fast_off.around_build_adaptive_runtime_state(lambda w, *a, **k: state, Worker(), speculative_num_steps=3,
                                                       speculative_num_draft_tokens=4, cuda_graph_bs=[1, 2])
    assert out.target_attn_backend == "verify-backend"


def test_the_steps_0_state_gets_a_decode_backend_and_decode_graphs() -> None:
    worker = Worker()
    out = fast_off.around_build_adaptive_runtime_state(lambda w, *a, **k: sglang_state(), worker,
                                                       speculative_num_steps=0, speculative_num_draft_tokens=1,
                                                       cuda_graph_bs=[1, 2])
    assert getattr(out.target_attn_backend, fast_off.MARK) is True
    assert out.target_graph_runner.captured == (ForwardMode.DECODE, CaptureHiddenMode.FULL, None)
    assert worker.overrides == [("enter", (0, 1, [1, 2])), ("exit", (0, 1, [1, 2]))]
    assert worker._target_worker.model_runner.init_new_workspace is False
    assert fast_off.STATS.built and fast_off.STATS.graph_bs == 3


def test_once_installed_and_built_the_off_state_is_reported_fast() -> None:
    fast_off.install(RELEASE, lambda spec, hook: None)
    fast_off.around_build_adaptive_runtime_state(lambda w, *a, **k: sglang_state(), Worker(), 0, 1, [1, 2])
    assert fast_off.summary() == {"fast": True, "why_not": None, "early_publish": {
        "setting": "auto", "mode": "off", "check": False, "decode": 0, "extend": 0, "swallowed": 0,
        "mismatches": 0}}  # auto decides at the first step


def test_before_the_decode_state_is_built_the_off_state_is_reported_slow() -> None:
    fast_off.install(RELEASE, lambda spec, hook: None)
    assert fast_off.summary() == {
        "fast": False, "why_not": "no DECODE state was built: SGLang's own steps-0 state runs while off"}


def test_with_fast_off_disabled_the_off_state_is_reported_slow(monkeypatch) -> None:
    monkeypatch.setenv(fast_off.ENV_ENABLE, "0")
    fast_off.install(RELEASE, lambda spec, hook: None)
    assert fast_off.summary() == {
        "fast": False, "why_not": "SPECCTL_FAST_OFF=0: SGLang's own steps-0 state runs while off"}


def test_a_failed_build_keeps_sglangs_steps_0_state() -> None:
    worker = Worker()

    def broken(**kwargs: Any) -> None:
        raise RuntimeError("no memory")

    worker._target_worker.model_runner._get_attention_backend = broken
    out = fast_off.around_build_adaptive_runtime_state(lambda w, *a, **k: sglang_state(), worker, 0, 1, None)
    assert out.target_attn_backend == "verify-backend"
    assert "RuntimeError" in fast_off.STATS.build_error
    fast_off.STATS.enabled = True  # as install leaves it
    assert fast_off.summary()["fast"] is False
    assert "building the DECODE state failed (RuntimeError: no memory)" in fast_off.summary()["why_not"]


# -- the WAR-barrier hand-over -------------------------------------------------


@pytest.mark.parametrize("version", sorted(RELEASES))
def test_the_read_done_event_moves_after_off_steps_only(version: str) -> None:
    names = RELEASES[version].read_done
    step = fast_off.handlers(RELEASES[version])[fast_off.STEP_HANDLER]
    target = SimpleNamespace(**{names.event_attr: "event"})
    reader = SimpleNamespace(**{names.event_attr: None})
    worker = SimpleNamespace(_target_worker=SimpleNamespace(model_runner=target), **{names.runner_property: reader})
    assert step(lambda w, batch: "on", worker, "batch") == "on"
    assert getattr(reader, names.event_attr) is None

    def off_step(w: Any, batch: Any) -> str:
        fast_off._count(1, True)
        return "off"

    assert step(off_step, worker, "batch") == "off"
    assert (getattr(reader, names.event_attr), getattr(target, names.event_attr)) == ("event", None)


@pytest.mark.parametrize("version", sorted(RELEASES))
def test_an_off_step_outside_the_graphs_drops_the_stale_event_instead_of_handing_it_over(version: str) -> None:
    """A batch above the captured sizes runs eagerly and records no event; the one the target holds is a
    verify graph's from an earlier step: handed over, the scheduler would write buffers still being read."""
    names = RELEASES[version].read_done
    step = fast_off.handlers(RELEASES[version])[fast_off.STEP_HANDLER]
    target = SimpleNamespace(**{names.event_attr: "an earlier verify's event"})
    reader = SimpleNamespace(**{names.event_attr: None})
    worker = SimpleNamespace(_target_worker=SimpleNamespace(model_runner=target), **{names.runner_property: reader})

    def eager_off_step(w: Any, batch: Any) -> str:
        fast_off._count(300, False)
        return "off"

    assert step(eager_off_step, worker, "batch") == "off"
    assert getattr(reader, names.event_attr) is None, "no event: the scheduler waits for the whole forward"
    assert getattr(target, names.event_attr) is None, "and the stale one is gone for good"


def test_no_hand_over_when_the_target_itself_is_the_barriers_runner() -> None:
    names = RELEASE.read_done
    target = SimpleNamespace(**{names.event_attr: "event"})
    worker = SimpleNamespace(_target_worker=SimpleNamespace(model_runner=target), **{names.runner_property: target})
    fast_off._hand_over_read_done(worker, names)
    assert getattr(target, names.event_attr) == "event"


# -- the draft's warmth while off, per step -------------------------------------


def activate(tmp_path, warm_below: int) -> SpecctlParams:
    """An active params object, as SGLang's worker builds one, with ``warm_below`` applied."""
    config = str(write_config(tmp_path / "adaptive.json", 3))
    return SpecctlParams(3, config, settings=PolicySettings(steps=3, warm_below=warm_below))


@pytest.fixture
def stepper() -> tuple[Any, SimpleNamespace, SimpleNamespace, list[str]]:
    """The step hook, a worker whose target holds a read-done event, and what SGLang saw of the env."""
    names = RELEASE.read_done
    step = fast_off.handlers(RELEASE)[fast_off.STEP_HANDLER]
    target = SimpleNamespace(**{names.event_attr: "event"})
    reader = SimpleNamespace(**{names.event_attr: None})
    worker = SimpleNamespace(_target_worker=SimpleNamespace(model_runner=target), **{names.runner_property: reader})
    seen: list[str] = []

    def off_step(w: Any, batch: Any) -> str:
        seen.append(os.environ[draft_warmth.SKIP_DRAFT_EXTEND_ENV])  # what SGLang's envs.get() reads
        fast_off._count(1, True)
        return "off"

    return functools.partial(step, off_step, worker), target, reader, seen


def batch_of(n: int) -> SimpleNamespace:
    return SimpleNamespace(forward_mode=ForwardMode.TARGET_VERIFY, seq_lens=Vec(range(n)))


def event_moved(target: SimpleNamespace, reader: SimpleNamespace) -> bool:
    attr = RELEASE.read_done.event_attr
    return (getattr(reader, attr), getattr(target, attr)) == ("event", None)


def test_a_batch_below_warm_below_keeps_the_draft_warm_and_its_event(stepper, tmp_path) -> None:
    step, target, reader, seen = stepper
    activate(tmp_path, warm_below=16)
    assert step(batch_of(15)) == "off"
    assert seen == ["0"]
    assert not event_moved(target, reader), "the draft extend records the event itself"
    assert fast_off.STATS.warm_steps == 1


def test_a_batch_at_warm_below_skips_the_draft_and_hands_the_event_over(stepper, tmp_path) -> None:
    step, target, reader, seen = stepper
    activate(tmp_path, warm_below=16)
    assert step(batch_of(16)) == "off"
    assert seen == ["1"]
    assert event_moved(target, reader)
    assert fast_off.STATS.warm_steps == 0


def test_the_env_is_written_only_when_the_warmth_changes(stepper, tmp_path, monkeypatch) -> None:
    step, _, _, seen = stepper
    params = activate(tmp_path, warm_below=8)
    step(batch_of(4))
    monkeypatch.setenv(draft_warmth.SKIP_DRAFT_EXTEND_ENV, "untouched")  # a rewrite would replace it
    step(batch_of(5))
    step(batch_of(30))
    monkeypatch.setenv(draft_warmth.SKIP_DRAFT_EXTEND_ENV, "untouched")
    step(batch_of(40))
    step(batch=batch_of(2))  # SGLang may pass the batch by name
    assert seen == ["0", "untouched", "1", "untouched", "0"]
    params.apply_settings(params.policy.settings.with_changes({"warm_below": 0}))  # the operator: never
    step(batch_of(2))
    assert seen[-1] == "1"
    assert fast_off.STATS.warm_steps == 3


@pytest.mark.parametrize("batch", [None, "batch", SimpleNamespace(forward_mode=ForwardMode.IDLE, seq_lens=Vec())])
def test_a_step_without_requests_to_count_is_cold(stepper, tmp_path, batch: Any) -> None:
    step, target, reader, seen = stepper
    activate(tmp_path, warm_below=16)
    assert step(batch) == "off"
    assert seen == ["1"] and event_moved(target, reader)


def test_without_active_params_the_draft_is_cold(stepper) -> None:
    step, target, reader, seen = stepper
    assert params_module.active() is None
    step(batch_of(1))
    assert seen == ["1"] and event_moved(target, reader)
    assert fast_off.STATS.warm_steps == 0


# -- the draft's prefill while off ----------------------------------------------


class Tokens(list):
    """next_token_ids: a shape and a device, as the stub reads them."""

    shape = property(lambda self: (len(self),))
    device = "cuda:0"


@pytest.fixture(params=sorted(RELEASES))
def prefill(request) -> tuple[Any, SimpleNamespace, list[Any]]:
    """The prefill hook over SGLang's own draft prefill, a draft worker in the off state, and the calls.

    Called as the release's SGLang calls it: 0.5.23 adds the target's KV location plan by keyword.
    """
    release = RELEASES[request.param]
    hook = fast_off.handlers(release)["draft_extend_for_prefill"]
    worker = SimpleNamespace(speculative_num_steps=0, topk=1, draft_runner=SimpleNamespace(hidden_size=4096))
    calls: list[Any] = []

    def sglang_prefill(w: Any, batch: Any, hidden: Any, next_ids: Any, mm: Any = None, **kw: Any) -> str:
        calls.append(("draft prefill", kw))
        return "drafted"

    extra = {"kv_loc_plan": "plan"} if "kv_loc_plan" in prefill_spec(release).params else {}
    fast_off.STATS.built = True
    return functools.partial(hook, sglang_prefill, worker, **extra), worker, calls


def prefill_spec(release: Release) -> HookSpec:
    return next(s for s in release.fast_off_hooks if s.handler == "draft_extend_for_prefill")


def run_prefill(hook: Any, n: int = 3) -> Any:
    batch = SimpleNamespace(forward_mode=ForwardMode.DECODE)  # any non-idle mode
    return hook(batch, "hidden", Tokens(range(100, 100 + n)), None)


def test_0523_passes_its_kv_location_plan_by_keyword() -> None:
    assert prefill_spec(RELEASES["0.5.23"]).params[-1] == "kv_loc_plan"
    assert "kv_loc_plan" not in prefill_spec(RELEASES["0.5.17"]).params


def off_at(tmp_path, running: int, warm_below: int = 0) -> SpecctlParams:
    """Params forced off whose last decode batch had ``running`` requests."""
    config = str(write_config(tmp_path / "adaptive.json", 3))
    params = SpecctlParams(3, config, settings=PolicySettings(steps=3, mode="off", warm_below=warm_below))
    assert params.get_steps_for_batch(running) == 0
    return params


def test_a_prefill_while_off_and_cold_skips_the_draft_and_stubs_its_output(prefill, tmp_path) -> None:
    hook, _, calls = prefill
    off_at(tmp_path, running=200)
    out = run_prefill(hook, n=3)
    assert calls == []
    assert out.bonus_tokens == [100, 101, 102]
    assert out.topk_p == ("zeros", (3, 1), "f32", "cuda:0")
    assert out.topk_index == ("zeros", (3, 1), "i64", "cuda:0")
    assert out.hidden_states == ("zeros", (3, 4096), "bf16", "cuda:0")
    assert (out.num_tokens_per_req, out.num_tokens_for_logprob_per_req) == (1, 1)
    assert draft_prefill.STATS.skipped == 1


def test_a_prefill_while_off_below_warm_below_runs_the_draft(prefill, tmp_path) -> None:
    hook, _, calls = prefill
    off_at(tmp_path, running=10, warm_below=16)
    assert run_prefill(hook) == "drafted" and [c[0] for c in calls] == ["draft prefill"]
    # SGLang's prefill gets what SGLang passed: 0.5.23's KV location plan included.
    assert calls[0][1] == hook.keywords
    off_at(tmp_path, running=16, warm_below=16)
    assert run_prefill(hook) != "drafted"


def test_a_prefill_while_on_runs_the_draft(prefill, tmp_path) -> None:
    hook, worker, calls = prefill
    config = str(write_config(tmp_path / "adaptive.json", 3))
    params = SpecctlParams(3, config, settings=PolicySettings(steps=3, mode="on"))
    worker.speculative_num_steps = params.get_steps_for_batch(200)
    assert run_prefill(hook) == "drafted"


@pytest.mark.parametrize("why", ["not built", "rejection sampling", "dsa seed", "idle", "no params"])
def test_the_draft_prefill_runs_wherever_the_stub_may_not_stand_in(prefill, tmp_path, why: str) -> None:
    hook, worker, calls = prefill
    if why != "no params":
        off_at(tmp_path, running=200)
    if why == "not built":
        fast_off.STATS.built = False
    elif why == "rejection sampling":
        SPEC.speculative_use_rejection_sampling = True
    elif why == "dsa seed":
        worker.seed_dsa_topk_from_draft_extend = True
    if why == "idle":
        assert hook(SimpleNamespace(forward_mode=ForwardMode.IDLE), "h", Tokens(), None) == "drafted"
    else:
        assert run_prefill(hook) == "drafted"
    assert draft_prefill.STATS.skipped == 0


# -- early publish ---------------------------------------------------------------


class FutureMap:
    """SGLang's FutureMap.publish, reduced to what the scheduler can observe: when, and which lengths.

    ``needs_cpu_seq_lens``: the scheduler's start-up decision, True with FlashInfer (it then
    waits on the host for each publish), False with Triton and FA3.
    """

    def __init__(self, trace: list[Any], needs_cpu_seq_lens: bool = True) -> None:
        self.trace = trace
        self.needs_cpu_seq_lens = needs_cpu_seq_lens

    def publish(self, future_indices: Any, new_seq_lens: Any, confidence: Any = None) -> None:
        self.trace.append(("publish", list(new_seq_lens)))


class SpecWorker:
    """EAGLEWorkerV2.forward_batch_generation's order of events, with the hooked prepare inside.

    A prefill runs the target, publishes ``batch.seq_lens``, runs the draft's
    prefill. A decode step prepares the verify through the (hooked)
    eagle_prepare_for_verify, replays, publishes seq_lens + accept_lens, runs
    the draft extend: as 0.5.17's and 0.5.23's code do.
    """

    def __init__(self, trace: list[Any], off: bool, accept_lens: list[int] | None = None) -> None:
        self.trace = trace
        backend = SimpleNamespace(**{fast_off.MARK: True}) if off else SimpleNamespace()
        self.graph = DecodeCudaGraphRunner(None, speculative_num_draft_tokens=1)
        self._target_worker = SimpleNamespace(model_runner=SimpleNamespace(
            attn_backend=backend, decode_cuda_graph_runner=self.graph))
        self.plan_stream = None  # SGLANG_ENABLE_OVERLAP_PLAN_STREAM unset
        self.accept_lens = Vec(accept_lens or [1, 1])

    def forward_batch_generation(self, batch: Any, on_publish: Any = None, grammar_barrier: Any = None) -> str:
        if batch.forward_mode.is_extend() or batch.is_extend_in_batch:
            self.trace.append("target prefill")
            if on_publish is not None:
                on_publish(batch.seq_lens)
            self.trace.append("draft prefill")
            return "prefill"
        tokens = 1 if fast_off.MARK in vars(self._target_worker.model_runner.attn_backend) else 4
        verify = SimpleNamespace(draft_token=[7, 8], draft_token_num=tokens, seq_lens_cpu=None, seq_lens_sum=None)

        def sglang_prepare(*args: Any, **kwargs: Any) -> tuple[str, bool]:
            self.trace.append("verify plan")
            return "verify-batch", True

        fast_off.around_eagle_prepare_for_verify(sglang_prepare, verify, SimpleNamespace(req_to_token="r2t"),
                                                 batch, self._target_worker)
        self.trace.append("replay")
        new_seq_lens = [s + a for s, a in zip(batch.seq_lens, self.accept_lens)]
        if on_publish is not None:
            on_publish(Vec(new_seq_lens))
        self.trace.append("draft extend")
        return "decode"


def run_step(monkeypatch, env: dict[str, str], batch: Any, worker: SpecWorker, version: str = "0.5.17",
             host_waits: bool = True, on_publish: Any = None) -> list[Any]:
    """Install under ``env`` and run one step as the scheduler does: on_publish by name."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    release = RELEASES[version]
    fast_off.install(release, lambda spec, hook: None)
    step = fast_off.handlers(release)[fast_off.STEP_HANDLER]
    if on_publish is None:
        on_publish = functools.partial(FutureMap(worker.trace, host_waits).publish, [0, 1])
    step(SpecWorker.forward_batch_generation, worker, batch, on_publish=on_publish, grammar_barrier=None)
    return worker.trace


def decode_batch() -> SimpleNamespace:
    return SimpleNamespace(**vars(make_batch()), is_extend_in_batch=False)


def prefill_batch() -> SimpleNamespace:
    return SimpleNamespace(**{**vars(make_batch()), "forward_mode": ForwardMode.EXTEND}, is_extend_in_batch=False)


EARLY = {early_publish.ENV_EARLY: "1"}


@pytest.mark.parametrize("version", sorted(RELEASES))
def test_early_publish_an_off_decode_step_publishes_seq_lens_plus_1_once_before_the_replay(monkeypatch,
                                                                                          version: str) -> None:
    trace = run_step(monkeypatch, EARLY, decode_batch(), SpecWorker([], off=True), version)
    assert trace == [("publish", [6, 10]), "replay", "draft extend"]
    assert (early_publish.STATS.decode, early_publish.STATS.swallowed) == (1, 1)
    assert early_publish._PENDING is None  # nothing left armed for the next step


def test_early_publish_a_prefill_while_off_publishes_its_seq_lens_once_before_the_target(monkeypatch) -> None:
    trace = run_step(monkeypatch, EARLY, prefill_batch(), SpecWorker([], off=True))
    assert trace == [("publish", [5, 9]), "target prefill", "draft prefill"]
    assert (early_publish.STATS.extend, early_publish.STATS.swallowed) == (1, 1)


@pytest.mark.parametrize("batch", [decode_batch, prefill_batch])
def test_early_publish_leaves_a_speculating_step_as_sglang_runs_it(monkeypatch, batch: Any) -> None:
    trace = run_step(monkeypatch, EARLY, batch(), SpecWorker([], off=False, accept_lens=[3, 2]))
    expected = (["verify plan", "replay", ("publish", [8, 11]), "draft extend"] if batch is decode_batch
                else ["target prefill", ("publish", [5, 9]), "draft prefill"])
    assert trace == expected
    assert early_publish.STATS.decode == early_publish.STATS.extend == early_publish.STATS.swallowed == 0


@pytest.mark.parametrize("value", ["0", "off", "no"])
def test_switched_off_sglang_publishes_after_the_forward(monkeypatch, value: str) -> None:
    env = {early_publish.ENV_EARLY: value, early_publish.ENV_EARLY_CHECK: "1"}
    assert run_step(monkeypatch, env, decode_batch(), SpecWorker([], off=True)) == [
        "replay", ("publish", [6, 10]), "draft extend"]
    assert early_publish.STATS.mode == "off" and not early_publish.STATS.check
    assert run_step(monkeypatch, env, prefill_batch(), SpecWorker([], off=True)) == [
        "target prefill", ("publish", [5, 9]), "draft prefill"]


@pytest.mark.parametrize("env", [{}, {early_publish.ENV_EARLY: "auto"}, {early_publish.ENV_EARLY: " AUTO "}])
def test_by_default_it_runs_where_the_scheduler_waits_on_the_host(monkeypatch, env: dict[str, str]) -> None:
    # FlashInfer: the scheduler's future map needs host lengths, so the off step publishes first.
    assert run_step(monkeypatch, env, decode_batch(), SpecWorker([], off=True), host_waits=True) == [
        ("publish", [6, 10]), "replay", "draft extend"]
    assert early_publish.STATS.report()["mode"] == "decode+extend"
    assert early_publish.STATS.report()["setting"] == "auto"


def test_by_default_it_leaves_a_scheduler_that_does_not_wait_alone(monkeypatch, caplog) -> None:
    # Triton, FA3: nothing to gain, so SGLang's order stays, prefills too.
    caplog.set_level("INFO", logger=early_publish.logger.name)
    assert run_step(monkeypatch, {}, decode_batch(), SpecWorker([], off=True), host_waits=False) == [
        "replay", ("publish", [6, 10]), "draft extend"]
    assert run_step(monkeypatch, {}, prefill_batch(), SpecWorker([], off=True), host_waits=False) == [
        "target prefill", ("publish", [5, 9]), "draft prefill"]
    assert (early_publish.STATS.mode, early_publish.STATS.decode, early_publish.STATS.extend) == ("off", 0, 0)
    assert "early publish not needed (auto)" in caplog.text


def test_by_default_it_stays_off_where_it_cannot_tell_and_says_so(monkeypatch, caplog) -> None:
    worker = SpecWorker([], off=True)
    bare = functools.partial(lambda indices, lengths: worker.trace.append(("publish", list(lengths))), [0, 1])
    assert run_step(monkeypatch, {}, decode_batch(), worker, on_publish=bare) == [
        "replay", ("publish", [6, 10]), "draft extend"]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("cannot tell" in w and "SPECCTL_EARLY_PUBLISH=1 forces it" in w for w in warnings)


def test_forced_on_it_runs_even_where_the_scheduler_does_not_wait(monkeypatch) -> None:
    trace = run_step(monkeypatch, EARLY, decode_batch(), SpecWorker([], off=True), host_waits=False)
    assert trace[0] == ("publish", [6, 10])


def test_decode_only_leaves_the_prefill_publish_to_sglang(monkeypatch) -> None:
    env = {early_publish.ENV_EARLY: "decode"}
    assert run_step(monkeypatch, env, decode_batch(), SpecWorker([], off=True))[0] == ("publish", [6, 10])
    assert run_step(monkeypatch, env, prefill_batch(), SpecWorker([], off=True)) == [
        "target prefill", ("publish", [5, 9]), "draft prefill"]


def test_no_early_publish_with_sglangs_plan_stream(monkeypatch) -> None:
    worker = SpecWorker([], off=True)
    worker.plan_stream = "a stream"  # the prepare would run there, not on the forward stream
    assert run_step(monkeypatch, EARLY, decode_batch(), worker) == ["replay", ("publish", [6, 10]), "draft extend"]


def test_no_early_publish_for_an_off_step_outside_the_graphs(monkeypatch) -> None:
    worker = SpecWorker([], off=True)
    worker.graph.can_run_graph = lambda forward_batch: False  # planned inside the forward, after a publish
    assert run_step(monkeypatch, EARLY, decode_batch(), worker) == ["replay", ("publish", [6, 10]), "draft extend"]
    assert early_publish.STATS.decode == 0


def test_the_check_passes_quietly_when_sglang_agrees(monkeypatch, caplog) -> None:
    env = {**EARLY, early_publish.ENV_EARLY_CHECK: "1"}
    assert run_step(monkeypatch, env, decode_batch(), SpecWorker([], off=True))[0] == ("publish", [6, 10])
    assert (early_publish.STATS.mismatches, early_publish.STATS.swallowed) == (0, 1)
    assert run_step(monkeypatch, env, prefill_batch(), SpecWorker([], off=True))[0] == ("publish", [5, 9])
    assert (early_publish.STATS.mismatches, early_publish.STATS.swallowed) == (0, 1)  # counted since install
    assert "MISMATCH" not in caplog.text


def test_the_check_logs_a_mismatch_loudly_and_publishes_sglangs_value(monkeypatch, caplog) -> None:
    env = {**EARLY, early_publish.ENV_EARLY_CHECK: "1"}
    trace = run_step(monkeypatch, env, decode_batch(), SpecWorker([], off=True, accept_lens=[1, 2]))
    assert trace == [("publish", [6, 10]), "replay", ("publish", [6, 11]), "draft extend"]
    assert early_publish.STATS.mismatches == 1 and early_publish.STATS.swallowed == 0
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "EARLY PUBLISH MISMATCH #1" in errors[0].getMessage()
    assert "[6, 10]" in errors[0].getMessage() and "[6, 11]" in errors[0].getMessage()


def test_without_the_check_a_wrong_early_value_stays_unseen(monkeypatch) -> None:
    # Why the check exists: the swallowed late call is SGLang's only other say.
    trace = run_step(monkeypatch, EARLY, decode_batch(), SpecWorker([], off=True, accept_lens=[1, 2]))
    assert [t for t in trace if isinstance(t, tuple)] == [("publish", [6, 10])]


def test_the_server_log_counts_the_early_publishes(monkeypatch, caplog) -> None:
    caplog.set_level("INFO", logger=early_publish.logger.name)
    run_step(monkeypatch, EARLY, decode_batch(), SpecWorker([], off=True))  # the first off step logs
    assert "early publish on (SPECCTL_EARLY_PUBLISH=1: decode+extend)" in caplog.text
    assert ("1 off decode steps and 0 prefills published early, 1 of SGLang's publishes swallowed, "
            "0 mismatches") in caplog.text
    caplog.clear()
    run_step(monkeypatch, {early_publish.ENV_EARLY: "0"}, decode_batch(), SpecWorker([], off=True))
    assert "early publish" not in caplog.text
