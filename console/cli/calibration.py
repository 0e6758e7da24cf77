"""``specctl calibration show|reset``: what the calibration loop measured and learned, and a way to clear it.

``show`` prints whether calibration runs, what it published and since when,
the settings the operator owns (never touched), and per batch-size bucket the
readings behind each call: steps of each state, their mean step time, the
ratio with its standard error, the break-even acceptance and the verdict.
``reset`` forgets the readings and puts back what the learned values
replaced (where the operator has not set them since). ``specctl set
calibrate=off`` freezes calibration; ``calibrate=on`` resumes it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from specctl.console.cli.exit_codes import EXIT_OK
from specctl.runtime.control.client import call


def add_parser(sub: Any) -> None:
    text = "show or reset what calibration learned from this server (docs/calibration.md)"
    p = sub.add_parser("calibration", help=text, description=text[0].upper() + text[1:] + ".")
    p.add_argument("action", choices=("show", "reset"), nargs="?", default="show")
    p.add_argument("--json", action="store_true", help="with show: the supervisor's answer as one JSON line")
    p.add_argument("--socket", help="control socket path")


def run(args: argparse.Namespace) -> int:
    from specctl.console.cli.verbs import run_verb

    return run_verb(args, _verb)


def _verb(path: Path, args: argparse.Namespace) -> int:
    result = call(path, "calibration", {"action": args.action})
    if args.action == "reset":
        restored = result.get("restored") or {}
        back = " ".join(f"{k}={v}" for k, v in restored.items()) or "nothing to put back"
        print(f"calibration reset: readings cleared; {back}")
        return EXIT_OK
    if args.json:
        print(json.dumps(result, separators=(",", ":")))
        return EXIT_OK
    for line in lines(result):
        print(line)
    return EXIT_OK


def lines(shown: dict[str, Any]) -> list[str]:
    """The show answer as an operator reads it."""
    since = shown.get("since")
    when = time.strftime("%H:%M:%S", time.localtime(since)) if isinstance(since, (int, float)) else "never"
    share = shown.get("probe_share")
    out = [f"calibration {'on' if shown.get('enabled') else 'off (frozen)'}; learned values published since {when}, "
           f"{shown.get('publishes', 0)} times; {shown.get('probes', 0)} probes, "
           f"{shown.get('probe_steps', 0)} of {shown.get('steps_seen', 0)} steps"
           + (f" ({share * 100:.2f} %)" if isinstance(share, (int, float)) else "")
           + (f", charged {cost:g} steps of what they could lose"
              if isinstance(cost := shown.get("probe_cost"), (int, float)) else "")]
    learned = shown.get("learned") or {}
    out.append("learned    " + (" ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                                         for k, v in learned.items()) or "nothing yet"))
    out.append("operator's " + (" ".join(shown.get("owned") or []) or "none (calibration may set every threshold)"))
    accept = shown.get("accept")
    out.append("acceptance " + (f"{accept:.2f} accepted draft tokens a verify" if isinstance(accept, (int, float))
                                else "not read yet"))
    rows = shown.get("buckets") or []
    if rows:
        out.append(f"{'batch':>6} {'steps on':>9} {'off':>6} {'ms on':>7} {'off':>7} {'ratio':>6} {'±':>5} "
                   f"{'break-even':>10} {'on/off':>6}  call")
        for r in rows:
            out.append(f"{r['bucket']:>6} {r['steps_on']:>9} {r['steps_off']:>6} {_f(r['t_on_ms'], 7, 2)} "
                       f"{_f(r['t_off_ms'], 7, 2)} {_f(r['ratio'], 6, 2)} {_f(r['ratio_sd'], 5, 2)} "
                       f"{_f(r['breakeven'], 10, 2)} {_f(r['gain'], 6, 2)}  {r['verdict']}")
    would = shown.get("would_publish") or {}
    out.append("next       " + (" ".join(f"{k}={v}" for k, v in would.items()) or "nothing to change"))
    return out


def _f(value: Any, width: int, digits: int) -> str:
    return f"{value:>{width}.{digits}f}" if isinstance(value, (int, float)) else f"{'-':>{width}}"
