"""``specctl sglang-args``: what to add to one's own ``python -m sglang.launch_server`` line.

Operators start SGLang from systemd units, Kubernetes manifests and their own
scripts, not from specctl. This prints the environment and the flags that
put the specctl plugin in charge of such a server, and writes the adaptive
config those flags name, so a deployment needs no other change and
``specctl run --attach URL`` can then steer it. The flags and the environment
are the ones specctl itself launches with (launcher.build_command,
launcher.launch_env); nothing here spells them a second time.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from specctl.console.cli.exit_codes import EXIT_OK, EXIT_USAGE
from specctl.runtime.core.adaptive_config import write_config
from specctl.runtime.core.settings import MAX_BATCH, PolicySettings, SettingsError, check_fields, floor_for_steps
from specctl.runtime.core.thresholds import (
    BY_BACKEND,
    MEASURED_ON,
    MEASURED_WITH,
    MOE_BY_BACKEND,
    for_server,
    for_tree_server,
    unset_groups,
)
from specctl.runtime.core.tree_drafts import flag_in_args, tree_problem
from specctl.runtime.supervisor import config, config_file, paths
from specctl.runtime.supervisor.edges import no_depth_costs_line
from specctl.runtime.supervisor.launcher import FLASHINFER_WORKSPACE_ENV, build_command, launch_env

# Backends an operator may name whose thresholds are not measured yet (they get the policy's
# defaults). None: FlashInfer, SGLang's default below Hopper (the RTX PRO 6000 of the
# report), has a row, measured on one H200 (docs/benchmarks.md).
UNMEASURED_BACKENDS: tuple[str, ...] = ()

#: The flags of build_command that are the operator's own (their model, address), left off the printout.
OWN_FLAGS = ("--model-path", "--host", "--port")
DRAFT_FLAG = "--speculative-draft-model-path"
FORMATS = ("shell", "systemd", "json")
#: The speculative flags of an operator's own line that the printed ones replace: a tree's topk 4 and
#: 16 draft tokens cannot stay beside the chain's (SGLang keeps the last of a repeated flag; docs/sglang-plugin.md).
SPEC_FLAGS = ("--speculative-algorithm", "--speculative-eagle-topk", "--speculative-num-steps",
              "--speculative-num-draft-tokens")
REPLACING = (f"in place of your own {', '.join(SPEC_FLAGS)} "
             "(specctl steers a chain, topk 1: a tree's topk and draft tokens must go, docs/sglang-plugin.md)")
TREE_REPLACING = (f"in place of your own {', '.join(SPEC_FLAGS)} (the tree's, with the opt-in in the "
                  "environment; on SGLang 0.5.23 keep --page-size 1, docs/sglang-plugin.md)")
WITHOUT = f"without your own {'/'.join(SPEC_FLAGS)}"


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    text = "print the environment and flags that put specctl in charge of your own SGLang launch"
    p = sub.add_parser("sglang-args", help=text, description=text[0].upper() + text[1:] + ". "
                       "Add them to your `python -m sglang.launch_server` line (systemd, Kubernetes, "
                       "a script), then `specctl run --headless --attach URL` on the same host "
                       "(docs/deployment.md).")
    p.add_argument("--steps", type=int, default=3, help="draft steps when speculation is on (default 3)")
    p.add_argument("--tp", type=int, default=None,
                   help="tensor-parallel size: prints --tp-size N (default: none printed; your line's own is kept)")
    p.add_argument("--topk", type=int, default=1,
                   help="1 (default) drafts a chain; more keeps your tree under specctl's switch (opt-in, "
                        "proven on Triton with SGLang 0.5.17: docs/sglang-plugin.md), with --draft-tokens")
    p.add_argument("--draft-tokens", type=int, metavar="T",
                   help="the tree's --speculative-num-draft-tokens (with --topk above 1; a chain has steps + 1)")
    p.add_argument("--backend", choices=sorted({*BY_BACKEND, *UNMEASURED_BACKENDS}),
                   help="attention backend: adds --attention-backend and, with --gpu, the thresholds "
                   f"measured for it (each on one {MEASURED_ON}) (default: SGLang's choice)")
    p.add_argument("--gpu", metavar="NAME", help="the server's GPU as nvidia-smi names it, e.g. "
                   f"'NVIDIA {MEASURED_ON}': a backend's thresholds apply only on the GPU they were "
                   "measured on; elsewhere the policy's defaults are printed")
    p.add_argument("--experts", metavar="N", help="the target's routed experts (num_experts, num_local_experts, "
                   "n_routed_experts or, for DBRX, ffn_config's moe_num_experts in its config.json; 0 for a "
                   "dense model): a backend's thresholds were measured on a dense model, and for a MoE on "
                   f"{', '.join(sorted(MOE_BY_BACKEND))} only, so for a MoE that row is printed there and the "
                   "policy's defaults elsewhere")
    p.add_argument("--draft", metavar="PATH", help="EAGLE-3 draft model (default: keep your own "
                   f"{DRAFT_FLAG})")
    p.add_argument("--config", metavar="FILE", type=Path,
                   help="where to write the adaptive config (default: STATE_DIR/adaptive-steps-N.json); "
                        "the server must be able to read it")
    p.add_argument("--speculative-candidate-steps", metavar="0,1,2,3", dest="candidate_steps",
                   help="draft depths auto chooses among, each built at start (default: 0 and --steps); "
                        "written into the adaptive config, as SGLang builds only the depths it lists")
    p.add_argument("--depth-costs", metavar="FILE.json",
                   help="step time per (batch, depth) the depth choice prices with (docs/policy.md); "
                        "the server must be able to read it")
    p.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                   help="a policy setting the server starts with, e.g. --set off_at=48 (repeatable)")
    p.add_argument("--format", choices=FORMATS, default="shell",
                   help="shell (export lines and flags), systemd (Environment= lines) or json")
    p.add_argument("line", nargs=argparse.REMAINDER, metavar="-- LAUNCH LINE",
                   help="your own launch line after --: printed edited, specctl's speculative flags in place "
                        "of yours, everything else (--tp-size, --attention-backend, ...) kept, nothing twice")


def run(args: argparse.Namespace) -> int:
    own = list(args.line or [])
    if own and own[0] == "--":
        own = own[1:]
    theirs = _their_backend(own)
    if theirs is not None:
        if args.backend is not None and args.backend != theirs:
            return _usage(f"--backend {args.backend} and your line's --attention-backend {theirs} disagree: "
                          "drop one (your line's is kept)")
        if theirs in BY_BACKEND or theirs in UNMEASURED_BACKENDS:
            args.backend = theirs  # its thresholds, as if named
    if own and args.tp is not None and (their_tp := flag_in_args(own, "--tp-size")) not in (None, str(args.tp)):
        return _usage(f"--tp {args.tp} and your line's --tp-size {their_tp} disagree: drop one (your line's is kept)")
    try:
        from_file = _file_policy()
        settings = _settings(args, _experts(args.experts), from_file)
    except (config.ConfigError, SettingsError, ValueError) as exc:
        return _usage(str(exc))
    if args.tp is not None and args.tp < 1:
        return _usage(f"--tp must be at least 1, got {args.tp}")
    if problem := _tree_problem(args, settings):
        return _usage(problem)
    costs = Path(args.depth_costs).expanduser().absolute() if args.depth_costs else None
    if costs is not None:
        try:
            config.check_depth_costs(costs, settings)  # as run does: the server would refuse it after loading
        except config.ConfigError as exc:
            return _usage(str(exc))
    path = (args.config or paths.state_dir() / _config_name(settings)).expanduser().absolute()
    try:
        flags = _flags(args, path)
    except ValueError as exc:  # build_command's own checks (steps below 1, ...)
        return _usage(str(exc))
    try:
        # the settings' depths, not only {0, steps}: the plugin refuses a candidate SGLang did not build
        # 0644: written as root for a server that runs as its own user, which must be able to read it; the mode
        # is set on the descriptor before the rename, never by path (a swapped symlink would carry it elsewhere)
        write_config(path, args.steps, candidates=settings.candidates, mode=0o644)
    except OSError as exc:
        return _usage(f"cannot write the adaptive config at {path}: {exc.strerror or exc}")
    if costs is None and any(0 < d < settings.steps for d in settings.candidates):
        line = no_depth_costs_line(settings.steps, [d for d in settings.candidates if d > 0], launched=True)
        print(f"specctl sglang-args: {line}", file=sys.stderr)
    if from_file:  # said once, and only for a printout: a refusal stays one line
        print(f"specctl sglang-args: [policy] read from {paths.config_file()}, as specctl run reads it "
              "(--set overrides it)", file=sys.stderr)
    env = launch_env(settings, os.environ, str(costs) if costs else None, tree=args.topk > 1)
    if FLASHINFER_WORKSPACE_ENV in os.environ:  # the operator's size, kept: a unit or manifest must carry it too
        env[FLASHINFER_WORKSPACE_ENV] = os.environ[FLASHINFER_WORKSPACE_ENV]
    if args.backend is not None and args.backend != "flashinfer":  # only FlashInfer's backend reads it
        env.pop(FLASHINFER_WORKSPACE_ENV, None)
    words = policy_words(settings)
    if own:
        print(_render_line(args.format, env, edit_line(own, flags), path, words))
    else:
        print(_render(args.format, env, flags, path, tree=args.topk > 1, words=words))
    return EXIT_OK


def policy_words(settings: PolicySettings) -> str:
    """The thresholds in words, where a number is a sentinel: off_at 1048576 is "never off for load"."""
    if settings.off_at >= MAX_BATCH:
        load = "never off for load (off_at at its ceiling)"
    else:
        load = f"off at a decode batch of {settings.off_at} or more, on again at {settings.on_at} or fewer"
    floor = f"{settings.min_accept:g}" + (f" + {settings.accept_slope:g} x batch" if settings.accept_slope else "")
    accept = ("no acceptance floor" if not settings.min_accept and not settings.accept_slope
              else f"off below {floor} accepted draft tokens a verify")
    return f"policy: {load}; {accept}; {settings.steps} draft step{'s' * (settings.steps != 1)} when on"


# The flags of build_command that take a value (the others are switches): a line's own are dropped with it.
_VALUED = {"--speculative-algorithm", "--speculative-draft-model-path", "--speculative-num-steps",
           "--speculative-eagle-topk", "--speculative-num-draft-tokens", "--speculative-adaptive-config",
           "--tp-size", "--attention-backend", "--model-path", "--host", "--port", "--config"}
# Theirs where they have one: the GPUs their server runs on, and the backend they chose.
_KEPT = ("--tp-size", "--attention-backend")


def _flag_of(word: str) -> str | None:
    return word.split("=", 1)[0] if word.startswith("--") else None


def _their_backend(line: list[str]) -> str | None:
    return flag_in_args(line, "--attention-backend")


def edit_line(line: list[str], flags: list[str]) -> list[str]:
    """``line`` with specctl's speculative flags in place of its own, each flag once.

    Their --tp-size and --attention-backend stay where they have them (ours are added only where
    they have none); every other flag of ours replaces theirs, in either form (``--flag V``,
    ``--flag=V``); a tree's flags of theirs (SPEC_FLAGS) go even where ours has none.
    """
    ours: dict[str, list[str]] = {}
    i = 0
    while i < len(flags):
        flag = flags[i]
        takes = flag in _VALUED and i + 1 < len(flags)
        ours[flag] = flags[i:i + 2] if takes else [flag]
        i += 2 if takes else 1
    has = {_flag_of(w) for w in line}
    for kept in _KEPT:
        if kept in has:
            ours.pop(kept, None)
    replaced = (set(ours) | set(SPEC_FLAGS)) - set(_KEPT)
    out: list[str] = []
    i = 0
    while i < len(line):
        word = line[i]
        flag = _flag_of(word)
        if flag in replaced:
            i += 2 if ("=" not in word and flag in _VALUED) else 1
            continue
        out.append(word)
        i += 1
    for words in ours.values():
        out += words
    return out


def _render_line(fmt: str, env: dict[str, str], command: list[str], path: Path, words: str) -> str:
    """The operator's own line, edited, with the environment in front."""
    if fmt == "json":
        return json.dumps({"env": env, "command": command, "adaptive_config": str(path), "policy": words}, indent=2)
    line = " ".join(shlex.quote(w) for w in command)
    if fmt == "systemd":
        env_lines = [f'Environment="{k}={v.replace(chr(34), chr(92) + chr(34))}"' for k, v in env.items()]
        return "\n".join([f"# adaptive config written to {path}", f"# {words}", "# [Service] lines:", *env_lines,
                          f"ExecStart={line}"])
    front = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return "\n".join([f"# adaptive config written to {path} (the server must be able to read it)",
                      "# the server's Python needs specctl installed: SGLang finds the plugin by its entry point",
                      f"# {words}", f"{front} {line}",
                      "# then, on the same host: specctl run --attach http://127.0.0.1:PORT"])


