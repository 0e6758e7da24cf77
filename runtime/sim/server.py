"""The simulator's HTTP server: SGLang's endpoints over a real-time engine.

An asyncio task paces the engine against the monotonic clock in ticks: each
tick runs as many simulated steps as fit in the real time that passed, so the
CPU sleeps between ticks while the simulated server keeps its throughput.
Handlers only read the engine or queue requests into it; every mutation
happens on the event loop thread, so no locks are needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

from prometheus_client import CollectorRegistry

from specctl.runtime.core.depth_model import DepthCosts
from specctl.runtime.core.policy import SpecPolicy
from specctl.runtime.core.settings import SettingsError, settings_from_wire, warmup_hold
from specctl.runtime.core.wire import EXPERTS_KEY, WARMUP_KEY, WIRE_PREFIX
from specctl.runtime.sim import nospec
from specctl.runtime.sim.costs import tree_tokens
from specctl.runtime.sim.depth import policy_costs
from specctl.runtime.sim.engine import SimEngine, SimRequest
from specctl.runtime.sim.generate import ABORTED, BadRequest, Job
from specctl.runtime.sim.gpus import SimGpus
from specctl.runtime.sim.load import LoadDriver, LoadSpec
from specctl.runtime.sim.metrics import Collector, RequestMetrics
from specctl.runtime.sim.preset_model import Preset
from specctl.runtime.sim.sampling import EOS_ID, Stop, TokenSource, source_key, token_text

TICK_S = 0.025
CPU_BUDGET_S = 0.015  # per tick; beyond it the simulated clock falls behind rather than hog the CPU
MAX_LAG_S = 1.0  # lag beyond this is dropped, not caught up, so a stall does not cause a burst
UTIL_WINDOW_S = 1.0  # simulated GPU utilisation is measured over this much recent time, as NVML's is
SGLANG_VERSION = "0.5.17"  # the SGLang release whose endpoints the simulator answers like
HTTP_TAG = "http"
CONTEXT_LEN = 131_072  # Llama 3.1's
DEFAULT_MAX_QUEUED = 4096  # waiting requests before a new one is refused (SGLang's --max-queued-requests)
IDLE_WAIT_S = 1.0  # with nothing to run and no load, the engine loop sleeps this long unless a request comes
QUEUE_FULL = "The request queue is full."  # the scheduler's answer (scheduler.py, _abort_on_queued_limit)


class Overloaded(Exception):
    """The waiting queue is full: SGLang answers 503 with QUEUE_FULL."""


@dataclass
class Piece:
    """Output ids a request produced since the last piece, their text, and how it ended (on the last one).

    ``finish`` is SGLang's meta_info ``finish_reason``: ``{"type": "length", "length": N}``, ``{"type": "stop",
    "matched": STRING_OR_EOS_ID}`` or ABORTED; None while the request runs.
    """

    ids: list[int]
    text: str
    finish: dict[str, Any] | None = None
    start: int = 0  # the index of ids[0] among the request's output tokens
    accept: float | None = None  # the request's tokens per verify so far (meta_info spec_accept_length)
    verifies: int = 0  # its decode steps so far (spec_verify_ct)


@dataclass(frozen=True)
class SimConfig:
    """Everything the command line decides."""

    preset: Preset
    gpus: int
    load: LoadSpec
    policy_changes: dict[str, Any]
    seed: int = 0
    startup_delay_s: float = 0.0
    failed_gpus: frozenset[int] = frozenset()
    slow_off: bool = False  # as a server whose fast off is not in place (SGLang's own steps-0 state)
    eager_prefill: bool = False  # as a server launched with --disable-prefill-cuda-graph
    plugin: bool = True  # False: as SGLang without the specctl plugin (static EAGLE-3, no specctl keys)
    speculation: bool = True  # False: as SGLang launched without speculation (sim/nospec.py); plugin False too
    # The depth choice's step-time table: "model" prices depths with the simulator's own model; a DepthCosts
    # (--depth-costs FILE) or None (--no-depth-costs) as a real server launched with or without SPECCTL_DEPTH_COSTS.
    depth_costs: DepthCosts | None | Literal["model"] = "model"
    model_path: str | None = None  # --model-path: the path the server reports (default: the preset's)
    served_model_name: str | None = None  # --served-model-name (default: the model path)
    context_length: int = CONTEXT_LEN
    max_queued_requests: int = DEFAULT_MAX_QUEUED


class SimServer:
    """Engine, policy, load generator and GPUs, served over aiohttp."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        p = cfg.preset
        changes = cfg.policy_changes if cfg.plugin else {**cfg.policy_changes, "mode": "on"}  # no policy: static
        settings = p.default_settings().with_changes(changes)
        costs = policy_costs(p.params, p.workload, settings.candidates) if cfg.depth_costs == "model" \
            else cfg.depth_costs
        self.policy = SpecPolicy(settings, costs)
        # Like SGLang under specctl's generated config, only the launch's depths have a runtime state.
        self.built_depths = settings.depths()
        # Without speculation the engine has no policy: every step costs a plain decode (the "nospec" baseline).
        self.engine: SimEngine = p.engine(self.policy if cfg.speculation else None, seed=cfg.seed,
                                          fast_off=not cfg.slow_off)
        self.engine.on_finish = self._finished
        self.driver = LoadDriver(cfg.load)
        self.gpus = SimGpus(p.gpu, cfg.gpus, mem_fraction_static=p.mem_fraction_static, seed=cfg.seed,
                            preset=p.name, failed=cfg.failed_gpus)
        self._waiters: dict[int, asyncio.Future[SimRequest]] = {}
        self._http: dict[int, tuple[str, SimRequest]] = {}  # engine rid -> (the client's rid, request): /abort_request
        self._tick = asyncio.Event()  # set (and replaced) after every engine tick: streams wake on it
        self._wake = asyncio.Event()  # set when a request arrives, so an idle engine loop runs at once
        self._busy: deque[tuple[float, float]] = deque()  # simulated (start, end) spells in which steps ran
        self._started = time.monotonic()
        self._lag_dropped_s = 0.0
        self.health_checks = 0  # /health and /health_generate answered: each costs SGLang a generation
        self._task: asyncio.Task[None] | None = None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(Collector(self))
        self.requests = RequestMetrics(self.registry, self.served_model_name)
        self._http_seq = 0  # requests taken over HTTP: a sampled request's id stream is keyed by it
        self._offset = 0.0  # simulated time minus the event loop's clock (set when the engine loop starts)

    @property
    def model_path(self) -> str:
        return self.cfg.model_path or self.cfg.preset.model_path

    @property
    def served_model_name(self) -> str:
        return self.cfg.served_model_name or self.model_path

    @property
    def context_length(self) -> int:
        return self.cfg.context_length

    # -- the real-time loop ---------------------------------------------
    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="specctl-sim-engine")

    async def stop(self) -> None:
        """Stop the engine and answer waiting /generate calls with 503."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._tick.set()  # streams waiting for the next tick see the engine stopped
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(ConnectionAbortedError("simulator stopping"))
        self._waiters.clear()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        self._offset = self.engine.now - loop.time()  # simulated time = real time + offset
        last = loop.time()
        while True:
            if self._idle():  # nothing to run and no load: sleep until a request comes (cheap replicas)
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), IDLE_WAIT_S)
            else:
                await asyncio.sleep(TICK_S)
            now = loop.time()
            target = now + self._offset
            self._advance(target)
            lag = target - self.engine.now
            if lag > MAX_LAG_S:
                self._offset -= lag
                self._lag_dropped_s += lag
            self.gpus.update(now - last, self.busy_fraction(min(target, self.engine.now)),
                             len(self.engine.running))
            last = now
            self._tick.set()
            self._tick = asyncio.Event()

    def _idle(self) -> bool:
        return not self.engine.has_work and self.driver.target(self.engine.now) == 0

    def _advance(self, target: float) -> None:
        """Run simulated steps up to ``target`` (or the tick's CPU budget), noting when the GPUs computed."""
        engine = self.engine
        deadline = time.perf_counter() + CPU_BUDGET_S
        while engine.now < target:
            self.driver.top_up(engine)
            if not engine.has_work:
                engine.idle_until(target)
                return
            start = engine.now
            engine.step()
            self._note_busy(start, engine.now)
            if time.perf_counter() > deadline:
                return

    def _note_busy(self, start: float, end: float) -> None:
        if self._busy and self._busy[-1][1] >= start:  # back-to-back steps: one busy spell
            self._busy[-1] = (self._busy[-1][0], end)
        else:
            self._busy.append((start, end))

    def busy_fraction(self, end: float) -> float:
        """The share of the last UTIL_WINDOW_S of simulated time (up to ``end``) in which a step ran.

        As NVML's utilisation: the share of a recent period in which a kernel was running. A step
        that outlasts a tick keeps the GPUs busy through it (measuring per tick, a tick in which no
        step finished read 0 % under full load), and a step still running past ``end`` counts up
        to ``end``.
        """
        start = end - UTIL_WINDOW_S
        while self._busy and self._busy[0][1] < start:
            self._busy.popleft()
        covered = sum(max(0.0, min(b, end) - max(a, start)) for a, b in self._busy)
        return min(1.0, covered / UTIL_WINDOW_S)

    def _finished(self, req: SimRequest) -> None:
        fut = self._waiters.pop(req.rid, None)
        if fut is not None and not fut.done():
            fut.set_result(req)

    @property
    def ready(self) -> bool:
        return time.monotonic() - self._started >= self.cfg.startup_delay_s

    def _hold(self, args: dict[str, Any]) -> bool:
        """The switch warm-up's key, as the plugin takes it: alone, a built depth or HAND_BACK."""
        if len(args) > 1:
            return False
        try:
            self.engine.held = warmup_hold(args[WARMUP_KEY], self.built_depths)
        except SettingsError:
            return False
        return True

    # -- read-outs ------------------------------------------------------
    def internal_state(self) -> dict[str, Any]:
        """What SGLang's scheduler reports per DP rank, plus the specctl policy's state."""
        e = self.engine
        state: dict[str, Any] = {
            "avg_spec_accept_length": round(e.accept_len(), 4),
            "last_gen_throughput": round(e.gen_throughput(), 2),
            "num_running_reqs": len(e.running),
            "num_queue_reqs": len(e.queue),
            "token_usage": round(e.token_usage(), 4),
        }
        if not self.cfg.speculation:  # SGLang adds it only for a speculative server
            del state["avg_spec_accept_length"]
        if self.cfg.plugin:  # the plugin adds its block; a server without it has none
            # the plugin says the target's routed experts (0: dense), as it reads SGLang's HF config
            block = {**self.policy.state(), "held": self.engine.held, "built": list(self.built_depths),
                     "off_state": self.off_state(), EXPERTS_KEY: self.experts()}
            state = {"specctl": block, **state}
        return state

    def experts(self) -> int:
        """The preset's routed experts, 0 for a dense target (the report's GLM-5: 256, Qwen3-30B-A3B: 128)."""
        return int(self.cfg.preset.params.moe_experts or 0)

    def off_state(self) -> dict[str, Any]:
        """As the plugin reports it (fast_off.summary): whether "off" costs what no speculation costs."""
        if self.cfg.slow_off:
            return {"fast": False, "why_not": "simulated (--slow-off): SGLang's own steps-0 state"}
        return {"fast": True, "why_not": None}

    def cuda_graph_args(self) -> dict[str, Any]:
        """SGLang 0.5.17's resolved CUDA-graph arguments: prefill graphs ("breakable") unless launched eager."""
        prefill = "disabled" if self.cfg.eager_prefill else "breakable"
        return {"disable_cuda_graph": False, "disable_prefill_cuda_graph": self.cfg.eager_prefill,
                "cuda_graph_config": {"decode": {"backend": "full", "max_bs": self.cfg.preset.max_running},
                                      "prefill": {"backend": prefill, "max_bs": None}}}

    def server_info(self) -> dict[str, Any]:
        p = self.cfg.preset
        steps = self.policy.settings.steps
        return {
            "model_path": self.model_path,
            "served_model_name": self.served_model_name,
            "context_length": self.context_length,
            "max_queued_requests": self.cfg.max_queued_requests,
            "tp_size": p.tp_size,
            "dp_size": 1,
            "attention_backend": p.attention_backend,
            "speculative_algorithm": "EAGLE3",
            "speculative_draft_model_path": p.draft_model_path,
            "speculative_num_steps": steps,
            "speculative_eagle_topk": p.topk,
            "speculative_num_draft_tokens": tree_tokens(steps, p.topk, p.draft_tokens),
            "max_running_requests": p.max_running,
            "max_total_num_tokens": p.kv_pool_tokens,
            "mem_fraction_static": p.mem_fraction_static,
            **({} if self.cfg.speculation else nospec.server_args()),
            **self.cuda_graph_args(),
            "version": SGLANG_VERSION,
            "internal_states": [self.internal_state()],
            "specctl_sim": {
                "preset": p.name,
                "description": p.description,
                "gpus": self.cfg.gpus,
                "failed_gpus": sorted(self.cfg.failed_gpus),
                "load": str(self.driver.spec),
                "load_target": self.driver.target(self.engine.now),
                "seed": self.cfg.seed,
                "sim_time_s": round(self.engine.now, 3),
                "lag_dropped_s": round(self._lag_dropped_s, 3),
                "health_checks": self.health_checks,
            },
        }

    # -- generation --------------------------------------------------------
    def context_problem(self, prompt_tokens: int, max_new: int | None) -> str | None:
        """SGLang's length checks (tokenizer_manager._validate_one_request, 0.5.23), or None."""
        ctx = self.context_length
        if prompt_tokens >= ctx:
            return f"The input ({prompt_tokens} tokens) is longer than the model's context length ({ctx} tokens)."
        if max_new is not None and prompt_tokens + max_new > ctx:
            return (f"Requested token count exceeds the model's maximum context length of {ctx} tokens. "
                    f"You requested a total of {prompt_tokens + max_new} tokens: {prompt_tokens} tokens from the "
                    f"input messages and {max_new} tokens for the completion. Please reduce the number of tokens "
                    f"in the input messages or the completion to fit within the limit.")
        return None

    def new_limit(self, prompt_tokens: int, max_new: int | None) -> int:
        """The tokens a request may produce: its own limit, else what the context leaves (as the scheduler's
        init_req_max_new_tokens: max_req_len - input - 1), never beyond the KV pool."""
        room = min(self.context_length - 1, self.engine.kv_pool_tokens - 1) - prompt_tokens - 1
        return max(0, room if max_new is None else min(max_new, room))

    def admit(self, n: int = 1) -> None:
        """Refuse ``n`` new requests when the waiting queue would pass --max-queued-requests."""
        if len(self.engine.queue) + n > self.cfg.max_queued_requests:
            raise Overloaded(QUEUE_FULL)

    def source(self, job: Job, choice: int = 0) -> TokenSource:
        """The id stream of one output of ``job`` (sampling.source_key)."""
        key, greedy = source_key(job.prompt_key, greedy=job.greedy, seed=job.seed, server_seed=self.cfg.seed,
                                 request=self.next_request(), choice=choice)
        return TokenSource(key, greedy=greedy)

    def check(self, job: Job) -> None:
        """SGLang's length checks of a job: BadRequest with its message."""
        if problem := self.context_problem(job.prompt_tokens, job.max_new):
            raise BadRequest(problem)

    def run_job(self, job: Job, *, choice: int = 0, rid: str | None = None, stream: bool = False,
                follow: bool = False) -> AsyncIterator[Piece]:
        return self.run(job.prompt_tokens, self.new_limit(job.prompt_tokens, job.max_new), self.source(job, choice),
                        stop=Stop(job.stop), eos=job.eos, rid=rid, stream=stream, follow=follow)

    def next_request(self) -> int:
        self._http_seq += 1
        return self._http_seq

    async def run(self, prompt_tokens: int, max_new: int, source: TokenSource, *, stop: Stop | None = None,
                  eos: bool = False, rid: str | None = None, stream: bool = False,
                  follow: bool = True) -> AsyncIterator[Piece]:
        """One request through the engine: its output as pieces, the last with its finish reason.

        The performance model decides when each token appears (the first after the prefill and a decode
        step, then as steps finish), so a client sees the simulated TTFT and inter-token latency. Ids are
        drawn from ``source`` only as the engine produces them. ``follow``: wake every tick (a stream, or
        stop strings to watch); otherwise wait for the end. A stop string ends the request where it
        appears; ``eos``: the request has no limit of its own and ends at a simulated EOS. A client that
        leaves (its handler cancelled) aborts the request, as SGLang does; so does /abort_request
        (``rid``: the client's).
        """
        out_len = max_new
        eos_at = None
        if eos:
            w = self.cfg.preset.workload
            eos_at = source.eos_after(w.output_min, w.output_max)
            out_len = min(out_len, eos_at)
        t0 = self.engine.now
        metrics = self.requests.start(prompt_tokens, stream, t0)
        if out_len == 0:
            metrics.finish(0, t0)
            yield Piece([], "", {"type": "length", "length": 0})
            return
        self.admit()
        if not self.engine.has_work:  # an idle engine's clock may be up to IDLE_WAIT_S behind: bring it to now
            self.engine.idle_until(asyncio.get_running_loop().time() + self._offset)
        req = self.engine.submit(prompt_tokens, out_len, HTTP_TAG)
        self._wake.set()
        self._http[req.rid] = (rid or f"sim-{req.rid}", req)
        fut: asyncio.Future[SimRequest] | None = None
        if not follow and not (stop and stop.strings):
            fut = asyncio.get_running_loop().create_future()
            self._waiters[req.rid] = fut
        sent, tail, ended = 0, "", False
        keep = max(0, (stop.longest if stop else 0) - 1)
        try:
            while True:
                if self._task is None or self._task.done():
                    raise ConnectionAbortedError("simulator stopping")
                if fut is not None:
                    await asyncio.shield(fut)
                else:
                    await self._tick.wait()
                if req.done > sent:
                    ids = source.take(req.done - sent)
                    texts = [token_text(sent + i, t) for i, t in enumerate(ids)]
                    text = "".join(texts)
                    start = sent
                    if stop and stop.strings and (hit := stop.find(tail + text, 0)) is not None:
                        at, matched = hit[0] - len(tail), hit[1]
                        end, n = at + len(matched), 0
                        while n < len(ids) and sum(map(len, texts[:n])) < end:
                            n += 1
                        sent += n
                        self.engine.abort(req)  # the scheduler ends it here: the batch drops it
                        metrics.token(sent, self.engine.now)
                        ended = True
                        yield Piece(ids[:n], text[:max(0, at)], {"type": "stop", "matched": matched}, start,
                                    req.accept_len, req.decode_steps)
                        return
                    if keep:
                        tail = (tail + text)[-keep:]
                    sent = req.done
                    metrics.token(sent, self.engine.now)
                    finish: dict[str, Any] | None = None
                    if sent >= out_len:
                        finish = {"type": "stop", "matched": EOS_ID} if eos_at is not None and sent == eos_at \
                            else {"type": "length", "length": sent}
                    ended = finish is not None
                    yield Piece(ids, text, finish, start, req.accept_len, req.decode_steps)
                    if finish is not None:
                        return
                if req.finished_at is not None and sent < out_len:  # aborted (/abort_request)
                    yield Piece([], "", dict(ABORTED), sent, req.accept_len, req.decode_steps)
                    return
        finally:
            self._http.pop(req.rid, None)
            self._waiters.pop(req.rid, None)
            if req.finished_at is None:
                self.engine.abort(req)
            metrics.finish(sent, self.engine.now, aborted=not ended)

    def answer(self, out: dict[str, Any]) -> dict[str, Any]:
        """A /generate answer as this server sends it: without speculation, no speculative meta_info."""
        return out if self.cfg.speculation else nospec.plain_answer(out)

    def abort_requests(self, rid: str, abort_all: bool) -> int:
        """/abort_request: end the HTTP requests whose rid starts with ``rid`` (all with ``abort_all``), as
        SGLang's scheduler matches them; each answers with what it has, ``finish_reason`` abort. How many."""
        if not abort_all and not rid:  # SGLang ignores it: an empty rid would match every request
            return 0
        hit = [(erid, req) for erid, (mine, req) in self._http.items() if abort_all or mine.startswith(rid)]
        for erid, req in hit:
            self.engine.abort(req)
            self._http.pop(erid, None)
            fut = self._waiters.pop(erid, None)
            if fut is not None and not fut.done():
                fut.set_result(req)
        self._tick.set()  # streams see it now, not at the next tick
        self._tick = asyncio.Event()
        return len(hit)

    # -- /set_internal_state ----------------------------------------------
    def set_internal_state(self, body: Any) -> list[bool]:
        """Apply ``specctl_*`` server_args all-or-nothing; ``[false]`` for unknown keys or bad values,
        and for a depth the launch did not build (SGLang has no runtime state for it)."""
        if not isinstance(body, dict) or not isinstance(body.get("server_args"), dict):
            raise BadRequest('body must be a JSON object with a "server_args" object')
        args: dict[str, Any] = body["server_args"]
        if not self.cfg.plugin:  # SGLang without the plugin knows none of our keys
            return [False]
        if WARMUP_KEY in args:
            return [self._hold(args)]
        for key, value in args.items():
            if not key.startswith(WIRE_PREFIX) or isinstance(value, bool) or not isinstance(value, (int, float)):
                return [False]
        try:
            new = settings_from_wire(self.policy.settings, args)
        except SettingsError:
            return [False]
        if new.steps not in self.built_depths or not set(new.candidates) <= set(self.built_depths):
            return [False]
        self.policy.apply(new.as_dict())
        return [True]
