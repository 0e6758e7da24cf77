"""A server launched without speculation (``--no-speculation``): what SGLang 0.5.17 reports then.

Many operators run SGLang without ``--speculative-algorithm`` before they try
specctl, and point specctl at that server first. The simulator imitates it from
SGLang's own sources (0.5.17's scheduler, 0.5.23's ``scheduler_components``):

- ``/server_info``: the ``speculative_*`` server arguments are ``None`` (their
  defaults, filled in only when an algorithm is given);
- ``/metrics``: the ``sglang:spec_accept_length`` gauge still exists, and reads
  0 (``metrics_reporter``: ``if spec_algorithm.is_none(): spec_accept_length = 0``);
- ``/get_internal_state``: no ``avg_spec_accept_length`` (added only when
  ``not spec_algorithm.is_none()``) and, with no plugin, no ``specctl`` block;
- ``/generate``'s ``meta_info``: no ``spec_accept_length`` / ``spec_verify_ct``
  (written only when a request was verified, ``spec_verify_ct > 0``);
- ``/set_internal_state`` with specctl's keys: ``[false]``, as any server
  without the plugin answers.

Each step costs a decode without drafting: the engine runs with no policy, the
model's "nospec" baseline (sim/costs.py ``decode_s``; sim/offline.py's server
"nospec"). Pure data and small functions: no I/O.
"""

from __future__ import annotations

from typing import Any

# The server arguments SGLang resolves only for a speculative launch; None without one.
SPEC_SERVER_ARGS = ("speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
                    "speculative_eagle_topk", "speculative_num_draft_tokens")
# meta_info keys a request gets only when it was verified speculatively.
SPEC_META_KEYS = ("spec_accept_length", "spec_verify_ct")
# What sglang:spec_accept_length reads on a server without speculation.
ACCEPT_GAUGE = 0.0


def server_args() -> dict[str, Any]:
    """/server_info's speculative arguments of a server launched without ``--speculative-algorithm``."""
    return dict.fromkeys(SPEC_SERVER_ARGS)


def plain_answer(answer: dict[str, Any]) -> dict[str, Any]:
    """A /generate answer without the speculative meta_info keys, as a no-speculation server sends it."""
    meta = answer.get("meta_info")
    if isinstance(meta, dict):
        for key in SPEC_META_KEYS:
            meta.pop(key, None)
    return answer


def usage_problem(*, steps: int | None, slow_off: bool, settings: list[str]) -> str | None:
    """Why ``--no-speculation`` cannot go with the other options given; None when it can.

    A server without speculation has no draft steps, no off state and no policy: an option
    that shapes one would be silently ignored, which hides a mistake in a test or a dry run.
    """
    if steps is not None:
        return "--no-speculation has no draft steps: drop --steps"
    if slow_off:
        return "--no-speculation has no off state to be slow: drop --slow-off"
    if settings:
        return f"--no-speculation has no specctl policy to set: drop --set {settings[0]}"
    return None