def _tree_problem(args: argparse.Namespace, settings: PolicySettings) -> str | None:
    """Why these options cannot print a tree under the switch; None for a chain or a tree that can run.

    A tree switches between its launch state and off only: SGLang builds every other depth as a
    chain (the plugin refuses other candidates at start-up), and the depth model prices chains.
    """
    return tree_problem(args.steps, args.topk, args.draft_tokens, settings.candidates, bool(args.depth_costs),
                        ("--topk", "--draft-tokens", "--speculative-candidate-steps"))


def _config_name(settings: PolicySettings) -> str:
    """The default file: one per depth set, so two deployments' lines never rewrite each other's."""
    if not settings.candidates:
        return f"adaptive-steps-{settings.steps}.json"
    return f"adaptive-steps-{settings.steps}-depths-{'-'.join(map(str, settings.candidates))}.json"


def _experts(text: str | None) -> int | None:
    """``--experts``: a count of routed experts (0 dense), or None where not given."""
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"--experts must be a whole number of routed experts (0 for a dense model), "
                         f"got {text!r}") from None
    if value < 0:
        raise ValueError(f"--experts must be 0 (a dense model) or more, got {value}")
    return value


def _settings(args: argparse.Namespace, experts: int | None, from_file: dict[str, Any]) -> PolicySettings:
    """Policy defaults, then the backend's thresholds measured on this GPU and model class, then the config
    file's [policy], then the operator's --set: the order specctl run applies them in.

    A row that does not apply is said on stderr, once: the printout stays what a shell evaluates.
    Without --experts the row is printed, as the supervisor applies it where a server does
    not say its class (thresholds.for_server), and stderr says how to check.
    """
    chosen = {**from_file, **config.parse_pairs(args.settings)}  # as run: the file, then --set over it
    if args.candidate_steps is not None:
        chosen["candidates"] = args.candidate_steps
    file_steps = "steps" in from_file and "steps" not in config.parse_pairs(args.settings)
    rows = for_tree_server if args.topk > 1 else for_server  # a tree's verify costs more: its crossover is lower
    measured, why_not = rows(args.backend, [args.gpu] if args.gpu else [], chosen, experts=experts)
    if args.topk > 1:
        why_not = why_not and why_not.replace("the policy's defaults stay", "the policy's defaults are printed")
    elif why_not is not None and args.gpu is None:
        # Would --gpu help? Not for a MoE on a backend with no MoE row, which stays off on an H200 too:
        # then that is the reason to give, not a hint that leads to a second refusal.
        _, still = for_server(args.backend, [f"NVIDIA {MEASURED_ON}"], chosen, experts=experts)
        why_not = still or (f"the {args.backend} thresholds were measured on an {MEASURED_ON}: add --gpu "
                            f"'NVIDIA {MEASURED_ON}' if the server runs on one; the policy's defaults are printed")
    if measured is not None and experts is None and unset_groups(measured, chosen):
        tree = args.topk > 1  # a tree's row has no MoE twin
        instead = ("the thresholds measured on a MoE" if args.backend in MOE_BY_BACKEND and not tree
                   else "the policy's defaults")
        why_not = (f"the {args.backend} {'tree ' * tree}thresholds were measured on a {MEASURED_WITH} model and are "
                   f"printed: if the target is a MoE, add --experts N (its config's routed experts) for {instead}")
    if why_not is not None:
        print(f"specctl sglang-args: {why_not}", file=sys.stderr)
    # the row's groups the operator left wholly alone, as the supervisor applies them: no half pair
    applied = unset_groups(measured, chosen) if measured else {}
    # one change set: PolicySettings at --steps 1 with the default floor alone is refused before --set min_accept
    changes = {**applied, "steps": args.steps, **chosen}
    given = check_fields(changes)
    told = (f"{paths.config_file()}: [policy] steps = {given['steps']}" if file_steps
            else f"--set steps={given['steps']}")
    if problem := config.launch_depth_problem(args.steps, given.get("candidates", ()), given["steps"], "--steps",
                                              told):
        raise ValueError(problem + (f", or take steps = {given['steps']} out of [policy]" if file_steps else ""))
    try:
        return PolicySettings().with_changes(changes)
    except SettingsError as exc:
        if exc.field != "min_accept" or "min_accept" in chosen:
            raise
    # a floor the operator never gave that this depth cannot meet: the default scaled to the depth instead
    source = f"the {args.backend} thresholds'" if "min_accept" in applied else "the default"
    floor = floor_for_steps(given["steps"])
    print(f"specctl sglang-args: min_accept {floor:g}: {source} acceptance floor "
          f"{applied.get('min_accept', PolicySettings.min_accept):g} is more than {given['steps']} draft "
          f"step{'s' * (given['steps'] != 1)} can accept, so the default scaled to the depth is printed "
          "(--set min_accept=... to choose another)", file=sys.stderr)
    return PolicySettings().with_changes({**changes, "min_accept": floor})


