"""The simulated scheduler: requests, a running batch, one decode step at a time.

The engine holds requests, admits them into a running batch, and advances one
decode step at a time, priced by the step-cost model (sim/costs.py), asking the
real :class:`SpecPolicy` how many draft steps to run, exactly as the specctl
plugin does inside SGLang. It never sleeps: the live server paces it, the
benchmarks run it as fast as the CPU allows. Given a seed, a run is
deterministic.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from specctl.runtime.core.policy import SpecPolicy
from specctl.runtime.sim.costs import PerfParams, Workload, alpha_for, decode_s, off_s, prefill_s, spec_s

# Decode steps the accept-length and throughput gauges average over; SGLang
# logs (and updates those gauges) every 40 decode steps by default.
GAUGE_STEPS = 40
THROUGHPUT_WINDOW_S = 2.0


@dataclass(eq=False)
class SimRequest:
    """One request in the simulated server; times are simulated seconds."""

    rid: int
    input_len: int
    output_len: int
    tag: str
    arrived: float
    done: int = 0  # output tokens produced
    decode_steps: int = 0  # decode steps it took part in (SGLang's spec_verify_ct)
    finished_at: float | None = None

    @property
    def remaining(self) -> int:
        return self.output_len - self.done

    @property
    def accept_len(self) -> float | None:
        """Tokens per decode step, as SGLang's meta_info ``spec_accept_length``."""
        return self.done / self.decode_steps if self.decode_steps else None


@dataclass(frozen=True)
class StepReport:
    """What one :meth:`SimEngine.step` did."""

    duration: float
    batch_size: int
    steps: int  # draft steps run (0 = no drafting)
    tokens: int  # output tokens produced
    prefill_tokens: int
    finished: tuple[SimRequest, ...]


@dataclass
class _Gauges:
    """Rolling windows behind SGLang's gauges."""

    accept: deque[float] = field(default_factory=lambda: deque(maxlen=GAUGE_STEPS))
    tokens: deque[tuple[float, float, int]] = field(default_factory=deque)  # (end, duration, tokens)


