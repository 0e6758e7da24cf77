#!/usr/bin/env python3
"""CPU check of fast_off.py's plumbing against stand-ins for the SGLang pieces it touches.

Why: device time is scarce, so the logic that needs no GPU (argument
handling of the hooks, the decode view of the batch and its restoration, the
DECODE capture switch of the graph runner, the fallback on a failed build)
is exercised here first. It proves nothing about kernels or SGLang's real
classes; the device run does that. Run: python3 bench/gpu/check_fast_off_cpu.py
"""
from __future__ import annotations

import enum
import os
import sys
import types
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]


class Vec(list):
    """A list that adds like a tensor (enough for seq_lens)."""

    def __add__(self, k):  # type: ignore[override]
        return Vec(x + k for x in self)

    def sum(self):
        return sum(self)


class ForwardMode(enum.Enum):
    DECODE = 1
    TARGET_VERIFY = 2
    IDLE = 3

    def is_idle(self) -> bool:
        return self is ForwardMode.IDLE


class CaptureHiddenMode(enum.IntEnum):
    NULL = 0
    LAST = 1
    FULL = 2


class ForwardBatch(SimpleNamespace):
    @classmethod
    def init_new(cls, batch, runner, *, capture_hidden_mode, return_hidden_states_before_norm):
        return cls(mode=batch.forward_mode, seq_lens=batch.seq_lens, seq_lens_cpu=batch.seq_lens_cpu,
                   seq_lens_sum=batch.seq_lens_sum, orig=batch.orig_seq_lens, spec_info=batch.spec_info,
                   input_ids=batch.input_ids, out_cache_loc=batch.out_cache_loc,
                   capture_hidden_mode=capture_hidden_mode, ready=False)

    def mark_forward_metadata_ready(self):
        self.ready = True


class DecodeCudaGraphRunner:
    def __init__(self, model_runner, *, attn_backend=None, speculative_num_steps=None,
                 speculative_num_draft_tokens=None):
        self.captured_req_width = speculative_num_draft_tokens
        self.capture_forward_mode = ForwardMode.TARGET_VERIFY
        self.capture_hidden_mode = CaptureHiddenMode.NULL
        self.capture_bs = [1, 2, 4]
        self.loaded = []
        self.capture()

    def capture(self):
        self.captured = (self.capture_forward_mode, self.capture_hidden_mode, self.get_spec_info(4))

    def get_spec_info(self, num_tokens):
        return "verify-input"

    def can_run_graph(self, fb):
        return True

    def load_batch(self, fb):
        self.loaded.append(fb)


def install_fakes() -> None:
    def mod(name: str, **attrs) -> None:
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        sys.modules[name] = m

    for pkg in ("sglang", "sglang.kernels", "sglang.kernels.ops", "sglang.kernels.ops.speculative",
                "sglang.srt", "sglang.srt.model_executor", "sglang.srt.utils"):
        mod(pkg)
    mod("sglang.kernels.ops.speculative.cache_locs",
        assign_extend_cache_locs_uniform_func=lambda **kw: ("locs", tuple(kw["start_offset"]), kw["draft_token_num"]))
    mod("sglang.srt.model_executor.forward_batch_info", ForwardMode=ForwardMode,
        CaptureHiddenMode=CaptureHiddenMode, ForwardBatch=ForwardBatch)
    mod("sglang.srt.model_executor.runner", DecodeCudaGraphRunner=DecodeCudaGraphRunner)
    mod("sglang.srt.utils.common", get_available_gpu_memory=lambda device, gpu: 10.0)


def load_fast_off():
    sys.path.insert(0, str(ROOT))
    from runtime.sglang_plugin import fast_off  # noqa: E402
    return fast_off


def make_batch():
    return SimpleNamespace(
        forward_mode=ForwardMode.TARGET_VERIFY, seq_lens=Vec([5, 9]), seq_lens_cpu=Vec([5, 9]),
        seq_lens_sum=None, orig_seq_lens=Vec([5, 9]), spec_info="verify", req_pool_indices=[0, 1],
        input_ids=None, out_cache_loc=None, device="cpu")


