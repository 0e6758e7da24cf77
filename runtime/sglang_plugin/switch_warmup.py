"""Switch warm-up: pay every state's first-use compiles before the server says it is ready.

Why: on a fresh machine the first switch to off paused a MoE server for 7-10 s
(docs/benchmarks.md). Kernels on a state's path compile on
first use into a disk cache (Triton's are specialised on constants such as
the draft token count and the batch's power-of-two bucket), and SGLang's own
warm-up sends one 8-token request in the launch state: only that state, at a
batch of one, is compiled before /health answers 200. The first off step under
load then paid the rest, with every running request waiting.

What: AROUND SGLang's ``_wait_and_warmup`` (a thread of the launcher process),
its warm-up function gets a prelude. Once the server answers /server_info, for
every depth the server built (0, off, first), the depth is held through
/set_internal_state's ``specctl_warmup`` key, and one batch of short requests
runs at every power of two up to the server's max running requests; then the
decisions go back to the policy, which neither decided nor heard acceptance
meanwhile (params.SpecctlParams.hold), and SGLang's own warm-up request runs
and marks the server up. /health answers 503 all along, as it does through
SGLang's own warm-up. On a warm disk cache it costs a few seconds of start-up.

Knob: ``SPECCTL_WARMUP`` (read at install): 0 (or false, no, off) skips it; a
number caps the largest batch (default: the server's max running requests, at
most MAX_BATCH). ``--skip-server-warmup`` skips it too: SGLang then never calls
the function this wraps. A warm-up that fails logs why and lets the launch go
on: the worst case is the pause it exists to avoid, never a server that does
not start.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import multiprocessing
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from specctl.runtime.core.wire import FALSE_WORDS, HAND_BACK, WARMUP_ENV, WARMUP_KEY
from specctl.runtime.sglang_plugin.release_types import HookSpec, Release
from specctl.runtime.sglang_plugin.sglang_access import SpecctlPluginError, register_hook

logger = logging.getLogger("specctl.plugin")

MAX_BATCH = 1024  # the default cap: bursts past it would cost start-up for batches few servers run
PROMPT_TOKENS = 4  # a burst of MAX_BATCH prompts stays within one default chunked prefill (8,192 tokens)
NEW_TOKENS = 4  # enough decode steps for the batch to run whole at its size
READY_WAIT_S = 600.0  # how long to wait for the server to answer before giving up (SGLang waits 120 s)
REQUEST_TIMEOUT_S = 900.0  # one burst on a cold machine: a FlashInfer server's first compile took ~3 minutes


class WarmupFailed(Exception):
    """The warm-up could not run to the end; the message says why (logged, never raised to SGLang)."""


@dataclass
class WarmupReport:
    """What the warm-up ran: seconds per (depth, batch), or why it did not run."""

    seconds: dict[tuple[int, int], float] = field(default_factory=dict)
    skipped: str | None = None

    def line(self) -> str:
        """One log line: the time each depth took over its batches."""
        if self.skipped is not None:
            return f"specctl: switch warm-up skipped: {self.skipped}"
        parts = []
        for depth in dict.fromkeys(d for d, _ in self.seconds):
            batches = sorted(b for d, b in self.seconds if d == depth)
            total = sum(self.seconds[(depth, b)] for b in batches)
            slowest = max(batches, key=lambda b: self.seconds[(depth, b)])
            parts.append(f"{'off' if depth == 0 else f'depth {depth}'} at batches {batches[0]}-{batches[-1]} "
                         f"in {total:.1f} s (slowest: batch {slowest}, {self.seconds[(depth, slowest)]:.1f} s)")
        return "specctl: switch warm-up: " + "; ".join(parts) + f" ({WARMUP_ENV}=0 skips it)"


def cap_from_env(environ: Mapping[str, str] = os.environ) -> int:
    """The largest batch to warm (0: skip); refuses a value that is neither off nor a positive count."""
    raw = (environ.get(WARMUP_ENV) or "").strip()
    if not raw:
        return MAX_BATCH
    if raw.lower() in FALSE_WORDS:
        return 0
    if not raw.isdigit() or int(raw) < 1:
        raise SpecctlPluginError(f"{WARMUP_ENV} must be 0 (no switch warm-up) or the largest batch to warm "
                                 f"(a positive count), got {raw!r}")
    return int(raw)


def batches(cap: int) -> list[int]:
    """Every power of two up to ``cap``, and ``cap``: one per batch-size bucket a kernel may specialise on."""
    sizes = [1 << i for i in range(cap.bit_length()) if 1 << i <= cap]
    return sizes + ([cap] if cap not in sizes else [])


# ------------------------------------------------------------------ the hook
def hooks_for(release: Release, environ: Mapping[str, str] = os.environ) -> tuple[HookSpec, ...]:
    """The launcher process's hook, unless the operator skips the warm-up; none in SGLang's children.

    The warm-up runs in the launcher's warm-up thread; a scheduler process
    never serves HTTP, so it has nothing to hook (and need not import the
    HTTP server).
    """
    if cap_from_env(environ) == 0 or multiprocessing.parent_process() is not None:
        return ()
    return release.warmup_hooks


def install(release: Release, register: Callable[[HookSpec, Callable[..., Any]], None] = register_hook) -> bool:
    """plugin.INSTALLERS entry; returns whether the hook was registered."""
    specs = hooks_for(release)
    for spec in specs:
        register(spec, around_wait_and_warmup)
    return bool(specs)


def around_wait_and_warmup(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run SGLang's wait-and-warm-up with specctl's warm-up before SGLang's own warm-up request."""
    bound = inspect.signature(original).bind(*args, **kwargs)
    bound.apply_defaults()
    sglang_warmup = bound.arguments["execute_warmup_func"]
    bound.arguments["execute_warmup_func"] = functools.partial(warm_first, sglang_warmup)
    return original(*bound.args, **bound.kwargs)