class SimEngine:
    """A simulated scheduler: a queue, a running batch, and one decode step per :meth:`step`.

    ``policy`` is None for a server that has no speculation at all (the
    "nospec" baseline); otherwise the policy's answer picks between a
    speculative cycle and the off state each step.
    """

    def __init__(self, params: PerfParams, workload: Workload, *, policy: SpecPolicy | None,
                 accept_len: float, accept_steps: int, max_running: int, kv_pool_tokens: int,
                 seed: int = 0, fast_off: bool = True, topk: int = 1, draft_tokens: int | None = None,
                 step_noise: float = 0.0) -> None:
        self.params = params
        # a real GPU's step times scatter (launch jitter, prefills, clocks): each step's time is scaled by a
        # lognormal factor of mean 1 and this sigma (0: the cost model's time exactly, the default)
        self.step_noise = step_noise
        self._noise_rng = random.Random(seed ^ 0x57E9)
        # the draft's shape: topk 1 drafts a chain; topk > 1 a tree of at most draft_tokens
        self.topk = topk
        self.draft_tokens = draft_tokens
        # False: specctl's fast off is not in place, so "off" is SGLang's own steps-0 state
        self.fast_off = fast_off
        self.workload = workload
        self.policy = policy
        # the switch warm-up's depth (the plugin's specctl_warmup): every step runs it, the policy stands aside
        self.held: int | None = None
        self.alpha = alpha_for(accept_len, accept_steps)
        self.max_running = max_running
        self.kv_pool_tokens = kv_pool_tokens
        self.now = 0.0
        self.running: list[SimRequest] = []
        self.queue: deque[SimRequest] = deque()
        self.ctx_tokens = 0
        self.reserved_tokens = 0  # input + output of running requests: admission never overfills the pool
        self.decode_tokens_total = 0
        self.prefill_tokens_total = 0
        self.busy_s = 0.0  # simulated time spent computing (GPU utilisation)
        self.on_finish: Callable[[SimRequest], None] | None = None
        self._accept_rng = random.Random(seed)
        self._length_rng = random.Random(seed ^ 0x5EED)
        self._log_alpha = math.log(self.alpha) if self.alpha > 0 else -math.inf
        self._next_rid = 0
        self._by_tag: dict[str, int] = {}
        self._gauges = _Gauges()
        # Acceptance per draft position (sim/depth.py's AcceptLaw: draw(rng, n, depth)); None: the
        # geometric law in ``alpha`` above. Set after construction, so presets need not know it.
        self.accept_law: Any = None

    # -- requests ------------------------------------------------------
    def submit(self, input_len: int, output_len: int, tag: str = "load") -> SimRequest:
        """Queue a request; it is admitted at the next step if the batch has room."""
        req = SimRequest(self._next_rid, max(1, input_len), max(1, output_len), tag, self.now)
        self._next_rid += 1
        self.queue.append(req)
        self._by_tag[tag] = self._by_tag.get(tag, 0) + 1
        return req

    def submit_random(self, tag: str = "load") -> SimRequest:
        """Queue a request shaped like the workload (the load generator's requests)."""
        w = self.workload
        rng = self._length_rng
        return self.submit(rng.randint(w.input_min, w.input_max), rng.randint(w.output_min, w.output_max), tag)

    def in_flight(self, tag: str) -> int:
        """Requests of ``tag`` queued or running."""
        return self._by_tag.get(tag, 0)

    def abort(self, req: SimRequest) -> None:
        """Drop a request whose client went away, as SGLang aborts it."""
        if req.finished_at is not None:
            return
        if req in self.queue:
            self.queue.remove(req)
        elif req in self.running:
            self.running.remove(req)
            self.ctx_tokens -= req.input_len + req.done
            self.reserved_tokens -= req.input_len + req.output_len
        else:
            return
        req.finished_at = self.now
        self._by_tag[req.tag] -= 1

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.queue)

    # -- time ----------------------------------------------------------
    def idle_until(self, t: float) -> None:
        """Advance the clock with nothing to do (the gauges decay as SGLang's do)."""
        if t > self.now:
            self._gauges.tokens.append((t, t - self.now, 0))
            self.now = t

    def step(self) -> StepReport | None:
        """Admit what fits, prefill it, run one decode step; None when there is nothing to run."""
        if not self.has_work:
            return None
        prompts = self._admit()
        duration = prefill_s(self.params, prompts, with_draft=self._draft_prefills())
        bs = len(self.running)
        steps = self._depth(bs)
        if steps > 0:
            duration += spec_s(self.params, bs, self.ctx_tokens, steps, self.topk, self.draft_tokens)
            tokens, finished = self._advance_spec(steps, feed_policy=self.held is None)
        else:
            duration += self._plain_s(bs)
            tokens, finished = self._advance_plain()
        if self.step_noise > 0:
            duration *= self._noise_rng.lognormvariate(-self.step_noise ** 2 / 2, self.step_noise)
        self.now += duration
        self.busy_s += duration
        if self.policy is not None and self.held is None:
            self.policy.step_time(duration)  # the meter calibration reads (the plugin times its steps too)
        self._record(duration, tokens)
        self.prefill_tokens_total += sum(prompts)
        for req in finished:
            req.finished_at = self.now
            self._by_tag[req.tag] -= 1
            if self.on_finish is not None:
                self.on_finish(req)
        return StepReport(duration, bs, steps, tokens, sum(prompts), tuple(finished))

    def _depth(self, bs: int) -> int:
        """This step's draft depth: none without speculation, the held one, else the policy's decision."""
        if self.policy is None:
            return 0
        return self.held if self.held is not None else self.policy.decide(bs)

    def _draft_prefills(self) -> bool:
        """Whether the draft model prefills new prompts: drafting, or off with the draft warm.

        As the plugin does: while off, a cold draft (the running batch at or above
        ``warm_below``) skips the prompts too; SGLang's own steps-0 state (no fast off)
        always prefills them.
        """
        if self.policy is None:
            return False
        drafting = self.policy.on if self.held is None else self.held > 0
        if drafting or not self.fast_off:
            return True
        return self.policy.last_batch < self.policy.settings.warm_below

    def _plain_s(self, bs: int) -> float:
        """A step without drafting: a server without speculation, or specctl's off state.

        Without fast off the off state is SGLang's steps-0 state: a 1-token verify
        in target-verify mode plus the draft extend (docs/sglang-plugin.md, "Fast off").
        """
        if self.policy is None:
            return decode_s(self.params, bs, self.ctx_tokens)
        if not self.fast_off:
            return spec_s(self.params, bs, self.ctx_tokens, 0)
        return off_s(self.params, bs, self.ctx_tokens, warm=bs < self.policy.settings.warm_below)

    def _admit(self) -> list[int]:
        """Move queued requests into the batch within max_running, the KV pool and one chunk budget."""
        prompts: list[int] = []
        budget = self.params.chunk_tokens
        while self.queue and len(self.running) < self.max_running:
            req = self.queue[0]
            if prompts and req.input_len > budget:
                break
            if self.reserved_tokens + req.input_len + req.output_len > self.kv_pool_tokens and self.running:
                break
            self.queue.popleft()
            self.running.append(req)
            self.ctx_tokens += req.input_len
            self.reserved_tokens += req.input_len + req.output_len
            prompts.append(req.input_len)
            budget -= req.input_len
        return prompts

    def _advance_plain(self) -> tuple[int, list[SimRequest]]:
        """Every running request gains one token."""
        finished: list[SimRequest] = []
        for req in self.running:
            req.done += 1
            req.decode_steps += 1
            if req.done >= req.output_len:
                finished.append(req)
        n = len(self.running)
        self.ctx_tokens += n
        self._gauges.accept.append(1.0)
        self._drop(finished)
        return n, finished

    def _advance_spec(self, steps: int, feed_policy: bool = True) -> tuple[int, list[SimRequest]]:
        """Each request gains its accepted drafts plus the bonus token; the policy sees the drafts
        (not while the warm-up holds the depth: a warm-up's acceptance is not the traffic's)."""
        accepted = self._draw_accepted(len(self.running), steps)
        finished: list[SimRequest] = []
        tokens = 0
        for req, a in zip(self.running, accepted):
            gain = min(a + 1, req.remaining)
            req.done += gain
            req.decode_steps += 1
            tokens += gain
            if req.done >= req.output_len:
                finished.append(req)
        self.ctx_tokens += tokens
        assert self.policy is not None
        if feed_policy:
            self.policy.on_verify(accepted)
        self._gauges.accept.append(1.0 + sum(accepted) / len(accepted))
        self._drop(finished)
        return tokens, finished

    def _draw_accepted(self, n: int, steps: int) -> list[int]:
        """Accepted drafts per request: a geometric law in ``alpha`` truncated at ``steps``.

        Inverse-CDF sampling (one uniform draw each) keeps batch 256 cheap.
        """
        if self.accept_law is not None:
            return self.accept_law.draw(self._accept_rng, n, steps)
        log_a = self._log_alpha
        if log_a >= 0.0:
            return [steps] * n
        if log_a == -math.inf:
            return [0] * n
        rand = self._accept_rng.random
        log = math.log
        return [min(steps, int(log(1.0 - rand()) / log_a)) for _ in range(n)]

    def _drop(self, finished: list[SimRequest]) -> None:
        if not finished:
            return
        gone = set(map(id, finished))
        self.running = [r for r in self.running if id(r) not in gone]
        self.ctx_tokens -= sum(r.input_len + r.done for r in finished)
        self.reserved_tokens -= sum(r.input_len + r.output_len for r in finished)

    def _record(self, duration: float, tokens: int) -> None:
        self.decode_tokens_total += tokens
        window = self._gauges.tokens
        window.append((self.now, duration, tokens))
        while window and window[0][0] < self.now - THROUGHPUT_WINDOW_S:
            window.popleft()

    # -- gauges --------------------------------------------------------
    def gen_throughput(self) -> float:
        """Output tokens/s over the last couple of simulated seconds (SGLang's gen_throughput)."""
        window = self._gauges.tokens
        while window and window[0][0] < self.now - THROUGHPUT_WINDOW_S:
            window.popleft()
        span = sum(d for _, d, _ in window)
        return sum(n for _, _, n in window) / span if span > 0 else 0.0

    def accept_len(self) -> float:
        """Mean tokens per verify over the last decode steps; steps without drafting count 1.0, as in SGLang."""
        acc = self._gauges.accept
        return sum(acc) / len(acc) if acc else 1.0

    def token_usage(self) -> float:
        """Fraction of the KV pool holding context."""
        return self.ctx_tokens / self.kv_pool_tokens
