"""What specctl says about a server it can watch but not steer, and why: the one place for those words.

A ready server whose /server_info carries no specctl block cannot be steered:
it runs speculation without the plugin (a static EAGLE-3 launch), or it drafts
a tree (topk > 1, which the plugin refuses and SGLang's adaptive machinery
cannot switch off: docs/sglang-plugin.md, "Tree drafts"), or it was launched without speculation at
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
from specctl.runtime.core.tree_drafts import SERVER_FIX, TOPK_FLAG, keep_tree

Reason = Literal["no_plugin", "no_speculation", "tree"]
NO_PLUGIN: Final = "no_plugin"
NO_SPECULATION: Final = "no_speculation"
TREE: Final = "tree"

HEADLINES: Final[dict[str, str]] = {
    NO_PLUGIN: "view only: this server runs without the specctl plugin",
    NO_SPECULATION: "view only: this server runs without speculation, so specctl can watch it but not steer it",
    TREE: f"view only: this server drafts a tree ({TOPK_FLAG} > 1) without specctl's tree switch, so specctl "
          "cannot switch it off",
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


def command(why: str, tp: object = None, draft: str = "DRAFT_MODEL") -> str:
    """The ``specctl sglang-args`` line whose output fixes it, with the server's own facts.

    ``--tp`` where the server runs tensor-parallel: a bare ``specctl sglang-args`` prints ``--tp-size 1``,
    which on an 8-GPU server would override its own and not even load the model. A tree server's chain
    runs ``--steps 3`` (the chain flags of :data:`SERVER_FIX`); a server without speculation needs
    ``--draft``. :func:`fix` and :func:`note` both say this one, so the long and short words agree.
    """
    tp_arg = f" --tp {tp}" if whole(tp, least=2) else ""
    extra = {TREE: " --steps 3", NO_SPECULATION: f" --draft {draft}"}.get(why, "")
    return f"specctl sglang-args{tp_arg}{extra}"


def fix(why: str, tp: object = None) -> str:
    """What to change so specctl can steer it: the launch line :func:`command` prints.

    A server without speculation has no draft model to keep, so its hint names ``--draft``; a tree
    server's names the chain's flags, which replace the tree's.
    """
    line = command(why, tp)
    if why == TREE:
        return (f"{SERVER_FIX} in place of the tree's three, and the environment and flags "
                f"`{line}` prints, {keep_tree('K', tp=tp if whole(tp, least=2) else None)} (docs/sglang-plugin.md)")
    if why != NO_SPECULATION:
        return f"relaunch it with the environment and flags `{line}` prints (docs/deployment.md)"
    return (f"add to its launch line what `{line}` prints "
            "(--speculative-algorithm EAGLE3 with an EAGLE-3 draft model, and the plugin's environment; "
            "docs/deployment.md)")


NOTE_WIDTH: Final = 80
#: The short fix, fullest first; ``{cmd}`` is :func:`command`'s line. :func:`note` takes the first that fits.
NOTES: Final[dict[str, tuple[str, ...]]] = {
    NO_PLUGIN: ("fix: relaunch it with what `{cmd}` prints (docs/deployment.md)",
                "fix: relaunch as `{cmd}` prints (docs/deployment.md)",
                "fix: relaunch with what `{cmd}` prints"),
    NO_SPECULATION: ("fix: relaunch with a draft: `{cmd}` prints how",
                     "fix: add a draft: `{cmd}` prints how"),
    TREE: ("fix: relaunch as a chain (topk 1): `{cmd}` prints how",
           "fix: relaunch as a chain: `{cmd}` prints how"),
}


def note(why: str, tp: object = None, width: int = NOTE_WIDTH) -> str:
    """The fix in one line of at most ``width`` characters (the console's line above its footer).

    It names the same command as :func:`fix`, ``--tp`` included, in the fullest words that fit; where
    none do (a very wide TP size, a narrow line), the command alone, the shortest true thing.
    """
    for draft in ("DRAFT_MODEL", "DRAFT"):
        line = command(why, tp, draft)
        for words in NOTES.get(why, NOTES[NO_PLUGIN]):
            if len(said := words.format(cmd=line)) <= width:
                return said
    return f"fix: `{line}`" if len(line) + 7 <= width else line


def refusal(why: str, tp: object = None) -> str:
    """The one line a steering command gets (force-on, force-off, auto, set): what, then the fix."""
    return f"{headline(why)}; {fix(why, tp)}"
