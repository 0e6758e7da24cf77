"""SpecPolicy behind SGLang's ``AdaptiveSpeculativeParams`` protocol.

SGLang's ``AdaptiveController`` (speculative/adaptive_runtime_state.py) owns
one runtime state per candidate step count and asks its params object which
one to use: ``get_steps_for_batch(bs)`` before each decode batch is drafted,
``on_verify_complete(counts, bs)`` after its verify. This class answers with
the policy's decision, so the plugin can replace SGLang's class with it
through HookRegistry. It imports neither SGLang nor torch, so it is tested
on any machine.

One instance lives in each scheduler process (one per tensor-parallel rank);
``active()`` is how the plugin's /set_internal_state and /get_internal_state
hooks in the same process find it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from specctl.runtime.core.adaptive_config import read_candidate_steps
from specctl.runtime.core.depth_model import DepthCosts
from specctl.runtime.core.policy import SpecPolicy
from specctl.runtime.core.settings import PolicySettings, SettingsError, settings_from_wire, warmup_hold

# Observer of the policy's state (SpecPolicy.state()). Called only when the depth changes.
Observer = Callable[[Mapping[str, Any]], None]

# Decided-but-not-yet-verified batches. SGLang's overlap scheduler launches
# batch k+1 before it processes batch k's result, so this holds one or two;
# the bound keeps a batch whose result never comes from skewing it for long.
IN_FLIGHT = 4

_active: SpecctlParams | None = None


def active() -> SpecctlParams | None:
    """The params object of this process's speculative worker, once SGLang has built it."""
    return _active


