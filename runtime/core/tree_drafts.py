"""What specctl can do for a server that drafts a tree (``--speculative-eagle-topk`` > 1).

SGLang's adaptive machinery, which the plugin steers, builds every runtime
state as a chain (steps + 1 draft tokens) and refuses topk > 1
(``adaptive_unsupported_reason`` in 0.5.17 and 0.5.23; docs/sglang-plugin.md, "Tree drafts" has the
source). Two ways out, and an operator is told both: the same model with a
chain draft (modelled to beat the static tree at every load on the report's
system), or the tree kept under specctl's switch, an opt-in
(``SPECCTL_TREE_SWITCH=1``: the plugin's tree_switch hooks; proven on one
H200 with Triton and SGLang 0.5.17) that switches between the launch's tree
and off only. Without either, specctl can watch a tree server (``--attach``).
The plugin's start-up refusal, ``specctl run``/``tui`` and ``specctl
sglang-args`` say this in the same words, from here. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from specctl.runtime.core.wire import env_flag

TOPK_FLAG = "--speculative-eagle-topk"
TOKENS_FLAG = "--speculative-num-draft-tokens"
CHAIN_FLAGS = "--speculative-eagle-topk 1 --speculative-num-steps 3 --speculative-num-draft-tokens 4"


#: The plugin's opt-in for a tree under the switch (runtime/sglang_plugin/tree_switch.py reads it).
TREE_SWITCH_ENV = "SPECCTL_TREE_SWITCH"

SERVER_FIX = f"launch with {CHAIN_FLAGS}"
# specctl run already passes the chain flags (topk 1, --speculative-num-steps N, N+1 draft tokens);
# the operator's arguments after -- come last and override them: the tree's steps too (its 2 against the
# adaptive config specctl wrote for N), so all three go, and the steps are specctl's own option
RUN_FIX = (f"drop {TOPK_FLAG}, --speculative-num-steps and --speculative-num-draft-tokens after -- "
           "(specctl launches topk 1 at its own --speculative-num-steps N, before --)")


def keep_tree(topk: object, steps: object = "N", tokens: object = "T", tp: object = None) -> str:
    """The other way out: the tree under specctl's switch, and the command that prints its launch.

    ``tp`` where the server runs tensor-parallel: the printout's ``--tp-size 1`` would override its own.
    """
    tp_arg = f" --tp {tp}" if isinstance(tp, int) and tp > 1 else ""
    return (f"or keep the tree under specctl's switch (opt-in: {TREE_SWITCH_ENV}=1 and an adaptive config of "
            f"steps 0 and {steps}; specctl sglang-args{tp_arg} --steps {steps} --topk {topk} --draft-tokens "
            f"{tokens} prints both for a server you start, then attach to)")


def run_keeps_tree(topk: object, steps: object = "N", tokens: object = "T") -> str:
    """``specctl run``'s way to keep the tree: its own flags before --, which launch it under the switch."""
    return (f"or keep the tree under specctl's switch (opt-in): give specctl --speculative-num-steps {steps} "
            f"{TOPK_FLAG} {topk} {TOKENS_FLAG} {tokens} before --")


def topk_refusal(topk: object, fix: str = SERVER_FIX, steps: object = "N", tokens: object = "T",
                 keep: str | None = None) -> str:
    """One line: why a tree server cannot be steered as launched, what specctl still does, what to change.

    ``keep``: how this command keeps the tree instead (default: the printout of sglang-args).
    """
    return (f"{TOPK_FLAG} must be 1, got {topk}: specctl switches speculation off for a chain draft, and for a "
            f"tree only with {TREE_SWITCH_ENV}=1 (SGLang's adaptive machinery refuses trees); without it a "
            f"topk-{topk} server it can only watch (specctl tui --attach URL). To have speculation off under "
            f"load, {fix}, {keep or keep_tree(topk, steps, tokens)} (docs/sglang-plugin.md)")


def tree_switch_enabled(environ: Mapping[str, str]) -> bool:
    """Whether a server's environment opts in to the tree switch (the plugin reads it; the simulator too)."""
    return env_flag(environ.get(TREE_SWITCH_ENV), False)