def _file_policy() -> dict[str, Any]:
    """The config file's ``[policy]``, found and read as ``specctl run`` reads it (``$SPECCTL_CONFIG``, else
    the config dir's specctl.toml), so what is printed is what run would start with.

    Why: an operator with a site config was printed one policy here and given another by run.
    There is no flag for the file: run has none, and this command's ``--config`` is the adaptive config it writes.
    """
    try:
        policy = config_file.load().policy
    except config_file.ConfigFileError as exc:
        raise ValueError(str(exc)) from None
    return policy


def _flags(args: argparse.Namespace, path: Path) -> list[str]:
    """build_command's line less the interpreter, the module and the operator's own flags."""
    draft = args.draft or "DRAFT"
    line = build_command("MODEL", draft, args.tp or 1, args.steps, 0, "HOST", str(path), python="python",
                         topk=args.topk, draft_tokens=args.draft_tokens)
    flags = line[line.index("sglang.launch_server") + 1:]
    # --tp-size only where asked: a printed --tp-size 1 after an 8-GPU line's own made it TP 1
    drop = set(OWN_FLAGS) | (set() if args.draft else {DRAFT_FLAG}) | (set() if args.tp else {"--tp-size"})
    out: list[str] = []
    skip = False
    for word in flags:
        if skip:
            skip = False
            continue
        if word in drop:
            skip = True  # and its value
            continue
        out.append(word)
    if args.backend:
        out += ["--attention-backend", args.backend]
    return out


