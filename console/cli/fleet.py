"""``specctl fleet status | force-off | force-on [--steps N] | auto | set K=V ...``: many servers at once.

The inventory is the router's ``GET /workers`` (``--router``) or a plain list (``--workers``), with
``[fleet]`` in the config file as the default; each worker is read and steered directly over its
own HTTP endpoints with its own admin key (runtime/fleet). One line per worker, then a summary
line. Exit codes: 0 all ok, 1 any not, 2 usage, 3 no inventory.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import fields
from typing import Any

import aiohttp

from specctl.console.cli.exit_codes import EXIT_NO_SUPERVISOR, EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from specctl.runtime.core.settings import PolicySettings, SettingsError, check_fields
from specctl.runtime.fleet import inventory
from specctl.runtime.fleet.control import Result, send
from specctl.runtime.fleet.inventory import ROUTER_KEY_ENV, InventoryError
from specctl.runtime.fleet.keys import KeyFileError, read_keys
from specctl.runtime.fleet.state import (
    DEFAULT_TIMEOUT,
    OK,
    OUTCOMES,
    Unanswered,
    WorkerState,
    connector,
    read_all,
    router_metrics,
)
from specctl.runtime.supervisor import config_file

ACTIONS = ("status", "force-off", "force-on", "auto", "set")
EXIT_NO_INVENTORY = EXIT_NO_SUPERVISOR  # 3: nothing to talk to


def add_source_args(p: argparse.ArgumentParser, keys: bool = True) -> None:
    """Where the fleet comes from; shared by ``specctl fleet`` and ``specctl tui`` (whose own
    --admin-key-file and --timeout serve, so ``keys`` False leaves those out)."""
    g = p.add_argument_group("fleet (default: [fleet] in the config file)")
    g.add_argument("--router", metavar="URL", help="the SGLang router whose GET /workers is the inventory")
    g.add_argument("--router-key-file", metavar="FILE",
                   help=f"the router's control-plane key, role admin (or ${ROUTER_KEY_ENV})")
    g.add_argument("--workers", metavar="URL,...", action="append", default=[],
                   help="a plain list of workers, where there is no router")
    g.add_argument("--expect", metavar="URL,...", action="append", default=[],
                   help="workers that should be there: one the inventory lacks shows as missing")
    if keys:
        g.add_argument("--admin-key-file", dest="fleet_keys", metavar="FILE",
                       help="the workers' admin keys: one key, or 'URL KEY' lines (or $SPECCTL_ADMIN_KEY)")
    g.add_argument("--timeout", type=float, metavar="S", help=f"seconds per request (default {DEFAULT_TIMEOUT:g})")


def add_parser(sub: Any) -> None:
    text = "read or steer many servers at once (the router's workers or a list)"
    p = sub.add_parser("fleet", help=text, description=text[0].upper() + text[1:] + ".",
                       epilog="exit codes: 0 all ok, 1 any not, 2 usage, 3 no inventory")
    p.add_argument("action", choices=ACTIONS)
    p.add_argument("pairs", nargs="*", metavar="KEY=VALUE",
                   help="with set: " + ", ".join(f.name for f in fields(PolicySettings)))
    p.add_argument("--steps", type=int, metavar="N", help="with force-on: the draft depth to pin")
    p.add_argument("--only", metavar="URL", action="append", default=[], help="only this worker (repeatable)")
    p.add_argument("--label", metavar="KEY=VALUE", action="append", default=[],
                   help="only workers with this router label (repeatable; e.g. canary=true)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    p.add_argument("--router-metrics", action="store_true",
                   help="each worker's numbers from the router's /engine_metrics (one request) instead of its "
                        "/metrics; its /server_info is still read")
    add_source_args(p)


class Usage(Exception):
    pass


def change_of(args: argparse.Namespace) -> dict[str, Any] | None:
    """The settings change the action asks for (None for status); Usage for a malformed one."""
    if args.action != "set" and args.pairs:
        raise Usage(f"{args.action} takes no KEY=VALUE (that is `fleet set`)")
    if args.router_metrics and not (args.router or not args.workers):
        raise Usage("--router-metrics needs --router")
    if args.steps is not None and args.action != "force-on":
        raise Usage("--steps goes with force-on")
    if args.action == "status":
        return None
    if args.action == "force-off":
        return {"mode": "off"}
    if args.action == "auto":
        return {"mode": "auto"}
    if args.action == "force-on":
        return {"mode": "on", **({"steps": args.steps} if args.steps is not None else {})}
    if not args.pairs:
        raise Usage("set needs KEY=VALUE pairs, e.g. specctl fleet set off_at=64 on_at=32")
    pairs: dict[str, Any] = {}
    for pair in args.pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise Usage(f"expected KEY=VALUE, got {pair!r}")
        pairs[key.strip()] = value.strip()
    if "mode" in pairs:
        raise Usage("the mode is set by force-on, force-off and auto, not set")
    try:
        return check_fields(pairs)
    except SettingsError as exc:
        raise Usage(str(exc)) from None


def source(args: argparse.Namespace) -> dict[str, Any]:
    """The inventory's inputs: the command line, else [fleet] in the config file."""
    table = config_file.load().fleet
    router = args.router or (None if args.workers else table.get("router"))
    key_file = args.router_key_file or table.get("router_key_file")
    return {
        "router": router,
        "router_key": _router_key(key_file),
        "workers": inventory.parse_urls(args.workers) or ([] if args.router else table.get("workers", [])),
        "expected": inventory.parse_urls(args.expect) or table.get("expect", []),
        "keys": read_keys(args.fleet_keys or table.get("admin_key_file")),
        "timeout": args.timeout if args.timeout is not None else float(table.get("timeout", DEFAULT_TIMEOUT)),
    }