def check_prepare(fo) -> None:
    backend = SimpleNamespace(**{fo.MARK: True})
    graph = DecodeCudaGraphRunner(None, speculative_num_draft_tokens=1)
    runner = SimpleNamespace(attn_backend=backend, decode_cuda_graph_runner=graph)
    worker = SimpleNamespace(model_runner=runner)
    verify = SimpleNamespace(draft_token=[7, 8], draft_token_num=1, seq_lens_cpu=None, seq_lens_sum=None)
    pool = SimpleNamespace(req_to_token="r2t")
    batch = make_batch()
    called = []
    fb, can = fo.around_eagle_prepare_for_verify(lambda *a, **k: called.append(1), verify, pool, batch, worker)
    assert not called and can and fb.ready, (called, can, fb)
    assert fb.mode is ForwardMode.DECODE and fb.spec_info is None
    assert list(fb.seq_lens) == [6, 10] and list(fb.seq_lens_cpu) == [6, 10] and list(fb.orig) == [6, 10]
    assert fb.out_cache_loc == ("locs", (5, 9), 1) and fb.input_ids == [7, 8]
    assert fb.capture_hidden_mode == CaptureHiddenMode.FULL
    assert batch.forward_mode is ForwardMode.TARGET_VERIFY and list(batch.seq_lens) == [5, 9]
    assert batch.spec_info == "verify" and batch.seq_lens_sum is None and verify.seq_lens_sum == 14
    assert graph.loaded == [fb]
    # not ours: the original runs, with the arguments as given
    runner.attn_backend = SimpleNamespace()
    out = fo.around_eagle_prepare_for_verify(lambda *a, **k: ("orig", len(a), sorted(k)), verify, pool,
                                             batch=batch, target_worker=worker)
    assert out == ("orig", 2, ["batch", "target_worker"]), out
    runner.attn_backend = backend
    verify.draft_token_num = 4
    assert fo.around_eagle_prepare_for_verify(lambda *a, **k: "orig", verify, pool, batch, worker) == "orig"
    print("[cpu-check] prepare: DECODE view, slot, restoration, pass-through: ok")


class FakeWorker:
    def __init__(self):
        self.device, self.gpu_id = "cuda", 0
        self.overrides = []
        runner = SimpleNamespace(init_new_workspace=False)

        def get_backend(init_new_workspace):
            runner.init_new_workspace = True
            return SimpleNamespace(kind="fresh")

        runner._get_attention_backend = get_backend
        self._target_worker = SimpleNamespace(model_runner=runner)

    class _Ctx:
        def __init__(self, log, args):
            self.log, self.args = log, args

        def __enter__(self):
            self.log.append(("enter", self.args))

        def __exit__(self, *exc):
            self.log.append(("exit", self.args))

    def _override_worker_state(self, steps, tokens, cuda_graph_bs=None):
        return self._Ctx(self.overrides, (steps, tokens, cuda_graph_bs))


def check_build(fo) -> None:
    worker = FakeWorker()
    state = SimpleNamespace(target_attn_backend="verify-backend", target_graph_runner="verify-graphs")
    out = fo.around_build_adaptive_runtime_state(lambda w, *a, **k: state, worker, speculative_num_steps=3,
                                                 speculative_num_draft_tokens=4, cuda_graph_bs=[1, 2])
    assert out.target_attn_backend == "verify-backend", "steps 3 must be left alone"
    out = fo.around_build_adaptive_runtime_state(lambda w, *a, **k: state, worker, speculative_num_steps=0,
                                                 speculative_num_draft_tokens=1, cuda_graph_bs=[1, 2])
    assert getattr(out.target_attn_backend, fo.MARK) is True
    graph = out.target_graph_runner
    assert graph.captured == (ForwardMode.DECODE, CaptureHiddenMode.FULL, None), graph.captured
    assert worker.overrides == [("enter", (0, 1, [1, 2])), ("exit", (0, 1, [1, 2]))]
    assert worker._target_worker.model_runner.init_new_workspace is False
    assert fo.STATS.built and fo.STATS.graph_bs == 3
    # a failing build leaves SGLang's state as it was
    state2 = SimpleNamespace(target_attn_backend="verify-backend", target_graph_runner="verify-graphs")
    bad = FakeWorker()
    bad._target_worker.model_runner._get_attention_backend = lambda **k: (_ for _ in ()).throw(RuntimeError("x"))
    out = fo.around_build_adaptive_runtime_state(lambda w, *a, **k: state2, bad, 0, 1, None)
    assert out.target_attn_backend == "verify-backend" and "RuntimeError" in fo.STATS.build_error
    print("[cpu-check] build: steps-0 state gets a DECODE backend and graphs; failure falls back: ok")


