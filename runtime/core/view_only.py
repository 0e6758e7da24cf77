"""What specctl says about a server it can watch but not steer, and why: the one place for those words.

A ready server whose /server_info carries no specctl block cannot be steered:
it runs speculation without the plugin (a static EAGLE-3 launch), or it drafts
a tree (topk > 1, which the plugin refuses and SGLang's adaptive machinery
cannot switch off: docs/topk.md), or it was launched without speculation at
all (no ``--speculative-algorithm``), what many operators run before they try
specctl. Both are *view only*: the supervisor
samples them (tok/s, requests, GPUs) and journals the fact once
(``view_only``), ``specctl status`` and the console's banner say it, and every
steering command is refused with the same sentence. Only the fix differs: a
server without speculation needs a draft model as well as the plugin, a tree
server a chain draft. The
supervisor, the CLI and the console read the reason from a sample with
:func:`reason`, so they cannot disagree. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from specctl.runtime.core.records import whole
from specctl.runtime.core.tree_drafts import SERVER_FIX, TOPK_FLAG

Reason = Literal["no_plugin", "no_speculation", "tree"]
NO_PLUGIN: Final = "no_plugin"
NO_SPECULATION: Final = "no_speculation"
TREE: Final = "tree"

HEADLINES: Final[dict[str, str]] = {
    NO_PLUGIN: "view only: this server runs without the specctl plugin",
    NO_SPECULATION: "view only: this server runs without speculation, so specctl can watch it but not steer it",
    TREE: f"view only: this server drafts a tree ({TOPK_FLAG} > 1), which specctl cannot switch off",
}


def reason(sample: Mapping[str, Any] | None) -> Reason | None:
    """Why a sample's server is view only, or None when it is not (or is not ready, so nobody knows yet).

    View only: ready, and no specctl state (``spec`` null). ``server.speculative`` false (its
    /server_info's ``speculative_algorithm`` is null) says why: no speculation at all; else
    ``server.topk`` above 1: a tree draft.
    """
    if not sample:
        return None
    server = sample.get("server") or {}
    if server.get("state") != "ready" or sample.get("spec"):
        return None
    if server.get("speculative") is False:
        return NO_SPECULATION
    return TREE if whole(server.get("topk"), least=2) else NO_PLUGIN


def headline(why: str) -> str:
    """The banner's words: what the server is, in one clause."""
    return HEADLINES.get(why, HEADLINES[NO_PLUGIN])


def fix(why: str, tp: object = None) -> str:
    """What to change so specctl can steer it: the launch line ``specctl sglang-args`` prints.

    The hint names ``--tp`` where the server runs tensor-parallel, so the printed line matches it: a bare
    ``specctl sglang-args`` prints ``--tp-size 1``, which on an 8-GPU server would override its own and
    not even load the model. A server without speculation has no draft model to keep, so its hint names
    ``--draft``; a tree server's names the chain's flags, which replace the tree's.
    """
    tp_arg = f" --tp {tp}" if whole(tp, least=2) else ""
    if why == TREE:
        return (f"{SERVER_FIX} in place of the tree's three, and the environment and flags "
                f"`specctl sglang-args{tp_arg} --steps 3` prints (docs/topk.md)")
    if why != NO_SPECULATION:
        return (f"relaunch it with the environment and flags `specctl sglang-args{tp_arg}` prints "
                "(docs/deployment.md)")
    return (f"add to its launch line what `specctl sglang-args{tp_arg} --draft DRAFT_MODEL` prints "
            "(--speculative-algorithm EAGLE3 with an EAGLE-3 draft model, and the plugin's environment; "
            "docs/deployment.md)")


def refusal(why: str, tp: object = None) -> str:
    """The one line a steering command gets (force-on, force-off, auto, set): what, then the fix."""
    return f"{headline(why)}; {fix(why, tp)}"
