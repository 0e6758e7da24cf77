"""The ``specctl`` command line.

Parsing only: every verb lives in its own module, imported when chosen, so
``specctl status`` and ``specctl run --headless`` never import Textual.
Exit codes (one rule for every verb, EXIT_RULE): 0 ok, 1 refused for the server's state,
2 malformed or out of range, 3 no supervisor to talk to.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import fields

from specctl import __version__
from specctl.runtime.core.settings import PolicySettings


def _add_server_args(p: argparse.ArgumentParser) -> None:
    """Arguments that choose and shape the model server a supervisor runs."""
    g = p.add_argument_group("model server (default: the embedded simulator)")
    g.add_argument("--model", help="target model path: launch a real SGLang server")
    g.add_argument("--draft", help="EAGLE-3 draft model path (with --model)")
    g.add_argument("--tp", type=int, default=1, help="tensor-parallel size (default 1)")
    g.add_argument("--speculative-num-steps", type=int, dest="spec_steps",
                   help="draft steps when speculation is on (default 3; the simulator's: its preset's)")
    g.add_argument("--speculative-eagle-topk", type=int, dest="topk", metavar="K",
                   help="with --model: above 1 launches a tree draft under specctl's switch (opt-in, proven on "
                        "Triton with SGLang 0.5.17; docs/sglang-plugin.md), with --speculative-num-draft-tokens")
    g.add_argument("--speculative-num-draft-tokens", type=int, dest="draft_tokens", metavar="T",
                   help="with --model and --speculative-eagle-topk above 1: the tree's draft tokens")
    g.add_argument("--speculative-candidate-steps", metavar="0,1,2,3", dest="candidate_steps",
                   help="draft depths auto chooses among, each built at start (default: 0 and the steps)")
    g.add_argument("--depth-costs", metavar="FILE.json",
                   help="step time per (batch, depth) the depth choice prices with (docs/policy.md)")
    g.add_argument("--port", type=int, default=0, help="server port (default: a free one)")
    g.add_argument("--attach", metavar="URL", help="supervise a server started elsewhere")
    g.add_argument("--admin-key-file", metavar="FILE",
                   help="with --attach: the server's admin key (its --admin-api-key), in a 0600 file "
                        "(or $SPECCTL_ADMIN_KEY)")
    g.add_argument("--sim-preset", help="simulator preset (default h200-llama8b)")
    g.add_argument("--sim-gpus", type=int, default=None, help="simulated GPUs (default: the preset's)")
    g.add_argument("--sim-load",
                   help="simulator load: idle, steady:c=N, ramp:from=A,to=B,period=S, "
                        "bursts[:low=A,high=B,period=S,duty=F] (default bursts)")
    g.add_argument("--interval", type=float, help="seconds between samples (default 0.5)")
    g.add_argument("--socket", help="control socket path (default $XDG_RUNTIME_DIR/specctl.sock)")
    g.add_argument("--log", metavar="FILE.jsonl", help="journal file (JSONL)")
    g.add_argument("--log-max-mb", type=float, metavar="MB",
                   help="rotate the journal past this size (default 64); FILE.1 .. FILE.3 are kept")
    g.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                   help="initial policy setting, e.g. --set off_at=48 (repeatable)")
    g.add_argument("sglang_args", nargs=argparse.REMAINDER,
                   help="after --: extra arguments passed to sglang.launch_server")


EXIT_RULE = ("exit codes, the same for every command: 0 done; 1 refused for the server's state (a depth it did "
             "not build, a pair that does not fit its other settings, no server running); 2 malformed or out of "
             "range (an unknown flag or setting, off_at=-1, steps=99), nothing sent; 3 no supervisor to talk to")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specctl", epilog=EXIT_RULE,
        description="Supervise an SGLang server's speculative decoding: off when it is loaded, on when it is quiet.")
    parser.add_argument("--version", action="version", version=f"specctl {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="COMMAND", required=True)

    def verb(name: str, text: str) -> argparse.ArgumentParser:
        """A subcommand whose own --help opens with the line the command list shows."""
        return sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".", epilog=EXIT_RULE)

    tui = verb("tui", "the live console (default: on the embedded simulator)")
    tui.add_argument("--connect", metavar="SOCKET", help="view and steer a running supervisor")
    _add_server_args(tui)
    from specctl.console.cli.fleet import add_source_args

    add_source_args(tui, keys=False)  # the workers' keys: --admin-key-file, one key or 'URL KEY' lines

    run = verb("run", "run a supervisor, headless (the console is `specctl tui`)")
    run.add_argument("--headless", action="store_true", help="accepted for older scripts: run is always headless")
    run.add_argument("--metrics-port", type=int, metavar="PORT",
                     help="serve Prometheus metrics (GPUs, settings, health) on this port (0: a free one)")
    run.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                     help="the address --metrics-port listens on (default 127.0.0.1; 0.0.0.0 for a scraper elsewhere)")
    _add_server_args(run)

    replay = verb("replay", "play a journal back in the console")
    replay.add_argument("file", metavar="FILE.jsonl")
    replay.add_argument("--speed", type=float, default=1.0, help="playback speed (default 1.0)")

    for name, text in (("force-off", "force speculation off"), ("force-on", "force speculation on"),
                       ("auto", "let the policy decide (default)")):
        p = verb(name, text)
        p.add_argument("--socket", help="control socket path")
        if name == "force-on":
            p.add_argument("--steps", type=int, metavar="N",
                           help="the draft depth to pin (one of the server's candidate depths)")
    setp = verb("set", "change thresholds, all or nothing: specctl set off_at=64 on_at=32")
    setp.add_argument("--reset", action="store_true",
                      help="every setting an operator chose (mode, pinned depth, thresholds, steps) and every one "
                           "adopted from elsewhere goes back to a calibrated value, else the config file's [policy] "
                           "and --set, else the server's own at its start (docs/operations.md)")
    setp.add_argument("pairs", nargs="*", metavar="KEY=VALUE",
                      help="KEY is one of " + ", ".join(f.name for f in fields(PolicySettings)) + " (docs/policy.md)")
    setp.add_argument("--socket", help="control socket path")
    status = verb("status", "the supervisor's latest snapshot")
    status.add_argument("--json", action="store_true", help="print the latest sample as one JSON line")
    status.add_argument("--socket", help="control socket path")
    server = verb("server", "start, restart or stop the model server")
    server.add_argument("action", choices=("restart", "stop", "start"))
    server.add_argument("--socket", help="control socket path")
    from specctl.console.cli import calibration, depth_costs, fleet, sglang_args, sim

    fleet.add_parser(sub)
    sglang_args.add_parser(sub)
    depth_costs.add_parser(sub)
    sim.add_parser(sub)
    calibration.add_parser(sub)
    locate = verb("locate", "print where specctl keeps its socket, config and state")
    locate.add_argument("--socket", help="control socket path")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "sglang_args", None) and args.sglang_args[0] == "--":
        args.sglang_args = args.sglang_args[1:]
    try:
        return _dispatch(parser, args)
    except KeyboardInterrupt:
        return 130


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.verb == "run":
        from specctl.console.cli.headless import run_headless

        return run_headless(args)
    if args.verb == "sglang-args":
        from specctl.console.cli.sglang_args import run

        return run(args)
    if args.verb == "fleet":
        from specctl.console.cli.fleet import run as run_fleet

        return run_fleet(args)
    if args.verb == "sim":
        from specctl.console.cli.sim import run as run_sim

        return run_sim(args)
    if args.verb == "depth-costs":
        from specctl.console.cli.depth_costs import run as run_depth_costs

        return run_depth_costs(args)
    if args.verb == "calibration":
        from specctl.console.cli.calibration import run as run_calibration

        return run_calibration(args)
    if args.verb == "tui":
        from specctl.console.tui.main import run_tui

        return run_tui(args)
    if args.verb == "replay":
        from specctl.console.tui.main import run_replay

        return run_replay(args)
    from specctl.console.cli.verbs import run_verb

    return run_verb(args)


if __name__ == "__main__":
    sys.exit(main())