def warm_first(sglang_warmup: Callable[[Any], bool], server_args: Any) -> bool:
    """SGLang's warm-up function, after specctl's (which never raises: a launch never fails for it)."""
    cap = cap_from_env()
    try:
        report = asyncio.run(warm(server_args.url(), cap=cap, api_key=getattr(server_args, "api_key", None),
                                  admin_key=getattr(server_args, "admin_api_key", None)))
        logger.info(report.line())
    except Exception as exc:  # whatever went wrong, the server must still start
        logger.warning("specctl: switch warm-up did not finish (%s); the first switch to a state "
                       "may pause the server while its kernels compile", exc)
    return sglang_warmup(server_args)


# ------------------------------------------------------------------ the warm-up itself
async def warm(base_url: str, *, cap: int, api_key: str | None = None, admin_key: str | None = None,
               ready_wait_s: float | None = None, timeout_s: float = REQUEST_TIMEOUT_S) -> WarmupReport:
    """Hold every built depth in turn and run a burst at each batch bucket; hand back whatever happens.

    ``ready_wait_s``: how long to wait for the server to answer at all (READY_WAIT_S unless given).
    """
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(base_url, timeout=timeout) as http:
        info = await _server_info(http, _auth(api_key), READY_WAIT_S if ready_wait_s is None else ready_wait_s)
        spec = _first_state(info).get("specctl")
        if not isinstance(spec, dict) or not isinstance(spec.get("built"), list):
            return WarmupReport(skipped="the server reports no specctl policy with built depths")
        depths = sorted(int(d) for d in spec["built"])  # 0 first: the state whose first use paused
        sizes = batches(min(cap, _max_running(info) or cap))
        report = WarmupReport()
        admin = _auth(admin_key or api_key)
        sent = 0
        try:
            for depth in depths:
                await _hold(http, admin, depth)
                for n in sizes:
                    t0 = time.monotonic()
                    await _burst(http, _auth(api_key), n, first_id=sent)
                    report.seconds[(depth, n)] = seconds = time.monotonic() - t0
                    sent += n
                    # the supervisor's start-up progress reads "k/total" (launcher.StartupProgress)
                    logger.info("specctl: switch warm-up %d/%d: %s at batch %d, %.2f s", len(report.seconds),
                                len(depths) * len(sizes), "off" if depth == 0 else f"depth {depth}", n, seconds)
        finally:
            await _hold(http, admin, HAND_BACK)
        return report


def _auth(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


async def _server_info(http: aiohttp.ClientSession, headers: dict[str, str], wait_s: float) -> dict[str, Any]:
    """/server_info once the server answers (the warm-up thread starts before the HTTP server listens)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            async with http.get("/server_info", headers=headers, timeout=aiohttp.ClientTimeout(total=10)) as r:
                if r.status == 200:
                    info = await r.json()
                    if isinstance(info, dict):
                        return info
        except (TimeoutError, aiohttp.ClientError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise WarmupFailed(f"the server did not answer /server_info within {wait_s:.0f} s")
        await asyncio.sleep(1.0)


def _first_state(info: dict[str, Any]) -> dict[str, Any]:
    """The first DP rank's internal state in /server_info (the plugin's block is in it), else {}.

    Read here rather than through runtime/probes: the plugin imports only the core.
    """
    states = info.get("internal_states")
    return states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}


def _max_running(info: dict[str, Any]) -> int | None:
    """The scheduler's resolved max running requests (per DP rank), else the launch's, else None."""
    state = _first_state(info)
    for value in (state.get("effective_max_running_requests_per_dp"), info.get("max_running_requests")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


async def _hold(http: aiohttp.ClientSession, headers: dict[str, str], depth: int) -> None:
    body = {"server_args": {WARMUP_KEY: depth}}
    async with http.post("/set_internal_state", json=body, headers=headers) as r:
        answer = await r.json(content_type=None) if r.status == 200 else None
    if not (isinstance(answer, list) and answer and all(a is True for a in answer)):
        what = "hand the decisions back" if depth == HAND_BACK else f"hold depth {depth}"
        raise WarmupFailed(f"the server refused to {what} (HTTP {r.status}, {answer!r})")


async def _burst(http: aiohttp.ClientSession, headers: dict[str, str], n: int, first_id: int) -> None:
    """One /generate of ``n`` short prompts that decode together; prompts never repeat (no radix hits)."""
    ids = [_prompt(first_id + i) for i in range(n)]
    body = {"input_ids": ids if n > 1 else ids[0],
            "sampling_params": {"max_new_tokens": NEW_TOKENS, "temperature": 0, "ignore_eos": True}}
    async with http.post("/generate", json=body, headers=headers) as r:
        if r.status != 200:
            raise WarmupFailed(f"a burst of {n} requests got HTTP {r.status}: {(await r.text())[:200]}")
        await r.read()


def _prompt(k: int) -> list[int]:
    """The k-th warm-up prompt: distinct for every k below 4096 ** 2, token ids within 100..4,195."""
    return [100 + k // 4096 % 4096, 100 + k % 4096] + [101 + j for j in range(PROMPT_TOKENS - 2)]
