"""What specctl can do for a server that drafts a tree (``--speculative-eagle-topk`` > 1).

SGLang's adaptive machinery, which the plugin steers, builds every runtime
state as a chain (steps + 1 draft tokens) and refuses topk > 1
(``adaptive_unsupported_reason`` in 0.5.17 and 0.5.23; docs/topk.md has the
source). So specctl cannot switch a tree server's speculation off; it can
watch one (``--attach``), and it can run the same model with a chain draft,
which on the report's system is modelled to beat the static tree at every
load. The plugin's start-up refusal and ``specctl run``/``tui`` say this in
the same words, from here. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

TOPK_FLAG = "--speculative-eagle-topk"
CHAIN_FLAGS = "--speculative-eagle-topk 1 --speculative-num-steps 3 --speculative-num-draft-tokens 4"


SERVER_FIX = f"launch with {CHAIN_FLAGS}"
# specctl run already passes the chain flags (topk 1, --speculative-num-steps N, N+1 draft tokens);
# the operator's arguments after -- come last and override them: the tree's steps too (its 2 against the
# adaptive config specctl wrote for N), so all three go, and the steps are specctl's own option
RUN_FIX = (f"drop {TOPK_FLAG}, --speculative-num-steps and --speculative-num-draft-tokens after -- "
           "(specctl launches topk 1 at its own --speculative-num-steps N, before --)")


def topk_refusal(topk: object, fix: str = SERVER_FIX) -> str:
    """One line: why a tree server cannot be steered, what specctl still does, what to change."""
    return (f"{TOPK_FLAG} must be 1, got {topk}: specctl switches speculation off only for a chain draft "
            f"(SGLang's adaptive machinery refuses trees); a topk-{topk} server it can only watch "
            f"(specctl tui --attach URL). To have speculation off under load, {fix} (docs/topk.md)")


def topk_in_args(args: Sequence[str]) -> str | None:
    """The topk that SGLang launcher arguments ask for (the last one wins, as argparse does); None if unset."""
    found = None
    for i, arg in enumerate(args):
        if arg == TOPK_FLAG and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(TOPK_FLAG + "="):
            found = arg.split("=", 1)[1]
    return found


def tree_args_problem(args: Sequence[str]) -> str | None:
    """The refusal for launcher arguments that ask for a tree draft; None for topk 1 or unset.

    A value that is not a number is left to SGLang's own parser, which names it.
    """
    value = topk_in_args(args)
    if value is None:
        return None
    try:
        topk = int(value)
    except ValueError:
        return None
    return topk_refusal(topk, RUN_FIX) if topk > 1 else None