class SpecctlParams:
    """Same constructor and methods as SGLang's AdaptiveSpeculativeParams."""

    def __init__(
        self,
        initial_steps: int,
        cfg_path: str | None = None,
        *,
        settings: PolicySettings | None = None,
        observer: Observer | None = None,
        costs: DepthCosts | None = None,
    ) -> None:
        global _active
        if cfg_path is None:
            raise ValueError("specctl needs --speculative-adaptive-config (its generated config)")
        self._candidates = read_candidate_steps(cfg_path)
        if 0 not in self._candidates:
            raise ValueError(f"{cfg_path}: candidate_steps must include 0 (speculation off)")
        settings = settings or PolicySettings(steps=initial_steps)
        self._check_steps(settings)
        self.policy = SpecPolicy(settings, costs)
        self._cuda_graph_bs: list[int] | None = None
        self._in_flight: deque[tuple[int, bool]] = deque(maxlen=IN_FLIGHT)  # (depth, held)
        self._held: int | None = None  # the switch warm-up's depth while it runs (hold)
        self._observer = observer
        self._reported: int | None = None
        self._last_verify: tuple[float, int] | None = None  # (perf_counter, depth) of the last verify heard
        self._report()
        _active = self

    # -- the AdaptiveSpeculativeParams protocol --------------------------
    @property
    def candidate_steps(self) -> list[int]:
        """Every step count SGLang must build a runtime state for (from the config file)."""
        return list(self._candidates)

    def set_cuda_graph_bs(self, cuda_graph_bs: list[int] | None) -> None:
        self._cuda_graph_bs = sorted(cuda_graph_bs) if cuda_graph_bs else None

    def cuda_graph_bs_for_step(self, step: int) -> list[int] | None:
        """All CUDA-graph batch sizes for every state: the policy may pick any depth at any size.

        SGLang's own class prunes a state's graphs to the buckets that list it;
        every bucket of specctl's config lists every candidate, and the policy
        prices depths by the batch alone, so each state needs every size.
        """
        if self._cuda_graph_bs is None:
            return None
        return list(self._cuda_graph_bs)

    def get_steps_for_batch(self, batch_size: int) -> int:
        """One policy step per decode batch: the depth to draft, one of the candidates (0 = off).

        While the switch warm-up holds a depth, that depth, and the policy is not asked.
        """
        if self._held is not None:
            self._in_flight.append((self._held, True))
            return self._held
        steps = self.policy.decide(batch_size)
        self._in_flight.append((steps, False))
        self._report()
        return steps

    def on_verify_complete(self, num_correct_drafts_per_req: list[int], batch_size: int) -> int | None:
        """Feed acceptance to the policy; never asks for a switch here (decisions happen per batch).

        SGLang passes accepted draft tokens per request with the bonus token
        already removed (accept_lens - 1), which is what SpecPolicy.on_verify
        takes, with the depth that batch drafted (the depth estimate needs to
        know which positions were tried). A batch that ran at steps 0 drafted
        nothing, so its zeros are not acceptance and are skipped.
        """
        drafted, held = self._in_flight.popleft() if self._in_flight else self._now()
        if drafted > 0 and not held:  # a warm-up batch's acceptance is its prompts', not the traffic's
            self.policy.on_verify(num_correct_drafts_per_req, drafted)
        self._time_verify(batch_size, drafted, held)
        return None

    def _time_verify(self, batch_size: int, depth: int, held: bool) -> None:
        """The step meter's reading: verify to verify, for the verified batch's size and depth.

        Verify to verify, not decision to decision: SGLang also asks for a depth before a prefill
        batch's draft extend (with that batch's size), which would split a decode step's time and
        give part of it to a small bucket. The interval that follows a change of depth (a switch)
        and a held (warm-up) batch are left out.
        """
        now = time.perf_counter()
        last, self._last_verify = self._last_verify, (now, depth)
        if held:
            self._last_verify = None
        elif last is not None and last[1] == depth:
            self.policy.meter.timed(batch_size, depth, now - last[0])

    # -- the switch warm-up (switch_warmup.py) ---------------------------
    def hold(self, depth: int) -> None:
        """Run every decode batch at ``depth`` (a built one) until ``hold(HAND_BACK)``; raises SettingsError.

        The policy stands aside meanwhile: it neither decides nor hears
        acceptance, so its step count, switches and acceptance window are
        what they were before the warm-up.
        """
        self._held = warmup_hold(depth, self._candidates)

    # -- settings (the /set_internal_state path) -------------------------
    def validate_wire(self, wire: Mapping[str, Any]) -> PolicySettings:
        """The settings a ``specctl_*`` request would give; raises SettingsError, changes nothing."""
        new = settings_from_wire(self.policy.settings, wire)
        self._check_steps(new)
        return new

    def apply_settings(self, settings: PolicySettings) -> None:
        """Take validated settings; they act from the next decode batch."""
        self.policy.apply(settings.as_dict())

    def state(self) -> dict[str, Any]:
        """The policy's state, the depth the switch warm-up holds (None: the policy decides) and the built depths."""
        return {**self.policy.state(), "held": self._held, "built": list(self._candidates)}

    # -- internals ------------------------------------------------------
    def _check_steps(self, settings: PolicySettings) -> None:
        """Only step counts with a runtime state may ever be returned to SGLang."""
        allowed = [s for s in self._candidates if s > 0]
        if settings.steps not in self._candidates:
            raise SettingsError("steps", f"must be one of {allowed} (the adaptive config), got {settings.steps}")
        extra = [d for d in settings.candidates if d not in self._candidates]
        if extra:
            raise SettingsError("candidates", f"depths {extra} have no runtime state "
                                              f"(the adaptive config has {self._candidates})")

    def _now(self) -> tuple[int, bool]:
        """(depth, held) of a verify whose decision was not recorded: what is in force now."""
        return (self.policy.depth, False) if self._held is None else (self._held, True)

    def _report(self) -> None:
        """Tell the observer about a change; cheap when nothing changed (runs every decode batch)."""
        if self._observer is None:
            return
        now = self.policy.depth
        if now == self._reported:
            return
        self._reported = now
        self._observer(self.policy.state())


def observers(*fns: Observer | None) -> Observer | None:
    """One observer calling each given one in turn (None where none is given)."""
    chosen = [fn for fn in fns if fn is not None]
    if not chosen:
        return None

    def observe(state: Mapping[str, Any]) -> None:
        for fn in chosen:
            fn(state)

    return observe
