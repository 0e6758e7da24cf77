"""``python -m specctl.runtime.sim``: run the simulator as an HTTP server process.

With an admin key (``--admin-key-file``, or ``$SPECCTL_SIM_ADMIN_KEY`` from the
supervisor that starts it) its control endpoints need ``Authorization: Bearer
KEY``, as SGLang's under ``--admin-api-key``. It writes the bound port to ``--port-file`` (atomically: a temporary file,
then a rename) and prints one ``specctl-sim listening on URL`` line once it
listens; SIGTERM or SIGINT stop it cleanly with exit code 0.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import os
import signal
import sys
from pathlib import Path
from typing import Any, Literal

from aiohttp import web

from specctl.runtime.core.atomic_file import write_atomic
from specctl.runtime.core.depth_model import DepthCosts, DepthCostsError, read_costs
from specctl.runtime.core.settings import SettingsError, check_fields, unasked_floor
from specctl.runtime.core.tree_drafts import tree_depths_problem, tree_switch_enabled
from specctl.runtime.core.wire import ADMIN_PATHS, SIM_ADMIN_KEY_ENV
from specctl.runtime.sim.gpus import MAX_GPUS
from specctl.runtime.sim.load import parse_load
from specctl.runtime.sim.nospec import usage_problem
from specctl.runtime.sim.preset_model import Preset
from specctl.runtime.sim.presets import DEFAULT_PRESET, PRESETS, get_preset
from specctl.runtime.sim.routes import build_app
from specctl.runtime.sim.server import SimConfig, SimServer


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m specctl.runtime.sim",
                                 description="Simulated SGLang server with speculative decoding and specctl's policy.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port")
    ap.add_argument("--port-file", type=Path, help="write the bound port here once listening")
    ap.add_argument("--preset", default=DEFAULT_PRESET, choices=sorted(PRESETS))
    ap.add_argument("--gpus", type=int, help=f"simulated GPU count, 1..{MAX_GPUS} (default: the preset's)")
    ap.add_argument("--load", default="bursts", help="idle | steady:c=N | ramp:from=A,to=B,period=S | "
                    "bursts:low=A,high=B,period=S,duty=F (default: bursts)")
    ap.add_argument("--steps", type=int, help="draft steps when speculation is on (default: the preset's)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a policy setting, e.g. off_at=48 or mode=off (repeatable)")
    ap.add_argument("--fail-gpu", type=int, action="append", default=[], metavar="INDEX",
                    help="report this GPU as failed (repeatable)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--startup-delay", type=float, default=0.0, metavar="SECONDS",
                    help="answer /health with 503 for this long")
    ap.add_argument("--slow-off", action="store_true",
                    help="act as a server without specctl's fast off: 'off' runs SGLang's own steps-0 state")
    ap.add_argument("--admin-key-file", type=Path, metavar="FILE",
                    help="require this key (Bearer) on /set_internal_state, /flush_cache, /abort_request and /sim/* "
                         f"(default: ${SIM_ADMIN_KEY_ENV}, if set; else they are open)")
    ap.add_argument("--eager-prefill", action="store_true",
                    help="report prefill CUDA graphs off, as a server launched with --disable-prefill-cuda-graph")
    ap.add_argument("--no-plugin", action="store_true",
                    help="act as SGLang without the specctl plugin: static EAGLE-3, no specctl keys or metrics")
    costs = ap.add_mutually_exclusive_group()
    costs.add_argument("--depth-costs", type=Path, metavar="FILE.json",
                       help="price draft depths with this step-time table, as a server given SPECCTL_DEPTH_COSTS "
                            "(default: the simulator's own model)")
    costs.add_argument("--no-depth-costs", action="store_true",
                       help="no step-time table, as a server launched without SPECCTL_DEPTH_COSTS: "
                            "auto stays on/off at the steps")
    ap.add_argument("--no-speculation", action="store_true",
                    help="act as SGLang launched without --speculative-algorithm (and so without the plugin): "
                         "plain decoding, no speculative fields, specctl's keys refused")
    return ap


def config_from_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, SimConfig]:
    """Parse and validate the command line; usage errors exit with code 2 and say what is wrong."""
    ap = _parser()
    ns = ap.parse_args(argv)
    if ns.no_speculation and (why := usage_problem(steps=ns.steps, slow_off=ns.slow_off, settings=ns.set)):
        ap.error(why)
    preset = get_preset(ns.preset)
    # A tree preset (topk > 1) runs as SGLang without the plugin, as the real one must: the plugin stops a
    # tree server at start-up (SGLang's adaptive machinery refuses trees; docs/topk.md), so a tree that
    # specctl steered here would promise its operator what no real server can do. With the plugin's opt-in
    # in the environment (SPECCTL_TREE_SWITCH=1, as specctl sglang-args --topk prints it) the real plugin
    # switches the tree between its launch depth and off, and so does this one.
    tree_switch = preset.topk > 1 and tree_switch_enabled(os.environ)
    ns.no_plugin = ns.no_plugin or (preset.topk > 1 and not tree_switch)
    changes: dict[str, object] = {}
    if ns.steps is not None:
        changes["steps"] = ns.steps
    for item in ns.set:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            ap.error(f"--set expects KEY=VALUE, got {item!r}")
        changes[key.strip()] = value.strip()
    try:
        preset.default_settings().with_changes(changes)
    except SettingsError as exc:
        if exc.field == "min_accept" and "min_accept" not in changes:  # the default floor, out of reach at 1 step
            steps = check_fields({"steps": changes.get("steps", preset.steps)})["steps"]  # it coerced, or it is named
            ap.error(unasked_floor(steps, preset.default_settings().min_accept, "the default", "--set "))
        ap.error(str(exc))
    try:
        load = parse_load(ns.load)
    except ValueError as exc:
        ap.error(str(exc))
    if tree_switch and not ns.no_plugin and (why := _tree_candidates_problem(preset, changes)):
        ap.error(why)
    gpus = ns.gpus if ns.gpus is not None else preset.tp_size
    if not 1 <= gpus <= MAX_GPUS:
        ap.error(f"--gpus must be between 1 and {MAX_GPUS}, got {gpus}")
    bad = [i for i in ns.fail_gpu if not 0 <= i < gpus]
    if bad:
        ap.error(f"--fail-gpu {bad[0]} is out of range for {gpus} GPU(s)")
    if not 0.0 <= ns.startup_delay < 86_400:
        ap.error("--startup-delay must be between 0 and 86400 seconds")
    cfg = SimConfig(preset, gpus, load, changes, ns.seed, ns.startup_delay, frozenset(ns.fail_gpu), ns.slow_off,
                    ns.eager_prefill, plugin=not (ns.no_plugin or ns.no_speculation),
                    speculation=not ns.no_speculation, depth_costs=_depth_costs(ap, ns))
    return ns, cfg


def _tree_candidates_problem(preset: Preset, changes: dict[str, object]) -> str | None:
    """The plugin's start-up refusal of a tree with depths other than its launch's and off (tree_switch.py)."""
    checked = check_fields(changes)
    steps = checked.get("steps", preset.steps)
    if steps != preset.steps:
        return (f"a tree under specctl's switch drafts at its launch's --speculative-num-steps ({preset.steps}), "
                f"got steps {steps}")
    return tree_depths_problem(preset.topk, steps, checked.get("candidates") or [], "--set candidates")


def _depth_costs(ap: argparse.ArgumentParser, ns: argparse.Namespace) -> DepthCosts | None | Literal["model"]:
    """The table the policy prices depths with: a file's, none, or the simulator's own model."""
    if ns.no_depth_costs:
        return None
    if ns.depth_costs is None:
        return "model"
    try:
        return read_costs(ns.depth_costs)
    except DepthCostsError as exc:
        ap.error(f"--depth-costs {exc}")


def _write_port(path: Path, port: int) -> None:
    """Temporary file then rename, so a reader never sees a half-written port."""
    write_atomic(path, f"{port}\n", mode=0o644)


def admin_guard(key: str) -> Any:
    """An aiohttp middleware that closes the control endpoints (ADMIN_PATHS) to requests without
    ``Authorization: Bearer KEY``, as SGLang's ``--admin-api-key`` closes its ADMIN_OPTIONAL ones; reading and
    ``/generate`` stay open. A wrong key is 401, compared in constant time."""

    @web.middleware
    async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path.startswith(ADMIN_PATHS) and request.method != "OPTIONS":
            scheme, _, token = request.headers.get("Authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(token.encode(), key.encode()):
                return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    return guard


def _admin_key(ns: argparse.Namespace) -> str | None:
    """The key from --admin-key-file, else from the environment the supervisor set; None: no guard."""
    if ns.admin_key_file is not None:
        try:
            key = ns.admin_key_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            sys.exit(f"python -m specctl.runtime.sim: cannot read --admin-key-file: {exc}")
        if not key:
            sys.exit("python -m specctl.runtime.sim: --admin-key-file is empty")
        return key
    return os.environ.get(SIM_ADMIN_KEY_ENV) or None


async def _serve(ns: argparse.Namespace, cfg: SimConfig) -> None:
    server = SimServer(cfg)
    app = build_app(server)
    key = _admin_key(ns)
    if key is not None:
        app.middlewares.insert(0, admin_guard(key))  # outermost: nothing runs before the key is checked
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, ns.host, ns.port, shutdown_timeout=0.2)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    port = runner.addresses[0][1]
    if ns.port_file is not None:
        _write_port(ns.port_file, port)
    print(f"specctl-sim listening on http://{ns.host}:{port}", flush=True)
    try:
        await stop.wait()
    finally:
        await server.stop()
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    ns, cfg = config_from_args(argv)
    asyncio.run(_serve(ns, cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