def check_install(fo) -> None:
    seen = []
    os.environ.pop(fo.SKIP_DRAFT_EXTEND_ENV, None)
    os.environ[fo.ENV_ENABLE] = "1"
    os.environ.pop(fo.ENV_WARM, None)
    assert fo.install(lambda target, hook: seen.append(target))
    assert seen == [fo.TARGET_BUILD, fo.TARGET_PREPARE, fo.TARGET_STEP]
    assert os.environ[fo.SKIP_DRAFT_EXTEND_ENV] == "1"
    os.environ[fo.ENV_ENABLE] = "0"
    assert not fo.install(lambda target, hook: seen.append(target)) and len(seen) == 3
    os.environ.pop(fo.ENV_ENABLE)
    print("[cpu-check] install: three AROUND targets, draft extend skipped by default, off switch: ok")


def check_step(fo) -> None:
    target = SimpleNamespace(war_fastpath_read_done_event="ev")
    draft = SimpleNamespace(war_fastpath_read_done_event=None)
    worker = SimpleNamespace(_target_worker=SimpleNamespace(model_runner=target), war_fastpath_runner=draft)

    def off_step(w, batch):
        fo._count(1, True)
        return "out"

    assert fo.around_forward_batch_generation(off_step, worker, "batch") == "out"
    assert draft.war_fastpath_read_done_event == "ev" and target.war_fastpath_read_done_event is None
    draft.war_fastpath_read_done_event, target.war_fastpath_read_done_event = None, "ev2"
    assert fo.around_forward_batch_generation(lambda w, b: "on", worker, "batch") == "on"
    assert draft.war_fastpath_read_done_event is None, "an on step must not move events"
    target = SimpleNamespace(shared_read_done_event="ev3")
    reader = SimpleNamespace(shared_read_done_event=None)
    worker = SimpleNamespace(_target_worker=SimpleNamespace(model_runner=target), last_shared_read_runner=reader)
    fo.around_forward_batch_generation(off_step, worker, "batch")
    assert reader.shared_read_done_event == "ev3" and target.shared_read_done_event is None
    print("[cpu-check] step: read-done event handed to the WAR barrier after off steps only: ok")


SOURCE_FACTS = (
    # (file under sglang/srt/, text): what fast_off's hooks and helpers rely on
    ("speculative/eagle_worker_v2.py", "class EAGLEWorkerV2("),
    ("speculative/eagle_worker_v2.py", "    def build_adaptive_runtime_state("),
    ("speculative/eagle_worker_v2.py", "    def forward_batch_generation("),
    ("speculative/eagle_worker_v2.py", "    def _override_worker_state("),
    ("speculative/eagle_worker_v2.py", "_get_attention_backend("),
    ("speculative/eagle_worker_v2.py", "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND"),
    ("speculative/eagle_utils.py", "def eagle_prepare_for_verify("),
    ("speculative/eagle_worker_common.py", "eagle_prepare_for_verify,"),
    ("model_executor/runner/decode_cuda_graph_runner.py", "    def capture(self) -> None:"),
    ("model_executor/runner/decode_cuda_graph_runner.py", "    def get_spec_info(self, num_tokens: int):"),
    ("model_executor/forward_batch_info.py", "def mark_forward_metadata_ready(self"),
)
# The scheduler's WAR-barrier names changed between releases; one of these pairs must hold.
READ_DONE_FACTS = (
    ("managers/scheduler.py", "runner.war_fastpath_read_done_event"),
    ("managers/scheduler.py", "runner.shared_read_done_event"),
)


def check_sources(roots: list[Path]) -> None:
    """The hook targets and helpers exist in each SGLang source tree given (skipped if absent)."""
    for root in roots:
        if not root.is_dir():
            print(f"[cpu-check] sources: {root} not here, skipped")
            continue
        missing = [(f, t) for f, t in SOURCE_FACTS if t not in (root / f).read_text()]
        assert not missing, f"{root}: missing {missing}"
        assert any(t in (root / f).read_text() for f, t in READ_DONE_FACTS), f"{root}: no WAR barrier names"
        print(f"[cpu-check] sources: all {len(SOURCE_FACTS)} facts found in {root}")


def main() -> int:
    install_fakes()
    fo = load_fast_off()
    check_install(fo)
    check_prepare(fo)
    check_build(fo)
    check_step(fo)
    check_sources([Path(p) for p in os.environ.get(
        "SGLANG_SRC", "/tmp/sgl/0.5.17/sglang/srt:/tmp/sgl/0.5.23/sglang/srt").split(":")])
    print("[cpu-check] all ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