def tree_problem(steps: int, topk: int, tokens: int | None, candidates: Sequence[int], costs: bool,
                 flags: tuple[str, str, str] = (TOPK_FLAG, TOKENS_FLAG, "--speculative-candidate-steps")) -> str | None:
    """Why a launch of a chain or tree with these cannot run, naming the caller's flags (topk, draft tokens,
    candidates); None if it can. ``costs``: a depth-cost table is given, which prices a chain's depths only."""
    return (tree_launch_problem(steps, topk, tokens, flags[0], flags[1])
            or tree_depths_problem(topk, steps, candidates, flags[2])
            or (tree_costs_problem(topk) if topk > 1 and costs else None))


def tree_depths_problem(topk: int, steps: int, candidates: Sequence[int], flag: str) -> str | None:
    """Why a tree cannot have these candidate depths (named by the caller's ``flag``); None if it can.

    A tree switches between its launch depth and off only: SGLang would build every other
    depth as a chain, and the plugin refuses them at start-up (tree_switch.tree_problem).
    """
    if topk <= 1 or sorted(candidates) in ([], [0, steps]):
        return None
    return (f"a tree ({TOPK_FLAG} {topk}) switches between its launch depth and off only: {flag} must be "
            f"0,{steps} or left out, got {','.join(map(str, candidates))} (SGLang would build other depths as chains)")


def tree_costs_problem(topk: int) -> str:
    """Why a tree takes no depth-cost table."""
    return (f"--depth-costs prices draft depths of a chain; a tree ({TOPK_FLAG} {topk}) has one depth and off, "
            "which the on/off rules choose between")


def most_draft_tokens(steps: int, topk: int) -> int:
    """The tokens a tree's draft steps produce, the root included: SGLang keeps its draft tokens among them."""
    return 1 + topk + (steps - 1) * topk * topk if steps > 0 else 1


def tree_launch_problem(steps: int, topk: int, tokens: int | None, topk_flag: str = TOPK_FLAG,
                        tokens_flag: str = TOKENS_FLAG) -> str | None:
    """Why a launch of these three cannot run, naming the caller's flags (SGLang's by default); None if it can.

    A chain (topk 1) has steps + 1 draft tokens, which SGLang sets itself; a tree names its own,
    at least 2 (the root and one draft) and at most what its draft steps produce (SGLang picks
    them by score from those and fails at the first draft if there are too few).
    """
    if topk < 1:
        return f"{topk_flag} must be 1 (a chain) or more (a tree), got {topk}"
    if topk == 1:
        if tokens not in (None, steps + 1):
            return (f"{tokens_flag} is for a tree ({topk_flag} above 1); a chain of {steps} steps has "
                    f"{steps + 1}, got {tokens}")
        return None
    most = most_draft_tokens(steps, topk)
    if tokens is None:
        return f"a tree ({topk_flag} {topk}) needs {tokens_flag} (2 to {most} at {steps} steps)"
    if not 2 <= tokens <= most:
        return (f"{tokens_flag} must be between 2 and {most} for a tree of topk {topk} at {steps} steps "
                f"(the 1 + topk + (steps - 1) x topk^2 tokens its draft produces), got {tokens}")
    return None


def flag_in_args(args: Sequence[str], flag: str = TOPK_FLAG) -> str | None:
    """The value SGLang launcher arguments give a flag (the last one wins, as argparse does); None if unset."""
    found = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(flag + "="):
            found = arg.split("=", 1)[1]
    return found


def tree_args_problem(args: Sequence[str]) -> str | None:
    """The refusal for launcher arguments that ask for a tree draft; None for topk 1 or unset.

    A value that is not a number is left to SGLang's own parser, which names it.
    """
    value = flag_in_args(args)
    if value is None:
        return None
    try:
        topk = int(value)
    except ValueError:
        return None
    steps, tokens = flag_in_args(args, "--speculative-num-steps"), flag_in_args(args, TOKENS_FLAG)
    steps, tokens = steps or "N", tokens or "T"
    return topk_refusal(topk, RUN_FIX, keep=run_keeps_tree(topk, steps, tokens)) if topk > 1 else None
