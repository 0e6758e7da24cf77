"""One simulated SGLang server: the engine under the specctl policy, the requests it runs, the state it takes.

``SimServer`` holds the engine (paced in real time by pacing.py), the load generator
and the simulated GPUs; it runs HTTP requests through the engine as pieces of output,
applies /set_internal_state and /abort_request, and refuses work past
--max-queued-requests. What it reports is readouts.py; what the command line decides
is server_config.py; routes.py and api.py serve it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from specctl.runtime.core.policy import SpecPolicy
from specctl.runtime.core.settings import SettingsError, settings_from_wire, warmup_hold
from specctl.runtime.core.wire import WARMUP_KEY, WIRE_PREFIX
from specctl.runtime.sim import nospec
from specctl.runtime.sim.depth import policy_costs
from specctl.runtime.sim.engine import SimEngine, SimRequest
from specctl.runtime.sim.generate import ABORTED, BadRequest, Job
from specctl.runtime.sim.gpus import SimGpus
from specctl.runtime.sim.load import LoadDriver
from specctl.runtime.sim.metrics import Collector, RequestMetrics
from specctl.runtime.sim.pacing import Pacer
from specctl.runtime.sim.sampling import EOS_ID, Stop, TokenSource, source_key, token_text
from specctl.runtime.sim.server_config import SimConfig

HTTP_TAG = "http"
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
        self.pacer = Pacer(self.engine, self.driver, self.gpus)
        self._started = time.monotonic()
        self.health_checks = 0  # /health and /health_generate answered: each costs SGLang a generation
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(Collector(self))
        self.requests = RequestMetrics(self.registry, self.served_model_name)
        self._http_seq = 0  # requests taken over HTTP: a sampled request's id stream is keyed by it

    @property
    def model_path(self) -> str:
        return self.cfg.model_path or self.cfg.preset.model_path

    @property
    def served_model_name(self) -> str:
        return self.cfg.served_model_name or self.model_path

    @property
    def context_length(self) -> int:
        return self.cfg.context_length

    # -- the engine's loop (pacing.py) -----------------------------------
    async def start(self) -> None:
        self.pacer.start()

    async def stop(self) -> None:
        """Stop the engine and answer waiting /generate calls with 503."""
        await self.pacer.stop()  # streams waiting for the next tick see the engine stopped
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(ConnectionAbortedError("simulator stopping"))
        self._waiters.clear()

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
            self.engine.idle_until(self.pacer.sim_now())
        req = self.engine.submit(prompt_tokens, out_len, HTTP_TAG)
        self.pacer.wake()
        self._http[req.rid] = (rid or f"sim-{req.rid}", req)
        fut: asyncio.Future[SimRequest] | None = None
        if not follow and not (stop and stop.strings):
            fut = asyncio.get_running_loop().create_future()
            self._waiters[req.rid] = fut
        sent, tail, ended = 0, "", False
        keep = max(0, (stop.longest if stop else 0) - 1)
        try:
            while True:
                if not self.pacer.running:
                    raise ConnectionAbortedError("simulator stopping")
                if fut is not None:
                    await asyncio.shield(fut)
                else:
                    await self.pacer.next_tick()
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
        self.pacer.tick_now()  # streams see it now, not at the next tick
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