def _router_key(path: str | None) -> str | None:
    import os
    from pathlib import Path

    if path is None:
        return os.environ.get(ROUTER_KEY_ENV) or None
    try:
        key = Path(path).expanduser().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise KeyFileError(f"cannot read the router key file {path}: {exc}") from None
    if not key:
        raise KeyFileError(f"the router key file {path} is empty")
    return key


async def execute(src: dict[str, Any], change: dict[str, Any] | None, only: list[str],
                  labels: dict[str, str], via_router: bool = False) -> tuple[list[WorkerState], list[Result] | None]:
    """Inventory, read every selected worker, then (for a change) check and send: one session throughout."""
    async with aiohttp.ClientSession(connector=connector(128)) as session:  # up to 256 requests at once
        workers = await inventory.load(session, router=src["router"], router_key=src["router_key"],
                                       workers=src["workers"], expected=src["expected"], timeout=src["timeout"])
        chosen = inventory.select(workers, only, labels)
        if not chosen:
            raise InventoryError("no worker matches --only/--label (the inventory has "
                                 f"{len(workers)}: {', '.join(w.url for w in workers[:4])}"
                                 f"{', ...' if len(workers) > 4 else ''})")
        known = None
        if via_router and src["router"]:
            try:
                known = await router_metrics(session, src["router"], src["router_key"], src["timeout"])
            except Unanswered as exc:
                raise InventoryError(f"--router-metrics: {exc.detail}") from None
        states = await read_all(session, chosen, src["timeout"], known=known)
        if change is None:
            return states, None
        return states, await send(session, states, change, src["keys"], src["timeout"])


def run(args: argparse.Namespace) -> int:
    try:
        change = change_of(args)
        labels = inventory.parse_labels(args.label)
        if args.timeout is not None and not 0 < args.timeout <= 600:
            raise Usage("--timeout must be above 0 and at most 600 seconds")
        src = source(args)
    except (Usage, ValueError, KeyFileError, config_file.ConfigFileError) as exc:
        print(f"specctl fleet: {exc}", file=sys.stderr)
        return EXIT_USAGE
    t0 = time.monotonic()
    try:
        states, results = asyncio.run(execute(src, change, args.only, labels, args.router_metrics))
    except InventoryError as exc:
        print(f"specctl fleet: {exc.message}", file=sys.stderr)
        return EXIT_NO_INVENTORY
    wall = time.monotonic() - t0
    rows = [Result(s.url, s.outcome, s.detail) for s in states] if results is None else results
    if args.json:
        print(json.dumps(_as_json(args.action, states, results, wall), separators=(",", ":")))
    else:
        width = max(len(r.url) for r in rows)
        for s, r in zip(states, rows):
            print(_line(s, r, width, results is None))
        print(summary(args.action, rows, wall))
    return EXIT_OK if all(r.outcome == OK for r in rows) else EXIT_REFUSED


def summary(action: str, rows: list[Result], wall: float) -> str:
    """``force-off: 3 ok, 1 unreachable (4 workers, 0.05 s)``: every outcome that occurred, in OUTCOMES' order."""
    counts = {o: sum(1 for r in rows if r.outcome == o) for o in OUTCOMES}
    said = ", ".join(f"{n} {o}" for o, n in counts.items() if n)
    return f"{action}: {said} ({len(rows)} worker{'s' if len(rows) != 1 else ''}, {wall:.2f} s)"


def _line(s: WorkerState, r: Result, width: int, status: bool) -> str:
    head = f"{r.url:<{width}}  {r.outcome:<12}"
    if status and s.spec is not None:
        row = s.row()
        return (f"{head}  mode {row['mode']:<4} {'on ' if row['on'] else 'off'} depth {row['depth']}  "
                f"batch {_n(row['batch'])}  accept {_n(row['accept_len'], 2)}  tok/s {_n(row['gen_tps'])}  "
                f"switches {_n(row['switches'])}")
    return f"{head}  {r.detail}" if r.detail else head.rstrip()


def _n(value: Any, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _as_json(action: str, states: list[WorkerState], results: list[Result] | None, wall: float) -> dict[str, Any]:
    workers = []
    for i, s in enumerate(states):
        row = s.row()
        if results is not None:
            row.update(result=results[i].outcome, detail=results[i].detail)
        workers.append(row)
    outcomes = [w.get("result", w["state"]) for w in workers]
    return {"command": action, "ok": all(o == OK for o in outcomes), "wall_s": round(wall, 3),
            "summary": {o: outcomes.count(o) for o in OUTCOMES if o in outcomes}, "workers": workers}
