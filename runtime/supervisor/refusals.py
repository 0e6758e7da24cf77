"""Why the server or the settings refuse a change, in words that say how to get it.

A refusal names the field and the command (or the launch line) that would be taken: a depth
asked for without the acceptance floor it needs, a depth the server built no runtime state for,
another depth of a drafted tree. Each is a CommandError the control socket answers with.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specctl.runtime.core.errors import INVALID_VALUE, CommandError
from specctl.runtime.core.settings import PolicySettings, SettingsError, check_fields, floor_for_steps


def shallow_hint(exc: SettingsError, changes: Mapping[str, Any], current: PolicySettings) -> str:
    """A depth asked for without the setting it needs changed along: say how to ask for both.

    ``specctl force-on --steps 1`` on a server built for 0,1,2,3 is refused for min_accept (1.3 by
    default: a depth-1 verify accepts at most one draft token), which the operator never typed.
    """
    steps = changes.get("steps")
    if exc.field == "steps" and steps is None and isinstance(changes.get("candidates"), (list, tuple)):
        # `set candidates=0,2` while steps is 3: narrowing past steps takes steps along
        shown = ",".join(map(str, changes["candidates"]))
        deepest = max(changes["candidates"], default=0)
        floor = f" min_accept={floor_for_steps(deepest):g}" if current.min_accept > deepest else ""  # else refused next
        return f"; narrow steps with them in one command (specctl set candidates={shown} steps={deepest}{floor})"
    if exc.field != "min_accept" or "min_accept" in changes or steps is None:
        return ""
    steps = check_fields({"steps": steps})["steps"]  # coerced already, or the refusal would name steps
    if not current.candidates and steps != current.steps:  # built {0, steps} only: the set would be refused next
        return (f"; and the model server built runtime states (CUDA graphs) for 0 and {current.steps} draft steps "
                f"only, so {steps} needs a relaunch ({_relaunch(steps)})")
    mode = "mode=on " if changes.get("mode") == "on" else ""
    return (f"; at {steps} draft step{'s' if steps != 1 else ''} the acceptance floor min_accept must be at most "
            f"{steps}: lower it in the same command (specctl set {mode}steps={steps} "
            f"min_accept={floor_for_steps(steps):g}, the default floor scaled to the depth)")


def _relaunch(steps: int) -> str:
    """The launch lines for ``steps`` draft steps, with the floor they need where the default is out of reach."""
    floor = f" --set min_accept={floor_for_steps(steps):g}" if PolicySettings.min_accept > steps else ""
    return (f"specctl run --speculative-num-steps {steps}{floor}, or specctl sglang-args --steps {steps}{floor} "
            "for your own launch line")


def tree_depth_refusal(steps: int, topk: int) -> CommandError:
    """A tree under the switch has its launch depth and off only: another depth is a relaunch of that tree."""
    return CommandError(INVALID_VALUE, (
        f"the model server drafts a tree (topk {topk}) under specctl's switch, which has its launch depth "
        f"({steps}) and off only; another depth is a relaunch with that tree's own "
        "--speculative-num-steps and --speculative-num-draft-tokens (docs/sglang-plugin.md); nothing changed"),
        field="steps")


def refused(current: PolicySettings, new: PolicySettings, topk: object = None) -> CommandError:
    """The server said no to settings the supervisor found valid: name the field and why where it is known.

    The one setting a server refuses that passes every check here is a step count it has no runtime
    state for: SGLang builds CUDA graphs at launch for the candidate steps of its adaptive config
    (specctl writes {0, N}), so another N needs a relaunch, not a set. A tree (``topk`` above 1)
    has its launch depth and off only, whatever the relaunch.
    """
    if new.steps != current.steps and isinstance(topk, int) and topk > 1:
        return tree_depth_refusal(current.steps, topk)
    if new.steps != current.steps:
        return CommandError(INVALID_VALUE, (
            f"the model server was launched for {current.steps} draft steps and built its runtime states "
            f"(CUDA graphs) for those and for 0 only, so it cannot run {new.steps} without a relaunch "
            f"({_relaunch(new.steps)}); nothing changed"), field="steps")
    if new.candidates != current.candidates and set(new.candidates) - set(current.candidates):
        wanted = ",".join(map(str, new.candidates))
        return CommandError(INVALID_VALUE, (
            f"the model server refused candidates {wanted}: it built runtime states (CUDA graphs) at launch "
            "only for the depths it was launched with, so another depth needs a relaunch (specctl run "
            f"--speculative-candidate-steps {wanted}, or specctl sglang-args --speculative-candidate-steps "
            f"{wanted} for your own launch line); narrowing to a subset of those is fine; nothing changed"),
            field="candidates")
    changed = ", ".join(k for k, v in new.as_dict().items() if v != current.as_dict()[k]) or "none"
    return CommandError(INVALID_VALUE, f"the model server refused the settings ({changed}): it validates them "
                                       "again, and its log says which and why; nothing changed")