def _render(fmt: str, env: dict[str, str], flags: list[str], path: Path, tree: bool = False, words: str = "") -> str:
    if fmt == "json":
        return json.dumps({"env": env, "args": flags, "adaptive_config": str(path), "policy": words}, indent=2)
    replacing = TREE_REPLACING if tree else REPLACING
    line = " ".join(shlex.quote(f) for f in flags)
    if DRAFT_FLAG not in flags:
        line += f"  # and keep your own {DRAFT_FLAG} (or pass --draft)"
    if fmt == "systemd":
        env_lines = [f'Environment="{k}={v.replace(chr(34), chr(92) + chr(34))}"' for k, v in env.items()]
        return "\n".join([f"# adaptive config written to {path}", f"# {words}", "# [Service] lines:", *env_lines,
                          f"# append to ExecStart=... -m sglang.launch_server <your flags, {WITHOUT}>:", line])
    return "\n".join([f"# adaptive config written to {path} (the server must be able to read it)",
                      "# the server's Python needs specctl installed: SGLang finds the plugin by its entry point",
                      f"# {words}", "# environment of the server process:",
                      *[f"export {k}={shlex.quote(v)}" for k, v in env.items()],
                      f"# add to your python -m sglang.launch_server line, {replacing}:", line,
                      "# then, on the same host: specctl run --headless --attach http://127.0.0.1:PORT"])


def _usage(message: str) -> int:
    print(f"specctl sglang-args: {message}", file=sys.stderr)
    return EXIT_USAGE
